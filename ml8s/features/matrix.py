"""The feature matrix file (``features/feature_matrix.parquet``): written and read with fixed options.

Both directions go a row group at a time, so neither holds the matrix twice: writing encodes each row group
from the typed columns straight to float32, and training reads it into one float32 array (never float64). A
process that writes the matrix and then trains on it (``ml8s run``) hands the float32 rows over in a scratch
file written beside the Parquet file, so training maps them without decoding the file again. The mapped rows
are grouped by split (:class:`MappedMatrix`), so that training and evaluation each keep only their own rows
resident. Reading the file back whole or by split is :mod:`ml8s.features.matrix_read`.
"""

from __future__ import annotations

import mmap
import os
import tempfile
from collections.abc import Collection, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import IO

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.parquet as pq

from ml8s.data.columns import Column
from ml8s.errors import DataError
from ml8s.features.column_names import SPLIT, TARGET
from ml8s.features.matrix_read import feature_names, read_column, read_matrix32
from ml8s.inference.rules import FeatureRule, encode_each
from ml8s.memory import return_freed_memory

IntArray = npt.NDArray[np.int64]
Float32Array = npt.NDArray[np.float32]
# pyarrow's default row group size for write_table: writing group by group with it keeps every matrix file's
# bytes what one write_table call of the whole matrix wrote before.
ROW_GROUP = 1024 * 1024


def write_matrix_arrays(
    path: str, matrix: npt.NDArray[np.floating], names: list[str], target: IntArray, split: npt.NDArray[np.integer]
) -> None:
    """Parquet with fixed writer options: same values, same bytes (pyarrow is pinned)."""

    def groups() -> Iterator[tuple[Iterator[npt.NDArray[np.floating]], IntArray, npt.NDArray[np.integer]]]:
        for start in range(0, len(target), ROW_GROUP):
            end = min(start + ROW_GROUP, len(target))
            yield (matrix[start:end, i] for i in range(len(names))), target[start:end], split[start:end]

    _write(path, names, groups(), overlap=False)  # the matrix is in memory already: nothing to hide a group in


def write_encoded(
    path: str,
    rules: Sequence[FeatureRule],
    columns: Mapping[str, Column],
    kept: Mapping[str, Collection[str]],
    target: IntArray,
    split: npt.NDArray[np.integer],
    *,
    hand_over: bool = False,
) -> None:
    """The matrix of ``rules`` over ``columns``, encoded and written one row group, one feature at a time.

    ``hand_over`` (a process that trains next, ``ml8s run``) also writes the float32 rows into a scratch file
    that :func:`map_matrix32` of this file then maps instead of decoding the Parquet file again.
    """
    names = [rule.name for rule in rules]

    def groups() -> Iterator[tuple[Iterator[npt.NDArray[np.floating]], IntArray, npt.NDArray[np.integer]]]:
        for start in range(0, len(target), ROW_GROUP):
            end = min(start + ROW_GROUP, len(target))
            part = {name: columns[name].part(start, end) for name in sorted({rule.source for rule in rules})}
            yield encode_each(rules, part, kept), target[start:end], split[start:end]

    train_rows = int(np.count_nonzero(split == 0))
    if not hand_over or not len(target) * len(names):
        _write(path, names, groups(), overlap=overlaps(len(target), len(names), train_rows))
        return
    _handed.clear()
    with tempfile.TemporaryFile(prefix="ml8s-matrix-") as handle:
        scratch = _SplitRows(handle, split, len(names))
        _write(path, names, groups(), scratch, overlap=overlaps(len(target), len(names), train_rows))
        mapped = scratch.mapped(target, names)
    stat = os.stat(path)
    key = (os.path.realpath(path), stat.st_ino, stat.st_size, stat.st_mtime_ns)
    _handed.append(_Handed(key, mapped))


