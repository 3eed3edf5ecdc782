"""The rows of the feature matrix a training process maps: float32, grouped by split, in an unnamed scratch file.

:func:`map_matrix32` maps the rows a process wrote itself (``ml8s run``: handed over by
:func:`ml8s.features.matrix.write_encoded` through :func:`hand_over`, the Parquet file not decoded again), or
decodes the file into such a scratch file a row group at a time.
"""

from __future__ import annotations

import itertools
import mmap
import os
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import IO

import numpy as np
import numpy.typing as npt
import pyarrow.parquet as pq

from ml8s.features.column_names import SPLIT, TARGET
from ml8s.features.matrix_read import feature_names, read_column, read_matrix32
from ml8s.memory import give_back, return_freed_memory
from ml8s.threads import ThreadArrays

Float32Array = npt.NDArray[np.float32]


@dataclass(frozen=True)
class Handed:
    """The rows of the matrix file this process wrote last (``key``: its path, inode, size and mtime)."""

    key: tuple[str, int, int, int]
    mapped: MappedMatrix
    deferred: bool = False  # the file is still being written from these rows (matrix_deferred): matched by path


_handed: list[Handed] = []  # at most one: taken by the training of this process
_MEMORY_SHARE = 4  # scratch rows are kept in memory when they take at most 1/4 of the memory available


def scratch_file(size: int) -> IO[bytes]:
    """An unnamed scratch file for ``size`` bytes of rows, nothing left behind however the process ends.

    In memory (``memfd_create``) when the rows take at most a quarter of the memory available, else under
    ``$TMPDIR`` (``O_TMPFILE``). Both are page cache that a mapping shares; a file on a disk also has its
    pages written back while it is written, which throttles the writes to the disk's speed (here 2.7 GB took
    4.9 s against 2.6 s in memory, all of it system time), for pages that are read back from memory and
    dropped when training ends. A larger matrix goes to the disk, whose pages the kernel can evict.
    """
    if hasattr(os, "memfd_create") and size <= _available() // _MEMORY_SHARE:
        try:
            return os.fdopen(os.memfd_create("ml8s-matrix", os.MFD_CLOEXEC), "w+b")
        except OSError:  # memfd refused (a seccomp filter, a memory limit): the disk, as always before
            pass
    return tempfile.TemporaryFile(prefix="ml8s-matrix-")


