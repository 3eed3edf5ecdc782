"""An append-only history of record generations under one prefix of an artifact store.

Layout under the prefix::

    gen-000000.f32   raw records of generation 0 (no header: mappable as they are)
    gen-000000.json  its manifest (GenerationInfo: rows, bytes, sha256, schema hash)
    ...
    history.json     the index (HistoryIndex): the lineage's schema and every generation, oldest first
    .tmp/            in-flight uploads

An append writes the record file, then its manifest, then the index, each atomically; the index is
replaced by compare-and-swap on the version read at the start, so it is the commit point. A crash before
it leaves an unlisted file that the next append of that generation replaces; a listed generation is never
rewritten, and a history has one writer at a time (a second one is refused at the index swap, or earlier).
"""

from __future__ import annotations

import os
import uuid

from ml8s.errors import (
    GenerationMissingError,
    NotFoundError,
    PreconditionFailedError,
    RecordsAppendError,
    RecordsChecksumError,
    RecordsSchemaMismatchError,
)
from ml8s.identity import worker_id
from ml8s.records.mapped import MappedHistory, map_generation
from ml8s.records.models import (
    INDEX_MAX_BYTES,
    INDEX_NAME,
    GenerationInfo,
    HistoryIndex,
    manifest_name,
    parse_model,
    record_file_name,
)
from ml8s.records.rows import Rows, spool_rows
from ml8s.records.schema import RecordSchema
from ml8s.records.verify import check_local_file, check_manifest, check_schema, check_size, fetch_cached
from ml8s.store import LocalStore, Store
from ml8s.tempdirs import owned_tempdir

TMP_DIR = ".tmp"