@dataclass(frozen=True)
class _Handed:
    """The rows of the matrix file this process wrote last (``key``: its path, inode, size and mtime)."""

    key: tuple[str, int, int, int]
    mapped: MappedMatrix


_handed: list[_Handed] = []  # at most one: taken by the training of this process


def _take(path: str) -> _Handed | None:
    """The rows handed over for ``path``, when it is still the file written (else None: decode it)."""
    handed = _handed.pop() if _handed else None
    try:
        stat = os.stat(path)
    except OSError:
        return None
    key = (os.path.realpath(path), stat.st_ino, stat.st_size, stat.st_mtime_ns)
    return handed if handed is not None and handed.key == key else None


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


class _SplitRows:
    """Writes float32 rows into a scratch file at their place in the split-grouped order of
    :class:`MappedMatrix` (``split`` is every row's split, known before the first row is written)."""

    def __init__(self, handle: IO[bytes], split: npt.NDArray[np.integer], features: int) -> None:
        self.handle, self.features, self.split = handle, features, split
        # counted, not np.unique, which sorts a copy of every row's split (0.07 s against 0.16 s at 20M rows)
        tally = np.bincount(split)
        values = np.flatnonzero(tally)
        counts = tally[values]
        self.counts = dict(zip(values.tolist(), counts.tolist(), strict=True))  # split value -> rows, sorted
        starts = np.concatenate(([0], np.cumsum(counts)[:-1])).tolist()
        self.next = dict(zip(values.tolist(), starts, strict=True))  # split value -> the next row to write

    def write(self, arrays: list[Float32Array], split: npt.NDArray[np.integer]) -> None:
        """Write the rows of ``arrays`` (one float32 array per feature column) whose splits are ``split``, a
        slice of rows at a time: a row-major copy of a whole row group would be 128 MiB more at 32 features."""
        for start in range(0, len(split), _ROWS_PER_WRITE):
            part = split[start : start + _ROWS_PER_WRITE]
            # The slice's columns copied whole (contiguous copies), then its rows gathered a split at a time:
            # a row is 4 x features contiguous bytes of the transposed view. 3.7x faster than gathering each
            # column by the split and interleaving the columns (np.stack along the rows' axis).
            rows = np.stack([a[start : start + len(part)] for a in arrays]).T
            for value in np.flatnonzero(np.bincount(part)).tolist():
                chosen = np.flatnonzero(part == value)
                block = rows if len(chosen) == len(part) else rows[chosen]
                self.handle.seek(self.next[value] * self.features * _FLOAT32)
                self.handle.write(np.ascontiguousarray(block, dtype=np.float32).data)
                self.next[value] += len(chosen)

    def mapped(self, target: npt.NDArray[np.integer], names: list[str]) -> MappedMatrix:
        """The rows written, mapped copy-on-write (torch tensors can share them), with the class indices and
        splits in the same order."""
        self.handle.flush()
        rows = len(self.split)
        region = mmap.mmap(self.handle.fileno(), rows * self.features * _FLOAT32, access=mmap.ACCESS_COPY)
        features: Float32Array = np.frombuffer(region, dtype=np.float32).reshape(rows, self.features)
        narrow = target.astype(np.int32)
        grouped = np.concatenate([narrow[self.split == v] for v in self.counts]) if self.counts else narrow
        split = np.repeat(np.array(list(self.counts), dtype=np.int8), list(self.counts.values()))
        return MappedMatrix(features, grouped, split, names, region)


