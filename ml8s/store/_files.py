"""File primitives of the local backend: streamed, hashed, fsynced writes that survive concurrent directory pruning."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import io
import os
from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

from ml8s.errors import StoreError

_CHUNK = 4 * 1024 * 1024
_DIR_ATTEMPTS = 20  # a directory removed under a writer by concurrent deletes is recreated this often
_T = TypeVar("_T")


def open_source(path: str, what: str) -> io.FileIO:
    try:
        return open(path, "rb", buffering=0)
    except OSError as exc:
        raise StoreError(f"cannot read {what}: {exc.strerror or exc}") from exc


def read_chunks(source: io.FileIO) -> Iterator[memoryview]:
    """The file's bytes in views of one reused buffer: each is consumed before the next read overwrites it."""
    buffer = memoryview(bytearray(_CHUNK))
    while count := source.readinto(buffer):
        yield buffer[:count]


def write_file(path: str, chunks: Iterable[bytes | memoryview]) -> tuple[str, int]:
    """Write chunks to ``path`` (created fresh), fsync, and return (sha256, size) of what was written."""
    digest = hashlib.sha256()
    size = 0
    try:
        handle = in_fresh_dir(path, lambda: open(path, "wb"))
        with handle:
            for chunk in chunks:
                handle.write(chunk)
                digest.update(chunk)
                size += len(chunk)
            handle.flush()
            os.fsync(handle.fileno())
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(path)
        if exc.errno == errno.ENOSPC:
            raise StoreError(f"no space left writing {path}") from exc
        raise StoreError(f"cannot write {path}: {exc.strerror or exc}") from exc
    return digest.hexdigest(), size


def in_fresh_dir(path: str, action: Callable[[], _T], source: str | None = None) -> _T:
    """``action`` (which creates ``path``, from ``source`` if given) after creating its directory; again if a
    concurrent delete pruned the directory in between (ENOENT while ``source``, if any, still exists)."""
    directory = os.path.dirname(path)
    for attempt in range(1, _DIR_ATTEMPTS + 1):
        try:
            os.makedirs(directory, exist_ok=True)
        except OSError as exc:
            # EEXIST/ENOENT: a concurrent delete removed a directory of the path while it was being created
            if attempt < _DIR_ATTEMPTS and isinstance(exc, (FileExistsError, FileNotFoundError)):
                continue
            raise StoreError(f"cannot create directory {directory}: {exc.strerror or exc}") from exc
        try:
            return action()
        except FileNotFoundError:
            if attempt == _DIR_ATTEMPTS or (source is not None and not os.path.exists(source)):
                raise
    raise AssertionError("unreachable")


def into_dir(source: str, final: str, move: Callable[[str, str], None]) -> None:
    """Link or rename the staged ``source`` to ``final``; OS failures but an existing target become StoreError."""
    try:
        in_fresh_dir(final, lambda: move(source, final), source)
    except FileExistsError:
        raise
    except OSError as exc:
        raise StoreError(f"cannot move {source} to {final}: {exc.strerror or exc}") from exc


def sha256_or_none(path: str) -> str | None:
    try:
        with open(path, "rb") as handle:
            return hashlib.file_digest(handle, "sha256").hexdigest()
    except FileNotFoundError:
        return None


def size_or_none(path: str) -> int | None:
    try:
        return os.stat(path).st_size
    except FileNotFoundError:
        return None


def fsync_dir(directory: str) -> None:
    """Make the directory's entries durable; a directory already removed by a concurrent delete has none."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except FileNotFoundError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
