"""The chain's storage layer: a chain's head and versions on any :class:`ml8s.store.Store`.

``ChainVersions`` reads, writes and caches versions and swaps the head; it knows nothing about commits.
The commit protocol (commit.py), the run index (runindex.py) and retries (retry.py) are built on it,
and ``ChainStore`` (chain_store.py) puts both behind one facade; so imports go one way, upwards.

Reads trust nothing but hashes: the head names a version directory, whose ``block.pb`` must hash to
the head's block hash; a child names its parent's directory (counter - 1, parent semver, parent hash),
whose block must hash to the parent hash the child records. So walking the chain is one GET per
version, never a listing. Verified blocks are immutable, so they are cached per instance (a long-lived
follower or committer reads each block once), and so are create-only objects (``put_once``).
integrity.py re-reads everything without these caches.
"""

from __future__ import annotations

import logging
import uuid
from collections import defaultdict
from collections.abc import Iterator, Mapping

from pydantic import ValidationError

from ml8s.chain import paths
from ml8s.chain._util import list_objects, prune_empty_dirs, sha256_hex
from ml8s.chain.events import AuditLog
from ml8s.chain.limits import BLOCK_MAX_BYTES, HEAD_MAX_BYTES, PAYLOAD_MEMORY_MAX_BYTES, RECORD_MAX_BYTES
from ml8s.chain.models import ChainHead, ChainVersion, LocalFile, PayloadSource
from ml8s.chain.root import TrustRoot
from ml8s.chain.signing import SigningKey
from ml8s.chain.wire import content_hash_txt, decode_block, encode_block, head_json, metadata_json
from ml8s.errors import (
    ChainCorruptionError,
    ChainError,
    ChainHeadMissingError,
    ChecksumError,
    ConfigError,
    IntegrityError,
    NotFoundError,
    ObjectTooLargeError,
    StoreError,
    UnsafeObjectError,
    VersionNotFoundError,
)
from ml8s.identity.settings import worker_id
from ml8s.store import ObjectInfo, Store
from ml8s.text import first_problem

log = logging.getLogger(__name__)
# Version files up to this size are written create-only in one request (put_if_absent: immutable by
# construction, the server checks Content-MD5/sha256); larger ones go through put_atomic's multipart.
SINGLE_PUT_MAX = 512 * 1024 * 1024