def _write(
    path: str,
    names: list[str],
    groups: Iterator[tuple[Iterator[npt.NDArray[np.floating]], IntArray, npt.NDArray[np.integer]]],
    scratch: _SplitRows | None = None,
    *,
    overlap: bool,
) -> None:
    """Row groups written in order by one writer. With ``overlap`` (one more group costs no peak memory:
    :func:`overlaps`), each group is compressed and written in a thread of its own while the next is encoded
    (Arrow's writer releases the GIL): still one group written at a time, in order, so the bytes are the same."""
    schema = pa.schema([*((name, pa.float32()) for name in names), (TARGET, pa.int32()), (SPLIT, pa.int8())])
    with (
        pq.ParquetWriter(
            path, schema, compression="zstd", compression_level=3, use_dictionary=False, write_statistics=True
        ) as writer,
        ThreadPoolExecutor(1, thread_name_prefix="ml8s-parquet") as pool,  # left first: the writes are done
    ):
        writing: Future[None] | None = None
        for features, target, split in groups:
            table = [_group_table(schema, features, target, split, scratch)]
            if not overlap:
                _write_taken(writer, table)  # freed before the next group is encoded
                continue
            if writing is not None:
                writing.result()
            writing = pool.submit(_write_taken, writer, table)
        if writing is not None:
            writing.result()
    pa.default_memory_pool().release_unused()  # Arrow's allocator keeps freed pages: torch is loaded next


def _write_taken(writer: pq.ParquetWriter, table: list[pa.Table]) -> None:
    """Write the one table in ``table``, taken out of it: it is freed when the write returns, whichever thread
    wrote it (a table passed as an argument lived on in the thread pool's work item)."""
    writer.write_table(table.pop(), row_group_size=ROW_GROUP)


def overlaps(rows: int, features: int, train_rows: int) -> bool:
    """Whether a row group of freshly fitted features may be encoded while the one before is written: when a
    group's float32 columns take no more memory than fitting the rules held a moment before (about three float64
    columns of the training rows: a column's training rows while a feature is made of them, the feature's values
    on them and numpy's variance temporary), so the step's peak does not grow.

    Measured on the demo's 32 features: at 20M rows writing the file took 28 s instead of 46 s; at 2M rows the
    overlap would have raised the step's peak by a group (123 MiB), so it is not done there.
    """
    return 4 * features * min(rows, ROW_GROUP) <= 3 * 8 * train_rows


def _group_table(
    schema: pa.Schema,
    features: Iterator[npt.NDArray[np.floating]],
    target: IntArray,
    split: npt.NDArray[np.integer],
    scratch: _SplitRows | None,
) -> pa.Table:
    """One row group's table (its float32 rows also written to ``scratch``). A function of its own so that its
    float64 intermediates are freed before the next group's are made."""
    arrays = [_float32(name, values) for name, values in zip(schema.names, features, strict=False)]
    if scratch is not None:
        scratch.write(arrays, split)
    columns = [pa.array(values) for values in arrays]
    columns += [pa.array(target.astype(np.int32)), pa.array(split.astype(np.int8))]
    return pa.Table.from_arrays(columns, schema=schema)


def _float32(name: str, values: npt.NDArray[np.floating]) -> Float32Array:
    """A feature's values as float32, refused where one is too large for it: the rules were fitted on other rows
    (a warm start's parent, or the training split), so a value of these rows may be beyond float32's range."""
    narrow = np.asarray(values, dtype=np.float32)
    if not np.isfinite(narrow).all():
        peak = max(float(np.nanmax(values)), -float(np.nanmin(values)))
        raise DataError(
            f"feature {name!r} has a value too large for the float32 feature matrix (magnitude {peak:.6g}, "
            f"under the rules fitted on the training rows); expected magnitudes below 3.4e38 (rescale its column, "
            "or list it in EXCLUDE_COLUMNS)"
        )
    return narrow


_ROWS_PER_WRITE = 1 << 16
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
    with tempfile.TemporaryFile(prefix="ml8s-matrix-") as handle:
        scratch = _SplitRows(handle, split, len(names))
        for group, (start, end) in enumerate(bounds):
            arrays = [np.asarray(read_column(file, group, name), dtype=np.float32) for name in names]
            scratch.write(arrays, split[start:end])
            del arrays
        mapped = scratch.mapped(target, names)
    pa.default_memory_pool().release_unused()
    return mapped
