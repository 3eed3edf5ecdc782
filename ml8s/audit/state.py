"""A run as the verifier sees it: ARTIFACT_ROOT's listing, and its files read (once) from the store.

Nothing here writes. Large files are hashed by streaming them to a temporary file, never held in memory.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping

from ml8s.audit.offline import Digest
from ml8s.chain import Anchor
from ml8s.contract import (
    ConfigSnapshot,
    FingerprintRecord,
    Invalid,
    Manifest,
    TrainingMetadata,
    Unavailable,
    layout,
    parse,
)
from ml8s.errors import IntegrityError, NotFoundError, ObjectTooLargeError, UnsafeObjectError
from ml8s.identity.uri import parse_root_uri, same_local_folder
from ml8s.store import ObjectInfo, Store, open_store
from ml8s.store.root_shape import check_local_root
from ml8s.tempdirs import owned_tempdir

_SMALL = layout.RECORD_MAX_BYTES  # files up to this size are read whole (and kept); larger ones are streamed


class RunState:
    """One run under a pipeline root. ``env`` is where CHAIN_NAME and the like are read from; ``tracking_uri``
    overrides the MLflow that manifest.json records (``mlflow_refs.choose_tracking_uri``)."""

    def __init__(
        self,
        root_uri: str,
        run_id: str,
        env: Mapping[str, str],
        *,
        store: Store | None = None,
        tracking_uri: str = "",
    ) -> None:
        if store is None:
            uri = parse_root_uri(root_uri, variable="PIPELINE_ROOT_URI").uri
            check_local_root(uri)
            store = open_store(uri)
        self.store = store
        self.tracking_uri = tracking_uri
        self.root_uri = self.store.root_uri
        self.run_id = run_id
        self.env = env
        self.prefix = layout.run_prefix(run_id)
        self.artifact_root = f"{self.root_uri}/{self.prefix}"
        self._listing: dict[str, ObjectInfo] | None = None
        self._irregular: list[str] | None = None
        self._bytes: dict[str, bytes] = {}
        self._digests: dict[str, Digest] = {}
        self.anchor: Anchor | None = None  # a chain anchor the chain check verifies against (verify_run)

    def uri(self, rel: str) -> str:
        return f"{self.artifact_root}/{rel}"

    def as_recorded(self, recorded: str) -> str:
        """ARTIFACT_ROOT as a record spells it when the record names this very folder by another local name (a
        symbolic link on the way: no other root), else this run's ARTIFACT_ROOT."""
        return recorded if same_local_folder(recorded, self.artifact_root) else self.artifact_root

    def listing(self) -> dict[str, ObjectInfo]:
        """Every object under ARTIFACT_ROOT, keyed by its path relative to it."""
        if self._listing is None:
            base = self.prefix + "/"
            self._listing = {i.key[len(base) :]: i for i in self.store.list(base) if i.key.startswith(base)}
        return self._listing

    def irregular(self) -> list[str]:
        """Entries under ARTIFACT_ROOT that are neither regular files nor directories (symbolic links, FIFOs,
        devices), relative to it, sorted; ``""`` for ARTIFACT_ROOT itself, or a directory on the way to it, being
        one. The listing leaves them out (or, for a link to a file, lists its target), so no check saw them."""
        if self._irregular is None:
            base = self.prefix + "/"
            found = self.store.irregular(self.prefix)
            self._irregular = sorted({key.removeprefix(base) if key.startswith(base) else "" for key in found})
        return self._irregular

    def read(self, rel: str, max_bytes: int | None = None) -> bytes:
        """A file's bytes; :class:`Unavailable` when it is missing, :class:`Invalid` when it is larger than
        ``max_bytes`` (a record by default: a sparse 64 GiB one must not be read whole; an audit bundle reads its
        model files up to its own bound) or a link (its target may lie outside the root and be readable by root
        alone: an audit bundle would carry it)."""
        limit = _SMALL if max_bytes is None else max_bytes
        if rel not in self._bytes:
            # Not listed is not always missing: the listing leaves out a FIFO, a directory or a dangling link, which
            # the strict read names (it was reported "missing", which sends an auditor looking for a deleted file).
            info = self.listing().get(rel)
            if info is not None and info.size > limit:
                what = "a record of " if max_bytes is None else ""
                raise Invalid(f"{rel} holds {info.size} bytes; expected {what}at most {limit} bytes (not read)")
            try:
                self._bytes[rel] = self.store.get(f"{self.prefix}/{rel}", max_bytes=limit)
            except NotFoundError as exc:
                raise Unavailable(f"{rel} is missing") from exc
            except (UnsafeObjectError, ObjectTooLargeError) as exc:
                raise Invalid(f"{rel}: {exc.message}") from exc
        return self._bytes[rel]

    def digest(self, rel: str) -> Digest:
        """(sha256, size) of a present file, streamed for large files."""
        if rel not in self._digests:
            info = self.listing()[rel]
            if rel in self._bytes or info.size <= _SMALL:
                try:
                    data = self.read(rel)
                except Invalid as exc:  # a link where an artifact belongs: the checksum check FAILs, never SKIPs
                    raise IntegrityError(str(exc)) from exc
                self._digests[rel] = (hashlib.sha256(data).hexdigest(), len(data))
            else:
                # hashed as it streams: no copy in $TMPDIR (a 64 GiB sparse file wrote 64 GiB there)
                try:
                    result = self.store.digest(f"{self.prefix}/{rel}")
                except UnsafeObjectError as exc:
                    raise IntegrityError(f"{rel}: {exc.message}") from exc
                self._digests[rel] = (result.sha256, result.size)
        return self._digests[rel]

    def head(self, rel: str, size: int) -> bytes:
        """The first ``size`` bytes of a present file (large files are streamed to a temporary file)."""
        if rel in self._bytes or self.listing()[rel].size <= _SMALL:
            return self.read(rel)[:size]
        with owned_tempdir("ml8s-verify-") as tmp:
            path = os.path.join(tmp, "artifact")
            self.store.download(f"{self.prefix}/{rel}", path)
            with open(path, "rb") as handle:  # never more than the file: read(n) allocates n bytes first
                return handle.read(min(size, os.fstat(handle.fileno()).st_size))

    def snapshot(self) -> ConfigSnapshot:
        return parse(layout.CONFIG_SNAPSHOT, self.read(layout.CONFIG_SNAPSHOT), ConfigSnapshot)

    def fingerprint_record(self) -> FingerprintRecord:
        return parse(layout.DATA_FINGERPRINT, self.read(layout.DATA_FINGERPRINT), FingerprintRecord)

    def metadata(self) -> TrainingMetadata:
        return parse(layout.TRAINING_METADATA, self.read(layout.TRAINING_METADATA), TrainingMetadata)

    def manifest(self) -> Manifest:
        return parse(layout.MANIFEST, self.read(layout.MANIFEST), Manifest)
