"""The per-version rules of verify.py, as pure functions returning ``(check, reason)`` pairs."""

from __future__ import annotations

import os

from ml8s.chain import paths
from ml8s.chain.models import ChainVersion, PayloadKind
from ml8s.chain.semver import GENESIS_SEMVER, bump
from ml8s.chain.wire import content_hash_txt, metadata_json
from ml8s.errors import NotFoundError, ObjectTooLargeError, UnsafeObjectError
from ml8s.store import LocalStore, ObjectInfo, Store
from ml8s.tempdirs import owned_tempdir

Problems = list[tuple[str, str]]


def link(child: ChainVersion, parent: ChainVersion) -> Problems:
    """What is wrong with ``child`` following ``parent`` (the block its parent hash names)."""
    found: Problems = []
    if child.header.parent_semver != parent.semver:
        found.append(("parent_link", f"names parent semver {child.header.parent_semver}, not {parent.semver}"))
    if child.counter != parent.counter + 1:
        found.append(("counter_sequence", f"counter {child.counter} follows parent counter {parent.counter}"))
    if child.global_step < parent.global_step:
        found.append(("global_step", f"global_step {child.global_step} < parent's {parent.global_step}"))
    if child.header.payload_kind is PayloadKind.GENESIS:
        found.append(("genesis", "a genesis block with a parent"))
    elif child.semver != (want := bump(parent.header, child.header.architecture, child.header.parameter_count)):
        found.append(("semver", f"semver {child.semver}, expected {want} from parent {parent.semver}"))
    return found


def genesis(version: ChainVersion) -> Problems:
    header = version.header
    shape = (header.counter, header.payload_kind, header.semver, header.parent_semver, header.files)
    if shape != (0, PayloadKind.GENESIS, GENESIS_SEMVER, "", ()):
        return [("genesis", "the first block must have counter 0, kind genesis, semver 0.0.0, no parent, no files")]
    return []


def files(store: Store, base: str, version: ChainVersion, objects: list[ObjectInfo], payloads: bool) -> Problems:
    """The version directory ``base`` (its listed ``objects``) against the block: derived files, payloads."""
    found: Problems = []
    present = {o.key.removeprefix(base): o for o in objects}
    derived = ((paths.METADATA, metadata_json(version.block)), (paths.CONTENT_HASH, content_hash_txt(version.block)))
    for name, want in derived:
        check = name.replace(".", "_")
        try:
            if store.get(base + name, max_bytes=len(want)) != want:
                found.append((check, f"{name} disagrees with block.pb"))
        except NotFoundError:
            found.append((check, f"{name} is missing"))
        except ObjectTooLargeError:
            found.append((check, f"{name} disagrees with block.pb (larger than the {len(want)} bytes it derives)"))
        except UnsafeObjectError as exc:
            found.append(("unsafe_object", exc.message))
    listed = {f"{paths.PAYLOAD}/{f.name}" for f in version.header.files}
    for extra in sorted(set(present) - listed - {paths.METADATA, paths.CONTENT_HASH, paths.BLOCK}):
        found.append(("extra_file", f"{extra} is not listed in the block"))
    for entry in version.header.files:
        info = present.get(f"{paths.PAYLOAD}/{entry.name}")
        if info is None:
            found.append(("payload_missing", f"payload {entry.name} is missing"))
        elif info.size != entry.size:
            found.append(("payload_size", f"payload {entry.name}: {info.size} bytes, block says {entry.size}"))
        elif payloads:
            try:
                digest = stored_sha256(store, info)
            except (ObjectTooLargeError, UnsafeObjectError) as exc:
                found.append(("unsafe_object", exc.message))
                continue
            if digest != entry.sha256:
                found.append(("payload_hash", f"payload {entry.name}: sha256 {digest}, block says {entry.sha256}"))
    return found


def stored_sha256(store: Store, info: ObjectInfo) -> str:
    """sha256 of a stored object without holding it in memory: the local backend streams the file
    (``Store.checksum``, its version token); other backends download it to a temporary file (streamed),
    since an S3 ETag is no sha256."""
    try:
        if isinstance(store, LocalStore):
            return store.checksum(info.key)
        with owned_tempdir("ml8s-verify-") as tmp:
            return store.download(info.key, os.path.join(tmp, "object")).sha256
    except NotFoundError:
        return "<missing>"
