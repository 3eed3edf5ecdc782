"""A committer's check that its version is still intact in the store, just before and just after its head swap.

Between the upload and the swap, and between the swap and reporting success, something else may delete
the version's files: a GC or cleanup on a host whose clock runs ahead (it judged them days old), an
operator, a crashed rollback. Without a look, the run would exit 0 ("chain version 2") with chain.json
naming a version whose payload is gone, and every later read would fail. So the committer lists its
version directory (one listing: names and sizes, no payload bytes) and re-reads ``block.pb``; what is
missing it uploads again, create-only, from the payload it still holds (the bytes are fixed by the
block's hashes, so this restores, never changes, the version); anything still missing or different
afterwards is CommitDamagedError, never a success.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from ml8s.chain import limits, paths
from ml8s.chain.models import ChainVersion, LocalFile, PayloadSource
from ml8s.chain.versions import ChainVersions
from ml8s.chain.wire import content_hash_txt, encode_block, metadata_json
from ml8s.errors import CommitDamagedError, NotFoundError, StoreError

log = logging.getLogger(__name__)


def expected(chain: ChainVersions, version: ChainVersion) -> dict[str, int]:
    """Key -> size of every object the version directory must hold."""
    at = chain.version_key
    sizes = {at(version.version_dir, paths.PAYLOAD, f.name): f.size for f in version.header.files}
    sizes[at(version.version_dir, paths.METADATA)] = len(metadata_json(version.block))
    sizes[at(version.version_dir, paths.CONTENT_HASH)] = len(content_hash_txt(version.block))
    sizes[at(version.version_dir, paths.BLOCK)] = len(encode_block(version.block))
    return sizes


def damage(chain: ChainVersions, version: ChainVersion) -> tuple[list[str], list[str]]:
    """(missing keys, keys present with another size or, for block.pb, other bytes) of ``version``."""
    want = expected(chain, version)
    present = {info.key: info.size for info in chain.objects(chain.version_key(version.version_dir))}
    missing = sorted(k for k in want if k not in present)
    wrong = sorted(k for k in want if k in present and present[k] != want[k])
    block = chain.version_key(version.version_dir, paths.BLOCK)
    if block in present and block not in wrong:
        try:
            if chain.store.get(block, max_bytes=limits.BLOCK_MAX_BYTES) != encode_block(version.block):
                wrong.append(block)
        except NotFoundError:
            missing.append(block)
        except StoreError as exc:
            log.warning("cannot re-read %s: %s", chain.store.uri(block), exc.message)
            wrong.append(block)
    return missing, wrong


def ensure_intact(chain: ChainVersions, version: ChainVersion, payload: Mapping[str, PayloadSource], when: str) -> int:
    """Restore what is missing of ``version`` (module docstring); the number of objects restored.
    CommitDamagedError when it cannot be made whole; ``when`` says at which step (for the message)."""
    missing, wrong = damage(chain, version)
    if not missing and not wrong:
        return 0
    where = chain.uri(paths.VERSIONS, version.version_dir)
    log.warning("%s %s: %d file(s) missing, restoring them: %s", when, where, len(missing), missing)
    restored = len(missing)
    if not wrong:
        _restore(chain, version, payload, missing)
        missing, wrong = damage(chain, version)
    if missing or wrong:
        raise CommitDamagedError(
            f"{when}, {where} is no longer intact: missing {missing or 'nothing'}, changed {wrong or 'nothing'}; "
            "expected every file the block lists (deleted by a GC or cleanup judging age by a clock ahead of the "
            "store's?); run `ml8s chain verify`, and commit again once the head is repaired"
        )
    return restored


def _restore(
    chain: ChainVersions, version: ChainVersion, payload: Mapping[str, PayloadSource], keys: list[str]
) -> None:
    """Upload ``keys`` of the version again, create-only, block.pb last (as write_version does)."""
    at = chain.version_key
    sources: dict[str, PayloadSource] = {
        at(version.version_dir, paths.PAYLOAD, f.name): payload[f.name] for f in version.header.files
    }
    sources[at(version.version_dir, paths.METADATA)] = metadata_json(version.block)
    sources[at(version.version_dir, paths.CONTENT_HASH)] = content_hash_txt(version.block)
    sources[at(version.version_dir, paths.BLOCK)] = encode_block(version.block)
    block = at(version.version_dir, paths.BLOCK)
    for key in sorted(keys, key=lambda k: (k == block, k)):
        source = sources[key]
        try:
            if isinstance(source, LocalFile):
                put = chain.store.put_staged if source.staged else chain.store.put_file_expecting
                put(key, source.path, tmp_key=chain.tmp_key(), sha256=source.sha256, size=source.size)
            else:
                chain.store.put_if_absent(key, source)
        except (StoreError, OSError) as exc:
            log.warning("could not restore %s: %s", chain.store.uri(key), exc)