def _available() -> int:
    """MemAvailable of /proc/meminfo in bytes (0 where it cannot be read: the disk then)."""
    try:
        with open("/proc/meminfo", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return 0
    return 0


def _take(path: str) -> Handed | None:
    """The rows handed over for ``path``, when it is still the file written (else None: decode it)."""
    handed = _handed.pop() if _handed else None
    if handed is not None and handed.deferred:
        return handed if handed.key[0] == os.path.realpath(path) else None
    try:
        stat = os.stat(path)
    except OSError:
        return None
    key = (os.path.realpath(path), stat.st_ino, stat.st_size, stat.st_mtime_ns)
    return handed if handed is not None and handed.key == key else None


def hand_over(path: str, mapped: MappedMatrix, *, deferred: bool = False) -> None:
    """Leave ``mapped`` for this process's :func:`map_matrix32` of ``path``: the rows of the file just written
    (matched by path, inode, size and mtime), or, ``deferred``, of the file still being written from them
    (:mod:`ml8s.features.matrix_deferred`; matched by path)."""
    _handed.clear()
    if deferred:
        _handed.append(Handed((os.path.realpath(path), -1, -1, -1), mapped, deferred=True))
        return
    stat = os.stat(path)
    _handed.append(Handed((os.path.realpath(path), stat.st_ino, stat.st_size, stat.st_mtime_ns), mapped))


def forget_handed() -> None:
    """Drop rows handed over and not taken (a new matrix is about to be written)."""
    _handed.clear()


@dataclass(frozen=True)
class MappedMatrix:
    """The float32 rows of a feature matrix mapped from a scratch file, grouped by split: every training row
    (split 0) first, then every held-out row (split 1), each group in the file's order. Training touches the
    first group, evaluation the second, so that :meth:`release` can drop the one not in use from the process.

    A dataclass, not a pydantic model: it holds a live mapping that never leaves the process.
    """

    features: Float32Array
    target: npt.NDArray[np.int32]  # the class index of each row, in the same grouped order
    split: npt.NDArray[np.int8]  # the split of each row: sorted, so its groups are contiguous
    names: list[str]
    region: mmap.mmap | None = None  # None where there was nothing to map (no rows or no features)

    def release(self, split: int) -> None:
        """Drop from this process the resident pages of ``split``'s rows (0 training, 1 held out).

        The mapping stays valid: the pages stay in the page cache and come back on the next touch, at the cost
        of a minor page fault each. Pages shared with the neighbouring group are kept.
        """
        if self.region is None:
            return
        row_bytes = self.features.shape[1] * self.features.itemsize
        rows = np.searchsorted(self.split, [split, split + 1])  # the split is sorted: its rows are one range
        first = -(-int(rows[0]) * row_bytes // mmap.PAGESIZE) * mmap.PAGESIZE
        end = int(rows[1]) * row_bytes // mmap.PAGESIZE * mmap.PAGESIZE
        if end > first:
            try:
                self.region.madvise(mmap.MADV_DONTNEED, first, end - first)
            except OSError:  # advice a kernel refuses (locked pages) leaves the pages resident; nothing else changes
                return


class SplitRows:
    """Writes float32 rows into a scratch file at their place in the split-grouped order of
    :class:`MappedMatrix` (``split`` is every row's split, known before the first row is written)."""

    def __init__(self, handle: IO[bytes], split: npt.NDArray[np.integer], features: int) -> None:
        self.handle, self.features, self.split = handle, features, split
        # counted, not np.unique, which sorts a copy of every row's split (0.07 s against 0.16 s at 20M rows)
        tally = np.bincount(split)
        values = np.flatnonzero(tally)
        counts = tally[values]
        self.counts = dict(zip(values.tolist(), counts.tolist(), strict=True))  # split value -> rows, sorted
        self.next = self.starts()  # split value -> the next row to write
        self._arrays = ThreadArrays()  # each writing thread's slice of rows and of grouped columns
        # one write into the scratch file at a time: the kernel holds the file's lock through a write, and a
        # second writer spun on it (0.6 of the 9.5 CPU s of writing the matrix at 20M rows)
        self._writing = threading.Lock()

    def starts(self) -> dict[int, int]:
        """Split value -> the first row of its group in the grouped order."""
        return dict(zip(self.counts, itertools.accumulate([0, *self.counts.values()]), strict=False))

    def write(self, features: Float32Array, split: npt.NDArray[np.integer]) -> None:
        """Write the rows of ``features`` (features x rows, float32) whose splits are ``split``, a slice of rows at a
        time: a row-major copy of a whole row group would be 128 MiB more at 32 features.

        Each slice's place in the file is settled first (the split's counts), so the slices are written on
        :data:`_WRITERS` threads (numpy's copies and the writes release the GIL), each in arrays kept from one slice
        to the next, so no write touches fresh memory."""
        jobs: list[tuple[int, dict[int, int]]] = []
        for start in range(0, len(split), _ROWS_PER_WRITE):
            counts = np.bincount(split[start : start + _ROWS_PER_WRITE])
            places: dict[int, int] = {}
            for value in np.flatnonzero(counts).tolist():
                places[value] = self.next[value]
                self.next[value] += int(counts[value])
            jobs.append((start, places))
        with ThreadPoolExecutor(_WRITERS, thread_name_prefix="ml8s-rows") as pool:
            for _ in pool.map(lambda job: self._write_slice(features, split, *job), jobs):
                pass

    def _write_slice(
        self, features: Float32Array, split: npt.NDArray[np.integer], start: int, places: dict[int, int]
    ) -> None:
        part = split[start : start + _ROWS_PER_WRITE]
        columns = features[:, start : start + len(part)]
        groups = [np.flatnonzero(part == value) for value in places] if len(places) > 1 else []
        if groups:  # the slice's columns in the grouped order first: a column's take is a contiguous gather
            order = np.concatenate(groups)
            grouped = self._arrays.get("grouped", (self.features, _ROWS_PER_WRITE), np.float32)[:, : len(part)]
            for index in range(self.features):  # mode "wrap": in range; "raise" would take into a copy of ``out``
                np.take(columns[index], order, out=grouped[index], mode="wrap")
            columns = grouped
        rows = self._arrays.get("rows", (_ROWS_PER_WRITE, self.features), np.float32)[: len(part)]
        _transpose_into(columns, rows)
        offset = 0
        for first, count in zip(places.values(), [len(g) for g in groups] or [len(part)], strict=True):
            with self._writing:
                os.pwrite(self.handle.fileno(), rows[offset : offset + count].data, first * self.features * _FLOAT32)
            offset += count

    def release(self) -> None:
        """Free the arrays the writes made their rows in (each writing thread's)."""
        self._arrays = ThreadArrays()

    def mapped(self, target: npt.NDArray[np.integer], names: list[str]) -> MappedMatrix:
        """The rows written, mapped copy-on-write (torch tensors can share them), with the class indices and
        splits in the same order."""
        self.handle.flush()
        rows = len(self.split)
        region = mmap.mmap(self.handle.fileno(), rows * self.features * _FLOAT32, access=mmap.ACCESS_COPY)
        features: Float32Array = np.frombuffer(region, dtype=np.float32).reshape(rows, self.features)
        narrow = target.astype(np.int32, copy=False)
        grouped = np.concatenate([narrow[self.split == v] for v in self.counts]) if self.counts else narrow
        split = np.repeat(np.array(list(self.counts), dtype=np.int8), list(self.counts.values()))
        return MappedMatrix(features, grouped, split, names, region)


_ROWS_PER_WRITE = 1 << 16
_TILE_BYTES = 1 << 19  # rows transposed at a time: their row-major bytes stay in the core's cache


def _transpose_into(columns: Float32Array, rows: Float32Array) -> None:
    """``rows[:] = columns.T``, a tile of rows at a time and within it a column at a time: numpy's copy of a whole
    transposed view gathers each row from every column's pages at once (1.05 s/GiB here); a column written
    strided into a tile whose bytes stay cached is about twice as fast (0.6 s/GiB)."""
    features = columns.shape[0]
    tile = max(1, _TILE_BYTES // max(1, features * _FLOAT32))
    for start in range(0, columns.shape[1], tile):
        block = rows[start : start + tile]
        for index in range(features):
            block[:, index] = columns[index, start : start + tile]


_WRITERS = 2  # threads writing a group's slices: the machine's two cores
_FLOAT32 = np.dtype(np.float32).itemsize


def map_matrix32(path: str) -> MappedMatrix:
    """The matrix's float32 rows memory-mapped from a scratch file instead of held in the heap, grouped by split
    (:class:`MappedMatrix`), with the class indices and splits in the file's own types (int32, int8: at 20M rows,
    300 MiB less than int64 beside a matrix the training touches).

    The rows are written a row group at a time into an unnamed temporary file (``O_TMPFILE``: nothing is left
    behind, however the process ends) and mapped copy-on-write, so torch tensors can share them. The pages are
    the file's: the kernel can drop and re-read them under memory pressure, and writing them never dirties the
    process's own memory beyond one row group.
    """
    return_freed_memory()
    handed = _take(path)
    if handed is not None:
        return handed.mapped
    file = pq.ParquetFile(path)
    names = feature_names(file)
    rows = file.metadata.num_rows
    if rows * len(names) == 0:  # nothing to map (mmap refuses an empty length)
        features, wide_target, wide_split, names = read_matrix32(path)
        return MappedMatrix(features, wide_target.astype(np.int32), wide_split.astype(np.int8), names)
    target = np.empty(rows, dtype=np.int32)
    split = np.empty(rows, dtype=np.int8)
    bounds = []
    start = 0
    for group in range(file.num_row_groups):  # the splits first: every row's place in the file depends on them
        end = start + file.metadata.row_group(group).num_rows
        split[start:end] = read_column(file, group, SPLIT)
        target[start:end] = read_column(file, group, TARGET)
        bounds.append((start, end))
        start = end
    with scratch_file(rows * len(names) * _FLOAT32) as handle:
        scratch = SplitRows(handle, split, len(names))
        for group, (start, end) in enumerate(bounds):
            features = np.empty((len(names), end - start), dtype=np.float32)
            for index, name in enumerate(names):
                features[index] = read_column(file, group, name)
            scratch.write(features, split[start:end])
            del features
        mapped = scratch.mapped(target, names)
    give_back()
    return mapped