class RecordStore:
    """The record history rooted at ``prefix`` of ``store`` (e.g. ``lines/churn/history/``)."""

    def __init__(self, store: Store, prefix: str) -> None:
        self.store = store
        self.prefix = "/".join(part for part in prefix.split("/") if part)

    def key(self, name: str) -> str:
        return f"{self.prefix}/{name}" if self.prefix else name

    def index(self) -> HistoryIndex | None:
        """The history's index as stored (schema-checked), or None before the first append."""
        return self._read_index()[0]

    def append_generation(self, schema: RecordSchema, rows: Rows, *, generation: int | None = None) -> GenerationInfo:
        """Append ``rows`` as the next generation and return its manifest entry.

        Args:
            schema: the records' layout; must be the lineage's (the first append sets it).
            rows: one ``(n, n_features + 1)`` float32 array, or an iterator of such chunks (streamed to a local
                temp file, hashed while written, then uploaded).
            generation: the generation the caller means to write (default: the next one). Naming an existing
                generation with the bytes it already holds returns its entry and writes nothing (an idempotent
                re-run); with other bytes it is refused.

        Raises:
            RecordsSchemaMismatchError: ``schema`` is not the lineage's.
            RecordsAppendError: ``generation`` is not the next one, or another writer appended meanwhile.
            RecordsFormatError: the rows are not records of ``schema`` (nothing is written).
        """
        index, token = self._read_index()
        if index is not None and index.schema_hash != schema.schema_hash:
            raise RecordsSchemaMismatchError(
                f"{self.store.uri(self.key(INDEX_NAME))}: the lineage's schema is {index.schema_hash}; the rows to "
                f"append follow schema {schema.schema_hash} ({schema.canonical_json()})"
            )
        done = index.generations if index is not None else ()
        number = len(done) if generation is None else generation
        if not 0 <= number <= len(done):
            raise RecordsAppendError(
                f"cannot append generation {number} to {self.store.uri(self.prefix)}: it has {len(done)} "
                f"generation(s), so the next is {len(done)}; generations are never skipped"
            )
        name = record_file_name(number)
        with owned_tempdir("ml8s-records-") as scratch:
            spooled = spool_rows(schema, rows, os.path.join(scratch, name))
            info = GenerationInfo(
                generation=number,
                file=name,
                rows=spooled.rows,
                size=spooled.size,
                sha256=spooled.sha256,
                schema_hash=schema.schema_hash,
            )
            if number < len(done):
                if done[number] == info:
                    return info
                raise RecordsAppendError(
                    f"generation {number} of {self.store.uri(self.prefix)} already holds sha256 {done[number].sha256}; "
                    f"the new rows hash to {info.sha256}; generations are never rewritten"
                )
            self._check_unchanged(token, number)
            written = self.store.put_file_atomic(self.key(name), spooled.path, tmp_key=self._tmp_key("f32"))
        if (written.size, written.sha256) != (info.size, info.sha256):
            raise RecordsChecksumError(
                f"{self.store.uri(self.key(name))}: stored {written.size} bytes sha256 {written.sha256}; expected "
                f"{info.size} bytes sha256 {info.sha256}"
            )
        self.store.put_atomic(self.key(manifest_name(number)), info.to_json(), tmp_key=self._tmp_key("json"))
        updated = HistoryIndex(record_schema=schema, schema_hash=schema.schema_hash, generations=(*done, info))
        try:
            self.store.put_if_match(self.key(INDEX_NAME), updated.to_json(), token)
        except PreconditionFailedError as exc:
            raise self._raced(number) from exc
        return info

    def open(self, *, verify_hash: bool = True) -> HistoryIndex:
        """The index, after checking every listed generation where it is stored (nothing is downloaded to disk
        for a local store; an S3 store's files are streamed through a temp file when ``verify_hash``).

        Raises:
            GenerationMissingError: no history yet, or a listed file or manifest is absent.
            RecordsTruncatedError / RecordsExtraBytesError: a file is not rows × record_size bytes.
            RecordsChecksumError: (``verify_hash``) a file's sha256 is not the recorded one.
            RecordsSchemaMismatchError: the index, a generation or a manifest names another schema.
        """
        index = self._require_index()
        if (root := self._local_root()) is not None:
            for info in index.generations:
                where = self.store.uri(self.key(info.file))
                check_local_file(self._local_path(root, info.file), info, where, verify_hash=verify_hash)
            return index
        sizes = {entry.key: entry.size for entry in self.store.list(self.prefix)}
        with owned_tempdir("ml8s-records-") as scratch:
            for info in index.generations:
                key = self.key(info.file)
                if key not in sizes:
                    raise GenerationMissingError(
                        f"{self.store.uri(key)} does not exist; expected generation {info.generation}"
                    )
                check_size(sizes[key], info, self.store.uri(key))
                if verify_hash:
                    os.unlink(fetch_cached(self.store, key, info, scratch, verify_hash=True))
        return index

    def open_mapped(self, cache_dir: str, *, verify_hash: bool = True) -> MappedHistory:
        """Every generation checked and memory-mapped read-only, for training.

        A local store's files are mapped where they are (``cache_dir`` unused); a remote store's are
        downloaded to ``cache_dir`` first (named by sha256, reused when already there) and verified there.
        ``verify_hash=False`` skips re-hashing files already on disk (sizes are always checked; a fresh
        download is always hashed). Raises what :meth:`open` raises.
        """
        index = self._require_index()
        root, paths = self._local_root(), []
        for info in index.generations:
            key = self.key(info.file)
            if root is not None:
                path = self._local_path(root, info.file)
                check_local_file(path, info, self.store.uri(key), verify_hash=verify_hash)
            else:
                path = fetch_cached(self.store, key, info, cache_dir, verify_hash=verify_hash)
            paths.append(path)
        pairs = zip(paths, index.generations, strict=True)
        mapped = [map_generation(path, info, index.record_schema) for path, info in pairs]
        return MappedHistory(
            index=index,
            paths=tuple(paths),
            maps=tuple(array for array, _ in mapped),
            regions=tuple(region for _, region in mapped),
        )

    # -- helpers --------------------------------------------------------------------------------
    def _read_index(self) -> tuple[HistoryIndex | None, str | None]:
        key = self.key(INDEX_NAME)
        try:
            found = self.store.get_versioned(key, max_bytes=INDEX_MAX_BYTES)
        except NotFoundError:
            return None, None
        index = parse_model(HistoryIndex, found.data, self.store.uri(key))
        check_schema(index, self.store.uri(key))
        return index, found.token

    def _require_index(self) -> HistoryIndex:
        index = self.index()
        if index is None:
            raise GenerationMissingError(
                f"{self.store.uri(self.key(INDEX_NAME))} does not exist; expected a history with at least one "
                "generation"
            )
        for info in index.generations:
            check_manifest(self.store, self.key(manifest_name(info.generation)), info)
        return index

    def _check_unchanged(self, token: str | None, number: int) -> None:
        """Refuse before uploading if the index moved while the rows were spooled (a concurrent writer)."""
        try:
            now = self.store.get_versioned(self.key(INDEX_NAME), max_bytes=INDEX_MAX_BYTES).token
        except NotFoundError:
            now = None
        if now != token:
            raise self._raced(number)

    def _raced(self, number: int) -> RecordsAppendError:
        return RecordsAppendError(
            f"{self.store.uri(self.key(INDEX_NAME))} changed while generation {number} was being appended: another "
            "writer appended first; re-read the history and append again"
        )

    def _local_root(self) -> str | None:
        """A local store's directory: its files are checked and mapped in place, never copied."""
        return self.store.root if isinstance(self.store, LocalStore) else None

    def _local_path(self, root: str, name: str) -> str:
        return os.path.join(root, *self.key(name).split("/"))

    def _tmp_key(self, ext: str) -> str:
        return self.key(f"{TMP_DIR}/records-{worker_id()}-{uuid.uuid4().hex}.{ext}")