class ChainVersions:
    """The stored versions and head of chain ``chain_name`` under ``{store root}/ml8s_chain/{chain_name}/``
    (layout: paths.py). Readers (integrity, follower, GC) use it as is; committers use ``ChainStore``.
    """

    def __init__(
        self, store: Store, chain_name: str, *, signer: SigningKey | None = None, trust_root: TrustRoot | None = None
    ) -> None:
        if not paths.CHAIN_NAME.fullmatch(chain_name):
            raise ConfigError(f"chain name {chain_name!r}: expected letters, digits, '.', '_' or '-' (at most 128)")
        self.store, self.name, self.prefix = store, chain_name, f"{paths.ROOT}/{chain_name}"
        self.signer = signer  # signs the blocks this instance commits (trust.py: when the chain requires it)
        self.trust_root = trust_root  # the pinned root a committer checks the policies against (root.py)
        self.audit = AuditLog(store, self.key(paths.AUDIT), chain_name)
        self._versions: dict[str, ChainVersion] = {}  # version dir -> verified version
        self._created: dict[str, bytes] = {}  # key -> bytes of a create-only object (put_once)

    # -- names ----------------------------------------------------------------------------------
    def key(self, *parts: str) -> str:
        return "/".join([self.prefix, *parts])

    def version_key(self, version_dir: str, *parts: str) -> str:
        return self.key(paths.VERSIONS, version_dir, *parts)

    def uri(self, *parts: str) -> str:
        return self.store.uri(self.key(*parts))

    # -- reads ----------------------------------------------------------------------------------
    def read_head(self) -> tuple[ChainHead, str] | None:
        """The head pointer and its compare-and-swap token; None before ``init()``."""
        try:
            found = self.store.get_versioned(self.key(paths.HEAD), max_bytes=HEAD_MAX_BYTES)
        except NotFoundError:
            return None
        try:
            head = ChainHead.model_validate_json(found.data)
        except ValidationError as exc:
            # its first problem only: pydantic's text runs over lines and echoes the (store writer's) input
            why = first_problem(exc)
            raise ChainCorruptionError(None, f"{self.uri(paths.HEAD)} is no valid head: {why}", check="head") from exc
        if head.chain_name != self.name:
            raise ChainCorruptionError(None, f"{self.uri(paths.HEAD)} names chain {head.chain_name!r}", check="head")
        return head, found.token

    def head(self) -> ChainVersion:
        """The head version, its block verified against the head pointer."""
        return self.at(self.require_head()[0])

    def require_head(self) -> tuple[ChainHead, str]:
        """:meth:`read_head`, or the error saying why there is none: ChainHeadMissingError for a chain whose
        head was lost (it has history), VersionNotFoundError for one never initialized (a mistyped name)."""
        pointer = self.read_head()
        if pointer is None:
            if (missing := self.missing_head()) is not None:
                raise missing
            raise VersionNotFoundError(f"chain {self.name!r} at {self.uri()} is not initialized (no chain.json)")
        return pointer

    def missing_head(self) -> ChainHeadMissingError | None:
        """Without a head: the error to raise when the chain has history (so a head existed and was lost),
        None for a chain never initialized. Versions, run index and audit events are all written only
        while a head exists; a head that appears meanwhile (a racing init) means nothing is lost."""
        # Only versions above genesis count: a racing init's genesis exists before its head swap.
        history = [i.key for i in self.objects(self.key(paths.VERSIONS)) if self._above_genesis(i.key)][-1:]
        history += [i.key for part in (paths.RUNS, paths.AUDIT) for i in self.objects(self.key(part))[:1]]
        if not history or self.read_head() is not None:
            return None
        return ChainHeadMissingError(
            None,
            f"{self.uri(paths.HEAD)} is missing but the chain has history ({self.store.uri(history[0])}, ...): "
            "restore the head from a known block hash (verify --known-head, an anchor); a new genesis would fork it",
            check="head",
        )

    def at(self, head: ChainHead) -> ChainVersion:
        """The version a head pointer names, checked against it."""
        version = self.load(head.version_dir)
        if (version.counter, version.block_hash) != (head.counter, head.block_hash):
            raise ChainCorruptionError(
                head.counter,
                f"{self.uri(paths.HEAD)} names block {head.block_hash} at counter {head.counter}, but "
                f"{head.version_dir} holds block {version.block_hash} at counter {version.counter}",
                check="head",
            )
        return version

    def load(self, version_dir: str) -> ChainVersion:
        """The complete version in ``version_dir``, its block hash and content hash verified."""
        if (cached := self._versions.get(version_dir)) is not None:
            return cached
        if paths.parse_version_dir(version_dir) is None:
            raise VersionNotFoundError(f"{version_dir!r} is not a version directory name of chain {self.name!r}")
        where = self.store.uri(self.version_key(version_dir, paths.BLOCK))
        try:
            data = self.store.get(self.version_key(version_dir, paths.BLOCK), max_bytes=BLOCK_MAX_BYTES)
        except NotFoundError as exc:
            raise VersionNotFoundError(f"{where} does not exist: the version is missing or incomplete") from exc
        block = decode_block(data, where=where)
        header = block.header
        if paths.version_dir(header.counter, header.semver, block.block_hash) != version_dir:
            raise ChainCorruptionError(header.counter, f"{where} does not match its directory name", check="dir_name")
        version = ChainVersion(block=block, version_dir=version_dir)
        self._versions[version_dir] = version
        return version

    def walk(self, start: ChainVersion | None = None) -> Iterator[ChainVersion]:
        """Versions from ``start`` (default: the head) down to genesis, each found by its child's parent hash."""
        version = start if start is not None else self.head()
        while True:
            yield version
            if version.counter == 0 or not version.header.parent_block_hash:
                if version.counter != 0 or version.header.parent_block_hash:
                    raise ChainCorruptionError(
                        version.counter, "only genesis (counter 0) has no parent", check="genesis"
                    )
                return
            version = self._parent(version)

    def get(self, counter: int) -> ChainVersion:
        """The version with ``counter`` on the chain (not an orphan that happens to share the counter)."""
        for version in self.walk():
            if version.counter <= counter:
                if version.counter == counter:
                    return version
                break
        raise VersionNotFoundError(f"chain {self.name!r} has no version {counter}")

    def fetch_payload(self, version: ChainVersion, name: str) -> bytes:
        """One payload file's bytes, checked against the size and sha256 its block records."""
        entry = next((f for f in version.header.files if f.name == name), None)
        if entry is None:
            names = [f.name for f in version.header.files]
            raise VersionNotFoundError(f"version {version.counter} of {self.name!r} has no file {name!r} ({names})")
        where = self.store.uri(self.version_key(version.version_dir, paths.PAYLOAD, name))
        bound = min(entry.size, PAYLOAD_MEMORY_MAX_BYTES)
        try:
            data = self.store.get(self.version_key(version.version_dir, paths.PAYLOAD, name), max_bytes=bound)
        except NotFoundError as exc:
            raise ChecksumError(f"{where} is missing", check="payload_missing") from exc
        except (ObjectTooLargeError, UnsafeObjectError) as exc:  # never read past the size the block records
            check = "payload_size" if isinstance(exc, ObjectTooLargeError) else "unsafe_object"
            raise ChecksumError(exc.message, check=check) from exc
        if len(data) != entry.size:
            raise ChecksumError(f"{where}: {len(data)} bytes, the block records {entry.size}", check="payload_size")
        if (digest := sha256_hex(data)) != entry.sha256:
            raise ChecksumError(f"{where}: sha256 {digest}, the block records {entry.sha256}", check="payload_hash")
        return data

    def version_dirs(self) -> dict[str, list[ObjectInfo]]:
        """Every object under ``versions/``, grouped by version directory (complete or not, chained or not)."""
        groups: dict[str, list[ObjectInfo]] = defaultdict(list)
        base = self.key(paths.VERSIONS) + "/"
        for info in self.objects(self.key(paths.VERSIONS)):
            groups[info.key.removeprefix(base).split("/", 1)[0]].append(info)
        return dict(groups)

    def objects(self, prefix: str) -> list[ObjectInfo]:
        """Every object under ``prefix``, robust to files vanishing mid-listing (_util.list_objects)."""
        return list_objects(self.store, prefix)

    # -- writes -------------------------------------------------------------------------------
    def write_version(self, version: ChainVersion, payload: Mapping[str, PayloadSource], written: list[str]) -> None:
        """Upload a version's files, ``block.pb`` last; ``written`` collects the keys as they land.

        Local files are streamed (put_file_expecting) and what landed is checked against the block's
        sha256 and size: a file changed since it was hashed fails the commit, never the chain. A file
        staged in the store (``LocalFile.staged``: hashed as it was written) is linked into place."""
        at = self.version_key
        files: list[tuple[str, PayloadSource]] = [
            (at(version.version_dir, paths.PAYLOAD, f.name), payload[f.name]) for f in version.header.files
        ]
        files += [
            (at(version.version_dir, paths.METADATA), metadata_json(version.block)),
            (at(version.version_dir, paths.CONTENT_HASH), content_hash_txt(version.block)),
            (at(version.version_dir, paths.BLOCK), encode_block(version.block)),
        ]
        for key, data in files:
            if isinstance(data, LocalFile):
                written.append(key)  # before the upload: a half-done one is deleted too
                try:
                    put = self.store.put_staged if data.staged else self.store.put_file_expecting
                    put(key, data.path, tmp_key=self.tmp_key(), sha256=data.sha256, size=data.size)
                except IntegrityError as exc:
                    raise ChecksumError(
                        f"{data.path} changed while committing: {exc.message}", check="payload_hash"
                    ) from exc
                continue
            if len(data) > SINGLE_PUT_MAX:
                self.store.put_atomic(key, data, tmp_key=self.tmp_key())
            elif not self.store.put_if_absent(key, data):
                raise ChainError(f"{self.store.uri(key)} already exists: version directories are created once")
            written.append(key)
        self._versions[version.version_dir] = version

    def swap_head(self, version: ChainVersion, token: str | None) -> None:
        """Point ``chain.json`` at ``version`` if it still has ``token`` (None: if there is none yet).

        Raises PreconditionFailedError when the head moved, RetryableStoreError when the outcome is unknown.
        """
        head = ChainHead(
            chain_name=self.name,
            counter=version.counter,
            block_hash=version.block_hash,
            version_dir=version.version_dir,
        )
        self.store.put_if_match(self.key(paths.HEAD), head_json(head), token)

    def put_once(self, key: str, data: bytes) -> bytes:
        """Create ``key`` with ``data`` unless it exists; the bytes it holds (ours or an earlier writer's).

        A create-only object never changes once written, so its bytes are remembered: asking again reads nothing.
        """
        if (known := self._created.get(key)) is None:
            known = data if self.store.put_if_absent(key, data) else self.store.get(key, max_bytes=RECORD_MAX_BYTES)
            self._created[key] = known
        return known

    def discard(self, written: list[str]) -> bool:
        """Delete an upload, ``block.pb`` first (a half-deleted version is incomplete, never "complete"
        with files missing). False when some deletion failed: GC removes the rest after the grace period."""
        for key in reversed(written):
            try:
                self.store.delete(key)
            except StoreError as exc:
                log.warning("could not delete %s (left for GC): %s", self.store.uri(key), exc.message)
                return False
        for version_dir in {k.removeprefix(self.key(paths.VERSIONS) + "/").split("/", 1)[0] for k in written}:
            self._versions.pop(version_dir, None)
            prune_empty_dirs(self.store, self.version_key(version_dir), include_base=True)
        return True

    # -- helpers --------------------------------------------------------------------------------
    def _parent(self, child: ChainVersion) -> ChainVersion:
        """The parent, from the directory its child names (counter - 1, parent semver, parent hash): no listing."""
        header, counter = child.header, child.counter - 1
        name = paths.version_dir(counter, header.parent_semver, header.parent_block_hash)
        try:
            parent = self.load(name)
        except VersionNotFoundError as exc:
            raise ChainCorruptionError(
                child.counter, f"{child.version_dir} names parent {name}: {exc.message}", check="missing_parent"
            ) from exc
        if parent.block_hash != header.parent_block_hash:
            raise ChainCorruptionError(
                child.counter, f"{name} holds {parent.block_hash}, not the parent named", check="parent_link"
            )
        return parent

    def _above_genesis(self, key: str) -> bool:
        parsed = paths.parse_version_dir(key.removeprefix(self.key(paths.VERSIONS) + "/").split("/", 1)[0])
        return parsed is not None and parsed[0] > 0

    def tmp_key(self) -> str:
        return self.key(paths.TMP, f"{worker_id()}-{uuid.uuid4().hex}")

    # last in the class: below it, ``list`` in an annotation would mean this method
    def list(self) -> list[ChainVersion]:
        """Every version on the chain, genesis first."""
        return list(reversed(list(self.walk())))
