"""File primitives of the local backend: streamed, hashed, fsynced writes that survive concurrent directory pruning."""

from __future__ import annotations

import contextlib
import errno
import functools
import hashlib
import io
import os
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import BinaryIO, TypeVar

from ml8s.errors import NotFoundError, StoreError
from ml8s.store._safe import open_regular

_CHUNK = 1024 * 1024  # fits the L2 cache: read, write and hash touch it there (4 MiB measured slower)
_WRITEBACK = 32 * 1024 * 1024  # bytes written between two starts of their writeback (start_writeback)
_DIR_ATTEMPTS = 20  # a directory removed under a writer by concurrent deletes is recreated this often
_T = TypeVar("_T")


def open_source(path: str, what: str) -> io.FileIO:
    try:
        return open(path, "rb", buffering=0)
    except OSError as exc:
        raise StoreError(f"cannot read {what}: {exc.strerror or exc}") from exc


def write_file(path: str, data: bytes) -> tuple[str, int]:
    """Write ``data`` to ``path`` (created fresh) and fsync it.

    Returns (sha256, size) of the bytes written, hashed once, from the same buffers that were written.
    """
    with _writing(path):
        handle = in_fresh_dir(path, lambda: open(path, "wb"))
        with handle:
            digest, size = _write_hashed(handle, data)
            handle.flush()
            os.fsync(handle.fileno())  # durable before a link or rename names it: no named, empty file after a crash
    return digest, size


def copy_hashed(path: str, source: io.FileIO) -> tuple[str, int]:
    """Copy ``source`` (an open file, read to its end) to ``path`` (created fresh), fsync it; (sha256, size)
    of the bytes written, hashed from the very buffers written.

    Two buffers take turns: a second thread hashes one (hashlib releases the GIL) while the next is read
    into the other and written, so on two cores the copy costs about one sha256 pass, not a copy plus one.
    The hash thread works through its queue in order, and a buffer is reused only once its hash is done.
    """
    digest = hashlib.sha256()
    buffers = [memoryview(bytearray(_CHUNK)) for _ in range(2)]
    hashed: list[Future[None] | None] = [None, None]
    size = turn = started = 0
    with _writing(path):
        handle = in_fresh_dir(path, lambda: open(path, "wb", buffering=0))
        with handle, ThreadPoolExecutor(1, thread_name_prefix="ml8s-hash") as pool:
            while True:
                if (previous := hashed[turn]) is not None:
                    previous.result()
                count = source.readinto(buffers[turn])
                if not count:
                    break
                chunk = buffers[turn][:count]
                hashed[turn] = pool.submit(digest.update, chunk)
                done = 0
                while done < count:  # a write may be short (a signal, a full pipe): go on from there
                    done += os.write(handle.fileno(), chunk[done:])
                size += count
                if size - started >= _WRITEBACK:  # the disk works while we go on; the fsync has less to wait for
                    start_writeback(handle.fileno(), started, size - started)
                    started = size
                turn ^= 1
            for future in hashed:
                if future is not None:
                    future.result()
            os.fsync(handle.fileno())  # durable before a rename names it (as in write_file)
    return digest.hexdigest(), size


class StagedWriter:
    """A fresh file written buffer by buffer by a caller that hashes those same buffers (so its digests are
    of the bytes written, never of a source re-read later); ``LocalStore.put_staged`` fsyncs it before it
    links it into place (a caller that finds nothing to commit spares the disk that wait).

    Every ``_WRITEBACK`` bytes it asks the kernel to start writing the new range to disk (``sync_file_range``
    where the C library has it; without waiting): the disk works while the caller hashes, so that fsync has
    little left to wait for. An OSError is a StoreError (ENOSPC named), never taken for a problem of the
    caller's source.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        with _writing(path):
            self.fd = in_fresh_dir(path, lambda: os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644))
        self.size = self._started = 0

    def write(self, chunk: memoryview) -> None:
        with _writing(self.path, remove=False):
            done = 0
            while done < len(chunk):  # a write may be short (a signal): go on from there
                done += os.write(self.fd, chunk[done:])
        self.size += done
        if self.size - self._started >= _WRITEBACK:
            start_writeback(self.fd, self._started, self.size - self._started)
            self._started = self.size


def start_writeback(fd: int, offset: int, count: int) -> None:
    """Start writing ``count`` dirty bytes of ``fd`` at ``offset`` to disk, without waiting (a hint: where
    the C library has no ``sync_file_range`` there is none, and durability still comes from fsync)."""
    if (func := _sync_file_range()) is not None:
        func(fd, offset, count, _SYNC_FILE_RANGE_WRITE)


@functools.cache
def _sync_file_range() -> Callable[[int, int, int, int], object] | None:
    import ctypes  # here: a command that stages nothing does not pay for it

    try:
        func = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (OSError, AttributeError):  # not Linux, or a C library without it: no hint
        return None
    func.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    func.restype = ctypes.c_int
    return func


_SYNC_FILE_RANGE_WRITE = 2  # <fcntl.h> SYNC_FILE_RANGE_WRITE: start writeback of the range's dirty pages


@contextlib.contextmanager
def _writing(path: str, *, remove: bool = True) -> Iterator[None]:
    """An OSError while writing ``path`` removes the partial file (unless its owner does) and becomes a
    StoreError (ENOSPC named)."""
    try:
        yield
    except OSError as exc:
        if remove:
            with contextlib.suppress(OSError):
                os.unlink(path)
        raise write_error(path, exc) from exc


def write_error(path: str, exc: OSError) -> StoreError:
    """The StoreError of an OSError while writing the local file ``path`` (ENOSPC named)."""
    if exc.errno == errno.ENOSPC:
        return StoreError(f"no space left writing {path}")
    return StoreError(f"cannot write {path}: {exc.strerror or exc}")


def _write_hashed(out: BinaryIO, data: bytes) -> tuple[str, int]:
    """Write and hash chunk by chunk: each chunk is still in the CPU cache when it is hashed."""
    digest = hashlib.sha256()
    view = memoryview(data)
    for start in range(0, len(view), _CHUNK):
        out.write(view[start : start + _CHUNK])
        digest.update(view[start : start + _CHUNK])
    return digest.hexdigest(), len(view)


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
    """sha256 of the regular file ``path``, None when absent; a link, FIFO or device there is
    UnsafeObjectError (never followed, never waited on: the compare-and-swap holds a lock meanwhile)."""
    try:
        fd = open_regular(path, path, nofollow=True)
    except NotFoundError:
        return None
    with os.fdopen(fd, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


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
