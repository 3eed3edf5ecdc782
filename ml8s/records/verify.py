"""Checks a history's readers make before trusting a generation: schema, manifest, size, sha256."""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat

from ml8s.errors import (
    GenerationMissingError,
    NotFoundError,
    RecordsChecksumError,
    RecordsExtraBytesError,
    RecordsFormatError,
    RecordsSchemaMismatchError,
    RecordsTruncatedError,
)
from ml8s.records.models import MANIFEST_MAX_BYTES, GenerationInfo, HistoryIndex, parse_model
from ml8s.store import Store

_CHUNK = 4 * 1024 * 1024


def check_schema(index: HistoryIndex, where: str) -> None:
    """The index's schema hash is its schema's, and every generation was written with that schema."""
    expected = index.record_schema.schema_hash
    if index.schema_hash != expected:
        raise RecordsSchemaMismatchError(
            f"{where}: schema_hash {index.schema_hash} is not the hash of the schema listed ({expected})"
        )
    for info in index.generations:
        if info.schema_hash != expected:
            raise RecordsSchemaMismatchError(
                f"{where}: generation {info.generation} was written with schema {info.schema_hash}; "
                f"expected the lineage's schema {expected}"
            )


def check_manifest(store: Store, key: str, info: GenerationInfo) -> None:
    """The generation's own manifest exists and says exactly what the index says."""
    try:
        data = store.get(key, max_bytes=MANIFEST_MAX_BYTES)
    except NotFoundError as exc:
        raise GenerationMissingError(
            f"{store.uri(key)} does not exist; expected the manifest of generation {info.generation}"
        ) from exc
    found = parse_model(GenerationInfo, data, store.uri(key))
    if found.schema_hash != info.schema_hash:
        raise RecordsSchemaMismatchError(
            f"{store.uri(key)}: schema {found.schema_hash}; the index lists generation {info.generation} "
            f"with schema {info.schema_hash}"
        )
    if found != info:
        raise RecordsFormatError(
            f"{store.uri(key)} disagrees with the index for generation {info.generation}: manifest "
            f"{found.model_dump_json()}, index {info.model_dump_json()}"
        )


def check_size(found: int, info: GenerationInfo, where: str) -> None:
    """The file is exactly ``rows × record_size`` bytes; shorter and longer are different errors."""
    if found < info.size:
        raise RecordsTruncatedError(
            f"{where} is {found} bytes; expected {info.size} ({info.rows} records of generation {info.generation})"
        )
    if found > info.size:
        raise RecordsExtraBytesError(
            f"{where} is {found} bytes; expected {info.size} ({info.rows} records of generation {info.generation})"
        )


def check_local_file(path: str, info: GenerationInfo, where: str, *, verify_hash: bool) -> None:
    """A generation's file on local disk: present, the right size, and (``verify_hash``) the right sha256."""
    try:
        found = os.stat(path)
    except FileNotFoundError as exc:
        raise GenerationMissingError(f"{where} does not exist; expected generation {info.generation}") from exc
    # A directory's st_size can equal rows x record_size (4096 bytes: 256 records of 16): it would pass the
    # size check, then opening it to hash or map it raised IsADirectoryError (or, unhashed, it passed).
    if not stat.S_ISREG(found.st_mode):
        raise GenerationMissingError(
            f"{where} is no regular file (mode {stat.filemode(found.st_mode)}); expected the record file of "
            f"generation {info.generation}"
        )
    check_size(found.st_size, info, where)
    if verify_hash:
        check_sha256(file_sha256(path), info, where)


def check_sha256(found: str, info: GenerationInfo, where: str) -> None:
    if found != info.sha256:
        raise RecordsChecksumError(f"{where} has sha256 {found}; expected {info.sha256} (generation {info.generation})")


def file_sha256(path: str) -> str:
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def fetch_cached(store: Store, key: str, info: GenerationInfo, cache_dir: str, *, verify_hash: bool) -> str:
    """A verified local copy of a remote generation under ``cache_dir``, downloaded only when needed.

    The cache file is named by its sha256, so histories sharing a cache directory never mix. A cached copy
    of the wrong size (or, with ``verify_hash``, the wrong hash) is downloaded again: the store is the
    authority, the cache only a copy. A download is always hashed, since hashing it costs nothing extra.
    """
    os.makedirs(cache_dir, exist_ok=True)
    path = os.path.join(cache_dir, f"{info.sha256}.f32")
    if os.path.isfile(path) and os.path.getsize(path) == info.size:
        if not verify_hash or file_sha256(path) == info.sha256:
            return path
    partial = f"{path}.{os.getpid()}.part"
    try:
        written = store.download(key, partial)
    except NotFoundError as exc:
        raise GenerationMissingError(f"{store.uri(key)} does not exist; expected generation {info.generation}") from exc
    try:
        check_size(written.size, info, store.uri(key))
        check_sha256(written.sha256, info, store.uri(key))
    except (RecordsTruncatedError, RecordsExtraBytesError, RecordsChecksumError):
        with contextlib.suppress(OSError):
            os.unlink(partial)
        raise
    os.replace(partial, path)
    return path
