"""Reading shard files: the header, verified byte ranges, and a full scan of every checksum.

A shard in a :class:`~ml8s.store.LocalStore` is read in place, by byte range; the loaders read a shard in
another store by ranged GETs (:class:`RangedObject`), verify's full scan downloads it (streamed) to a local
temp file first. Every local shard file is opened as the store reads (``open_regular``): a regular file
only, never through a symbolic link (it may lead outside the store), never waiting on a FIFO swapped in
after the check.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import io
import os
import stat
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Protocol

import torch
from pydantic import BaseModel, ConfigDict

from ml8s.errors import NotFoundError, ShardChecksumError, ShardFormatError, StoreError, UnsafeObjectError
from ml8s.shards import dtypes
from ml8s.shards.format import FIXED_SIZE, ShardHeader, TensorEntry, decode_fixed, decode_header
from ml8s.shards.hashing import DataHasher
from ml8s.store import LocalStore, Store, open_regular

_CHUNK = 4 * 1024 * 1024


class _Source(Protocol):
    """What a shard is read through: a local file, or a store object read by byte ranges (RangedObject)."""

    def seek(self, offset: int, /) -> int: ...
    def read(self, size: int, /) -> bytes: ...
    def readinto(self, buffer: memoryview, /) -> int: ...
    def close(self) -> None: ...


class RangedObject:
    """A store object of ``size`` bytes (its listed size) read as a file, one ``get_range`` per read: a
    loader fetches the blocks it reads, never the whole object."""

    def __init__(self, store: Store, key: str, size: int) -> None:
        self.store, self.key, self.size, self._pos = store, key, size, 0

    def seek(self, offset: int, /) -> int:
        self._pos = offset
        return offset

    def read(self, size: int, /) -> bytes:
        data = self.store.get_range(self.key, self._pos, max(0, min(size, self.size - self._pos)))
        self._pos += len(data)
        return data

    def readinto(self, buffer: memoryview, /) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def close(self) -> None:
        return None


def read_header(handle: _Source, size: int, where: str) -> ShardHeader:
    """Parse and check the header of an open shard of ``size`` bytes (ShardFormatError naming the check)."""
    handle.seek(0)
    head_len, _ = decode_fixed(handle.read(FIXED_SIZE), size, where)
    handle.seek(0)
    buf = handle.read(head_len)
    if len(buf) != head_len:
        raise ShardFormatError(f"{where}: header of {head_len} bytes, file ends at {len(buf)}", check="truncated")
    return decode_header(buf, where)


class ShardFile:
    """An open shard (a local file, or a store object read by ranges) whose header has been checked; pieces
    read through their block hashes."""

    def __init__(self, path: str | RangedObject, where: str) -> None:
        self.where = where
        self._kept: tuple[int, bytes] | None = None  # the last partial block verified: (index, bytes)
        if isinstance(path, RangedObject):
            self._handle: _Source = path
            size = path.size
        else:
            local = open_shard(path, where)
            self._handle, size = local, os.fstat(local.fileno()).st_size
        try:
            self.header = read_header(self._handle, size, where)
            if size != self.header.file_size:
                what = "truncated" if size < self.header.file_size else "trailing_bytes"
                raise ShardFormatError(f"{where}: {size} bytes, its header makes {self.header.file_size}", check=what)
        except BaseException:
            self._handle.close()
            raise

    def close(self) -> None:
        self._handle.close()

    def read_entry(self, entry: TensorEntry) -> torch.Tensor:
        """A new tensor holding the piece ``entry`` describes."""
        tensor = torch.empty(entry.shape, dtype=dtypes.torch_dtype(entry.dtype, where=self.where))
        self.read_into(entry.offset, as_bytes(tensor))
        return tensor

    def read_into(self, offset: int, out: memoryview) -> None:
        """Fill ``out`` with the bytes at ``offset``, reading and verifying only the blocks that hold them.

        Runs of whole blocks are read straight into ``out`` and hashed on a thread pool (hashlib releases
        the GIL) while the next run is read; a partial block at either end is read aside, verified, copied,
        and kept for the next read (small tensors share blocks: each one hashed its block again).
        """
        h, stop = self.header, offset + len(out)
        if offset < h.data_offset or stop > h.file_size:
            raise ShardFormatError(
                f"{self.where}: bytes {offset}..{stop} outside the data section", check="header_invalid"
            )
        pending: list[tuple[int, Future[str]]] = []
        start, block = offset, (offset - h.data_offset) // h.block_size
        while start < stop:
            first = h.data_offset + block * h.block_size
            size = min(h.block_size, h.data_length - block * h.block_size)
            lo, hi = start - first, min(stop - first, size)
            self._handle.seek(first)
            if (lo, hi) != (0, size):
                out[start - offset : start - offset + hi - lo] = self._partial(block, size)[lo:hi]
                start, block = first + hi, block + 1
                continue
            run = 1  # whole blocks that lie inside ``out``, up to _RUN_BLOCKS of them
            while run < _RUN_BLOCKS and first + (run + 1) * h.block_size <= min(stop, h.file_size):
                run += 1
            end = min(first + run * h.block_size, h.file_size)
            target = out[start - offset : end - offset]
            self._expect(self._handle.readinto(target), len(target), block)
            for k in range(run):
                piece = target[k * h.block_size : (k + 1) * h.block_size]
                pending.append((block + k, _pool().submit(_sha256, piece)))
            start, block = end, block + run
        for index, digest in pending:
            if digest.result() != h.block_sha256[index]:
                raise ShardChecksumError(
                    f"{self.where}: block {index} does not match its sha256", check="block_checksum"
                )

    def _partial(self, block: int, size: int) -> bytes:
        """Block ``block`` (``size`` bytes), verified: the one kept, or read (the handle is at its start)."""
        if self._kept is not None and self._kept[0] == block:
            return self._kept[1]
        data = self._handle.read(size)
        self._expect(len(data), size, block)
        if _sha256(data) != self.header.block_sha256[block]:
            raise ShardChecksumError(f"{self.where}: block {block} does not match its sha256", check="block_checksum")
        if size <= _KEEP_MAX:
            self._kept = (block, data)
        return data

    def _expect(self, got: int, size: int, block: int) -> None:
        if got != size:
            raise ShardFormatError(f"{self.where}: block {block} cut short at {got} of {size}", check="truncated")


_RUN_BLOCKS = 8
# a shard keeps its last partial block while open (a load keeps every shard open): at most this much each
_KEEP_MAX = 16 * 1024 * 1024


@functools.cache
def _pool() -> ThreadPoolExecutor:
    """One process-wide pool for block hashes, sized to the machine, created on first use."""
    return ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 1), thread_name_prefix="ml8s-shard-hash")


def open_shard(path: str, where: str) -> io.BufferedReader:
    """The shard file at ``path`` for reading (module docstring); NotFoundError, UnsafeObjectError otherwise."""
    return os.fdopen(open_regular(path, where, nofollow=True), "rb")


def _sha256(data: bytes | memoryview) -> str:
    return hashlib.sha256(data).hexdigest()


def as_bytes(tensor: torch.Tensor) -> memoryview:
    """A writable byte view of a contiguous CPU tensor's memory."""
    return tensor.reshape(-1).view(torch.uint8).numpy().data


