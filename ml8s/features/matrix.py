"""The feature matrix file (``features/feature_matrix.parquet``): written and read with fixed options.

Both directions go a row group at a time, so neither holds the matrix twice: writing encodes each row group
from the typed columns straight to float32, and training reads it into one float32 array (never float64). A
process that writes the matrix and then trains on it (``ml8s run``) hands the float32 rows over in a scratch
file written beside the Parquet file, so training maps them without decoding the file again
(:mod:`ml8s.features.matrix_mapped`); a large matrix's file is then written from those rows while training runs
(:mod:`ml8s.features.matrix_deferred`). Reading the file back whole or by split is
:mod:`ml8s.features.matrix_read`.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.parquet as pq

from ml8s.data.columns import Column
from ml8s.features import matrix_deferred, matrix_mapped
from ml8s.features.column_names import SPLIT, TARGET
from ml8s.features.matrix_groups import GroupBuffers, encode_group, fill_group
from ml8s.features.matrix_mapped import SplitRows
from ml8s.inference.rules import FeatureRule
from ml8s.memory import give_back

IntArray = npt.NDArray[np.integer]  # class indices (int32 from preparing, int64 from a matrix file read back)
Float32Array = npt.NDArray[np.float32]
# A row group's float32 features (features x rows), class indices and splits.
Group = tuple[Float32Array, IntArray, npt.NDArray[np.integer]]
# pyarrow's default row group size for write_table: writing group by group with it keeps every matrix file's
# bytes what one write_table call of the whole matrix wrote before.
ROW_GROUP = 1024 * 1024


def write_matrix_arrays(
    path: str, matrix: npt.NDArray[np.floating], names: list[str], target: IntArray, split: npt.NDArray[np.integer]
) -> None:
    """Parquet with fixed writer options: same values, same bytes (pyarrow is pinned)."""

    buffers = GroupBuffers(len(names), min(len(target), ROW_GROUP), alternate=False)

    def groups() -> Iterator[Group]:
        for start in range(0, len(target), ROW_GROUP):
            end = min(start + ROW_GROUP, len(target))
            out = buffers.take(end - start)
            fill_group(names, matrix[start:end], out, buffers)
            yield out, target[start:end], split[start:end]

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
    train_rows = int(np.count_nonzero(split == 0))
    overlap = overlaps(len(target), len(names), train_rows)
    # with overlap a group is written while the next is encoded: two group buffers in turn (the _write loops wait
    # for a group's write before the group after next is encoded)
    buffers = GroupBuffers(len(names), min(len(target), ROW_GROUP), alternate=overlap)

    def groups() -> Iterator[Group]:
        for start in range(0, len(target), ROW_GROUP):
            end = min(start + ROW_GROUP, len(target))
            part = {name: columns[name].part(start, end) for name in sorted({rule.source for rule in rules})}
            out = buffers.take(end - start)
            encode_group(rules, part, kept, out, buffers)
            yield out, target[start:end], split[start:end]

    if not hand_over or not len(target) * len(names):
        _write(path, names, groups(), overlap=overlap)
        buffers.release()
        return
    matrix_mapped.forget_handed()
    defer = matrix_deferred.defers(len(target), ROW_GROUP, train_rows)
    with matrix_mapped.scratch_file(len(target) * len(names) * 4) as handle:
        scratch = SplitRows(handle, split, len(names))
        if defer:  # the file is written from the scratch rows while training runs
            _scratch_only(groups(), scratch, overlap=overlap)
        else:
            _write(path, names, groups(), scratch, overlap=overlap)
        buffers.release()  # not held beside the rows handed over (and the deferred writer's group)
        scratch.release()
        mapped = scratch.mapped(target, names)  # the rows flushed
        if defer:
            schema = _schema(names)
            writer = matrix_deferred.Writer(
                path,
                lambda out: _open_writer(out, schema),
                os.dup(handle.fileno()),
                split,
                mapped.target,
                scratch.starts(),
                len(names),
                ROW_GROUP,
            )
            matrix_deferred.start(writer)
            matrix_mapped.hand_over(path, mapped, deferred=True)
            return
    matrix_mapped.hand_over(path, mapped)


def _write(
    path: str,
    names: list[str],
    groups: Iterator[Group],
    scratch: SplitRows | None = None,
    *,
    overlap: bool,
) -> None:
    """Row groups written in order by one writer. With ``overlap`` (one more group costs no peak memory:
    :func:`overlaps`), each group is compressed and written in a thread of its own while the next is encoded
    (Arrow's writer releases the GIL): still one group written at a time, in order, so the bytes are the same."""
    schema = _schema(names)
    try:
        with (
            _open_writer(path, schema) as writer,
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
    except OSError as exc:
        raise matrix_deferred.write_error(path, exc) from exc
    give_back()  # the encoding's freed pages: torch is loaded next


def _scratch_only(
    groups: Iterator[Group],
    scratch: SplitRows,
    *,
    overlap: bool,
) -> None:
    """The row groups' float32 rows written to ``scratch`` alone (the file is written later, from them). With
    ``overlap``, a group's rows are written in a thread while the next group is encoded, as :func:`_write` does
    with the file (numpy's copies and the file writes release the GIL)."""
    with ThreadPoolExecutor(1, thread_name_prefix="ml8s-scratch") as pool:
        writing: Future[None] | None = None
        for features, _, split in groups:
            if not overlap:
                scratch.write(features, split)
                continue
            if writing is not None:
                writing.result()
            writing = pool.submit(scratch.write, features, split)
        if writing is not None:
            writing.result()


def _schema(names: list[str]) -> pa.Schema:
    return pa.schema([*((name, pa.float32()) for name in names), (TARGET, pa.int32()), (SPLIT, pa.int8())])


def _open_writer(path: str, schema: pa.Schema) -> pq.ParquetWriter:
    """The matrix file's writer: fixed options, so the same values give the same bytes (pyarrow is pinned)."""
    return pq.ParquetWriter(
        path, schema, compression="zstd", compression_level=3, use_dictionary=False, write_statistics=True
    )


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
    features: Float32Array,
    target: IntArray,
    split: npt.NDArray[np.integer],
    scratch: SplitRows | None,
) -> pa.Table:
    """One row group's table (features x rows; its float32 rows also written to ``scratch``): the features'
    columns are views of the group buffer, not copies."""
    if scratch is not None:
        scratch.write(features, split)
    columns = [pa.array(values) for values in features]
    # no copy where they are int32 and int8 already (as prepared)
    columns += [pa.array(target.astype(np.int32, copy=False)), pa.array(split.astype(np.int8, copy=False))]
    return pa.Table.from_arrays(columns, schema=schema)
