"""File primitives of the local backend: streamed, hashed, fsynced writes that survive concurrent directory pruning."""

from __future__ import annotations

import contextlib
import errno
import functools
import hashlib
import io
import os
import stat
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import BinaryIO

from ml8s.errors import NotFoundError, StoreError, UnsafeObjectError
from ml8s.store._safe import kind, open_regular
from ml8s.store._tree import Slot

_CHUNK = 1024 * 1024  # fits the L2 cache: read, write and hash touch it there (4 MiB measured slower)
_WRITEBACK = 32 * 1024 * 1024  # bytes written between two starts of their writeback (start_writeback)


def open_source(path: str, what: str) -> io.FileIO:
    try:
        return open(path, "rb", buffering=0)
    except OSError as exc:
        raise StoreError(f"cannot read {what}: {exc.strerror or exc}") from exc


def write_file(target: Slot, data: bytes) -> tuple[str, int]:
    """Write ``data`` to ``target`` (created fresh, :func:`create`) and fsync it.

    Returns (sha256, size) of the bytes written, hashed once, from the same buffers that were written.
    """
    with _writing(target):
        with open(create(target, 0o666), "wb", closefd=True) as handle:
            digest, size = _write_hashed(handle, data)
            handle.flush()
            os.fsync(handle.fileno())  # durable before a link or rename names it: no named, empty file after a crash
    return digest, size


def copy_hashed(target: Slot | str, source: io.FileIO) -> tuple[str, int]:
    """Copy ``source`` (an open file, read to its end) to ``target`` (created fresh), fsync it; (sha256, size)
    of the bytes written, hashed from the very buffers written.

    Two buffers take turns: a second thread hashes one (hashlib releases the GIL) while the next is read
    into the other and written, so on two cores the copy costs about one sha256 pass, not a copy plus one.
    The hash thread works through its queue in order, and a buffer is reused only once its hash is done.
    """
    digest = hashlib.sha256()
    buffers = [memoryview(bytearray(_CHUNK)) for _ in range(2)]
    hashed: list[Future[None] | None] = [None, None]
    size = turn = started = 0
    with _writing(target):
        handle = open(create(target, 0o666), "wb", buffering=0, closefd=True)
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

    def __init__(self, target: Slot) -> None:
        self.target, self.path = target, target.path
        with _writing(target):
            self.fd = create(target, 0o644, os.O_RDWR)
        self.size = self._started = 0

    def write(self, chunk: memoryview) -> None:
        with _writing(self.target, remove=False):
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
def _writing(target: Slot | str, *, remove: bool = True) -> Iterator[None]:
    """An OSError while writing ``target`` removes the partial file (unless its owner does) and becomes a
    StoreError (ENOSPC named); a refused directory (UnsafeObjectError) is one already."""
    try:
        yield
    except StoreError:
        raise
    except OSError as exc:
        if remove:
            with contextlib.suppress(OSError):
                target.unlink() if isinstance(target, Slot) else os.unlink(target)
        raise write_error(target if isinstance(target, str) else target.path, exc) from exc


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


def create(target: Slot | str, mode: int, flags: int = os.O_WRONLY) -> int:
    """A descriptor of a new file at ``target``. In the store (a Slot) always a fresh file, created ``O_EXCL``
    relative to its walked directory: what a crashed writer left at that tmp name, or anything planted there (a
    link, a FIFO), is unlinked first, never opened. A plain path (a download's) is truncated, its directory made."""
    if isinstance(target, str):
        os.makedirs(os.path.dirname(target) or ".", exist_ok=True)
        return os.open(target, flags | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, mode)
    fresh = flags | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC

    def make(dir_fd: int) -> int:
        try:
            return os.open(target.name, fresh, mode, dir_fd=dir_fd)
        except FileExistsError:
            os.unlink(target.name, dir_fd=dir_fd)
            return os.open(target.name, fresh, mode, dir_fd=dir_fd)

    return target.retry(make)


def sha256_or_none(target: Slot) -> str | None:
    """sha256 of the regular file at ``target``, None when absent; a link, FIFO or device there (or a link on the
    way) is UnsafeObjectError (never followed, never waited on: the compare-and-swap holds a lock meanwhile)."""
    try:
        fd = open_regular(target.name, target.path, nofollow=True, dir_fd=target.dir_fd(create=False))
    except (NotFoundError, FileNotFoundError):
        return None
    with os.fdopen(fd, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def size_or_none(target: Slot) -> int | None:
    """The size of the regular file at ``target`` (nothing followed), None when absent; UnsafeObjectError when it
    is no regular file."""
    try:
        info = os.stat(target.name, dir_fd=target.dir_fd(create=False), follow_symlinks=False)
    except FileNotFoundError:
        return None
    if not stat.S_ISREG(info.st_mode):
        raise UnsafeObjectError(f"{target.path}: {kind(info.st_mode)}; expected the regular file written (not used)")
    return info.st_size


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