@contextlib.contextmanager
def local_shard(store: Store, key: str, scratch: str) -> Iterator[tuple[str, str | None]]:
    """(a local path holding the shard at ``key``, its sha256 when a download computed it, else None).

    NotFoundError when the key does not exist, UnsafeObjectError when it holds no regular file (local: a
    symbolic link is none, wherever it leads). A download lives in ``scratch`` until the block ends.
    """
    if isinstance(store, LocalStore):
        path = os.path.join(store.root, *key.split("/"))
        try:
            regular = stat.S_ISREG(os.lstat(path).st_mode)
        except (FileNotFoundError, NotADirectoryError):
            raise NotFoundError(f"{store.uri(key)} does not exist") from None
        except OSError as exc:
            raise StoreError(f"cannot read {store.uri(key)}: {exc.strerror or exc}") from exc
        if not regular:  # a link, a FIFO (opening it would block), a directory, a device
            raise UnsafeObjectError(f"cannot read {store.uri(key)}: no regular file; expected a shard (not read)")
        yield path, None
        return
    path = os.path.join(scratch, key.replace("/", "__"))
    result = store.download(key, path)
    try:
        yield path, result.sha256
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


class ShardScan(BaseModel):
    """Everything one full read of a shard file found: size, sha256, the header (if it parsed) and problems."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    size: int
    sha256: str
    header: ShardHeader | None
    problems: tuple[tuple[str, str], ...]

    @property
    def intact(self) -> bool:
        """Header parsed, every checksum in it holds, and the file is exactly as long as it says."""
        return self.header is not None and not self.problems


def scan_shard(path: str, where: str) -> ShardScan:
    """Read the whole file once: file sha256; header; data sha256, block hashes and zero padding against it."""
    with open_shard(path, where) as handle:
        size = os.fstat(handle.fileno()).st_size
        problems: list[tuple[str, str]] = []
        try:
            header: ShardHeader | None = read_header(handle, size, where)
        except ShardFormatError as exc:
            header, problems = None, [(exc.check, exc.message)]
        handle.seek(0)
        if header is None:
            whole = hashlib.sha256()
            for chunk in _chunks_of(handle, size):
                whole.update(chunk)
            problems += _grown(handle, size, where)
            return ShardScan(size=size, sha256=whole.hexdigest(), header=None, problems=tuple(problems))
        if size != header.file_size:
            what = "truncated" if size < header.file_size else "trailing_bytes"
            problems.append((what, f"{where}: {size} bytes, its header makes {header.file_size}"))
        file_hash, data = hashlib.sha256(), DataHasher(header.block_size)
        zeros = _padding(header)
        pos, dirty = 0, []
        for chunk in _chunks_of(handle, size):
            file_hash.update(chunk)
            lo, hi = max(pos, header.data_offset), min(pos + len(chunk), header.file_size)
            if lo < hi:
                data.update(memoryview(chunk)[lo - pos : hi - pos])
            dirty += [(a, b) for a, b in zeros if max(a, pos) < min(b, pos + len(chunk)) and _nonzero(chunk, pos, a, b)]
            pos += len(chunk)
        problems += _grown(handle, size, where)
    data_sha, blocks = data.finish()
    if data_sha != header.data_sha256:
        problems.append(("data_checksum", f"{where}: data section sha256 {data_sha}, header says {header.data_sha256}"))
    if bad := [i for i, (a, b) in enumerate(zip(blocks, header.block_sha256, strict=False)) if a != b]:
        problems.append(("block_checksum", f"{where}: blocks {bad[:10]} do not match their sha256"))
    if dirty:
        problems.append(("padding", f"{where}: non-zero padding in bytes {sorted(set(dirty))[:10]}"))
    return ShardScan(size=size, sha256=file_hash.hexdigest(), header=header, problems=tuple(problems))


def _chunks_of(handle: io.BufferedReader, size: int) -> Iterator[bytes]:
    """The file's first ``size`` bytes (its size when opened), a chunk at a time: never read to an end of file that
    a writer appending forever keeps moving (verify would never end)."""
    left = size
    while left > 0 and (chunk := handle.read(min(_CHUNK, left))):
        left -= len(chunk)
        yield chunk


def _grown(handle: io.BufferedReader, size: int, where: str) -> list[tuple[str, str]]:
    """A problem when the file holds more than the ``size`` bytes it had when opened (it grew while read)."""
    if not handle.read(1):
        return []
    return [("trailing_bytes", f"{where}: grew while it was read (past the {size} bytes it had when opened)")]


def _padding(h: ShardHeader) -> list[tuple[int, int]]:
    """Byte ranges the format requires to be zero: after the header, and between pieces."""
    gaps, end = [(h.header_length, h.data_offset)], h.data_offset
    for e in h.entries:
        gaps.append((end, e.offset))
        end = e.offset + e.length
    return [(a, b) for a, b in gaps if a < b]


def _nonzero(chunk: bytes, pos: int, a: int, b: int) -> bool:
    lo, hi = max(a, pos) - pos, min(b, pos + len(chunk)) - pos
    return chunk.count(0, lo, hi) != hi - lo
