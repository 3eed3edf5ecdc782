"""Read DATA_ROOT exactly as fingerprinted and type its columns deterministically.

Files are read in fingerprint order and each is re-checked against its fingerprint entry while it is
read (local: sha256 and size of the bytes parsed), so the data that trains is the data that was
hashed. CSV cells are read as text and typed over *all* rows at once, so how the rows are split into
files never changes a column's type. Text cells that spell a missing value (:mod:`ml8s.data.missing`)
are missing in every column; a mostly-numeric column's stray text is read as missing and reported.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Protocol

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import BaseModel, ConfigDict

from ml8s.data.columns import Column, FloatArray, ObjectArray, text_column
from ml8s.data.csv_columns import Chunk, chunk_route, file_row, finish, not_finite
from ml8s.data.csv_lines import FileBytes
from ml8s.data.csv_text import csv_batches, csv_table
from ml8s.data.csv_typed import Plan
from ml8s.data.fingerprint import FileEntry, Fingerprint
from ml8s.data.missing import DataWarning
from ml8s.data.slices import first_infinite as _first_infinite
from ml8s.data.sources import read_checking, read_verified, restrict
from ml8s.data.table_columns import missing_column, timed, type_column, unreadable
from ml8s.errors import DataError
from ml8s.memory import give_back, return_freed_memory
from ml8s.threads import COLUMN_THREADS, in_order

log = logging.getLogger(__name__)
__all__ = ["Column", "Dataset", "FloatArray", "Lead", "ObjectArray", "load_dataset", "parse_file", "text_column"]

_FORMATS = {".csv": "csv", ".parquet": "parquet", ".pq": "parquet"}


class Dataset(BaseModel):
    """All rows of DATA_ROOT, columns sorted by name, rows in fingerprint then file order."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    columns: tuple[Column, ...]
    rows: int
    rows_per_file: dict[str, int]
    warnings: tuple[DataWarning, ...] = ()
    # column -> the DataError message refusing its Parquet type: a column of it is refused where it would be a feature
    # or the target (unless EXCLUDE_COLUMNS names it); one dropped anyway (an identifier, every value missing) never
    # reaches predicting, so it trains as before. ``unread``: those of them that could not be typed at all (nested
    # types: all missing here), refused unless excluded.
    refused: dict[str, str] = {}
    unread: tuple[str, ...] = ()

    def column(self, name: str) -> Column:
        for column in self.columns:
            if column.name == name:
                return column
        raise KeyError(name)

    def refuse_unread(self, excluded: tuple[str, ...], kept: tuple[str, ...]) -> None:
        """Raise the first refusal (``refused``, by name) of a column that ``excluded`` (EXCLUDE_COLUMNS) lacks and
        that was not typed (``unread``) or is ``kept`` (a feature, or the target)."""
        for name, message in sorted(self.refused.items()):
            if name not in excluded and (name in self.unread or name in kept):
                raise DataError(message)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)


class Lead(Protocol):
    """A caller's use for one column before the others are typed (:func:`load_dataset`'s ``lead``)."""

    def pick(self, names: tuple[str, ...]) -> str | None:
        """The column wanted first, among every column's name (None: none)."""

    def take(self, column: Column) -> None:
        """The picked column, once typed: called on the thread that typed it while others are still typed."""


def load_dataset(fingerprint: Fingerprint, *, lead: Lead | None = None) -> Dataset:
    """Parse every file of the fingerprint into one typed dataset.

    ``lead`` picks a column that is typed before the others and handed to it as soon as it is (the features
    step draws the split from the target column while the other columns are typed); the dataset is the same.

    Raises:
        DataChangedError: a file's bytes differ from its fingerprint entry.
        DataError: unsupported, unreadable or inconsistent files, or no rows at all.
    """
    return_freed_memory()
    if all(_FORMATS.get(os.path.splitext(e.relative_path)[1].lower()) == "csv" for e in fingerprint.entries):
        return _load_csv(fingerprint, lead)
    tables: list[pa.Table] = []
    rows_per_file: dict[str, int] = {}
    names: tuple[str, ...] | None = None
    first = ""
    refused: dict[str, str] = {}
    for entry, data in read_verified(fingerprint):
        table = _parse(entry, data, fingerprint.data_root)
        refused = unreadable(table, _where(fingerprint, entry)) | refused  # the first file's words for a column
        these = tuple(sorted(table.column_names))
        if names is None:
            names, first = these, entry.relative_path
        elif these != names:
            raise DataError(
                f"{_where(fingerprint, entry)} has columns {list(these)}; "
                f"expected the columns of {first}: {list(names)}"
            )
        tables.append(table.select(list(these)))
        rows_per_file[entry.relative_path] = table.num_rows
    total = sum(rows_per_file.values())
    if names is None or total == 0:
        raise DataError(f"DATA_ROOT {fingerprint.data_root} holds no data rows; expected at least 2 rows")
    unread = tuple(name for name in names if name in refused and not timed(tables[0].schema.field(name).type))
    typed = [
        (missing_column(name, total), None) if name in unread else type_column(name, [t.column(name) for t in tables])
        for name in names
    ]
    for column, _ in typed:
        _check_finite(column, tables, list(rows_per_file), fingerprint.data_root)
    if lead is not None and (picked := lead.pick(names)) is not None:
        lead.take(typed[names.index(picked)][0])
    return Dataset(
        columns=tuple(column for column, _ in typed),
        rows=total,
        rows_per_file=rows_per_file,
        warnings=tuple(warning for _, warning in typed if warning is not None),
        refused=dict(sorted(refused.items())),
        unread=unread,
    )


def _load_csv(fingerprint: Fingerprint, lead: Lead | None) -> Dataset:
    """:func:`load_dataset` of CSV files, a block at a time: each block's text is reduced to compact typed chunks
    (:mod:`ml8s.data.csv_columns`) before the next is parsed, so one file's bytes and one block's text are held
    besides the typed chunks."""
    root = fingerprint.data_root
    chunks: dict[str, list[Chunk]] = {}
    rows_per_file: dict[str, int] = {}
    files: list[FileEntry] = []
    names: tuple[str, ...] | None = None
    origins: list[tuple[int, int, int]] = []  # per chunk: (file index, first row in the file, rows)
    plan = Plan()  # the parser types the columns whose earlier blocks say how (ml8s.data.csv_typed)
    for entry, data, check in read_checking(fingerprint, reuse=True):  # nothing holds a file's bytes past it
        try:
            these, blocks = _typed_blocks(data, _where(fingerprint, entry), plan)
        except DataError:
            check()  # a file changed since it was fingerprinted is named as such, not by what it holds now
            raise
        check()
        if names is None:
            names = these
        elif these != names:
            raise DataError(
                f"{_where(fingerprint, entry)} has columns {list(these)}; expected the columns of "
                f"{files[0].relative_path}: {list(names)}"
            )
        rows = _collect(these, blocks, chunks, origins, len(files))
        del data, blocks  # ``chunks`` alone holds them now: typing a column frees its chunks as it drains them
        give_back()  # the file's blocks of text
        rows_per_file[entry.relative_path] = rows
        files.append(entry)
        log.info("[data] parsed %s: %d rows (%d rows so far)", entry.relative_path, rows, sum(rows_per_file.values()))
    total = sum(rows_per_file.values())
    if names is None or total == 0:
        raise DataError(f"DATA_ROOT {root} holds no data rows; expected at least 2 rows")

    def file_cells(name: str, index: int) -> pa.ChunkedArray:
        entry = files[index]
        (_, data), *_ = read_verified(restrict(fingerprint, [entry.relative_path]))
        return _parse(entry, data, root).column(name)

    def cells_of(name: str) -> Callable[[int], pa.ChunkedArray]:
        parsed: dict[int, pa.ChunkedArray] = {}  # the last file parsed again: its blocks come one after another

        def cells(chunk: int) -> pa.ChunkedArray:
            index, start, rows = origins[chunk]
            if index not in parsed:
                parsed.clear()
                parsed[index] = file_cells(name, index)
            return parsed[index].slice(start, rows)

        return cells

    first = lead.pick(names) if lead is not None else None  # the column typed before the others, if any

    def finished(name: str) -> tuple[Column, DataWarning | None]:
        column, warning = finish(name, chunks.pop(name), cells_of(name))
        if column.kind != "categorical":
            bad = _first_infinite(column.values)
            if bad is not None:
                index, row = file_row(bad, [rows_per_file[f.relative_path] for f in files])
                raise not_finite(files[index].relative_path, root, name, row, file_cells(name, index)[row].as_py())
        give_back()  # the column's chunks, drained into it
        if lead is not None and name == first:
            lead.take(column)
        return column, warning

    # two columns at a time, the lead's first; the error, where columns fail, is the first one's in name order
    start = names.index(first) if first is not None else None
    results = in_order(finished, names, threads=COLUMN_THREADS, name="column", lead=start)
    return Dataset(
        columns=tuple(column for column, _ in results),
        rows=total,
        rows_per_file=rows_per_file,
        warnings=tuple(warning for _, warning in results if warning is not None),
    )


_THREADS = min(4, os.cpu_count() or 1)


def _collect(
    names: tuple[str, ...],
    blocks: list[tuple[int, list[Chunk]]],
    chunks: dict[str, list[Chunk]],
    origins: list[tuple[int, int, int]],
    file: int,
) -> int:
    """Append a file's blocks' chunks to their columns' and the blocks' origins; the file's rows."""
    rows = 0
    for count, typed in blocks:
        for name, chunk in zip(names, typed, strict=True):
            chunks.setdefault(name, []).append(chunk)
        origins.append((file, rows, count))
        rows += count
    return rows


def _typed_blocks(data: FileBytes, where: str, plan: Plan) -> tuple[tuple[str, ...], list[tuple[int, list[Chunk]]]]:
    """A CSV file's column names, sorted, and per block its rows and its columns' chunks in that order."""
    header, batches = csv_batches(data, where, empty_as_null=True, types=plan)
    these = tuple(sorted(header))
    blocks = []

    def chunk(batch: pa.RecordBatch, name: str) -> Chunk:
        made, route = chunk_route(batch.column(name))
        plan.learn(name, route)
        return made

    # Arrow's kernels release the GIL: a block's columns are typed in parallel
    with ThreadPoolExecutor(_THREADS, thread_name_prefix="ml8s-type") as pool:
        for batch in _read_ahead(batches):
            blocks.append((batch.num_rows, list(pool.map(partial(chunk, batch), these))))
    return these, blocks


def _read_ahead(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """``batches``, each next one parsed in a thread of its own while the caller types the one before (Arrow's
    parser releases the GIL): one parsed block waits at most, so memory holds one block of text more."""
    with ThreadPoolExecutor(1, thread_name_prefix="ml8s-csv") as pool:
        ahead = pool.submit(next, batches, None)
        while (batch := ahead.result()) is not None:
            ahead = pool.submit(next, batches, None)
            yield batch


def _check_finite(column: Column, tables: list[pa.Table], files: list[str], root: str) -> None:
    """A number that overflowed (``1e999``) or an infinity is a DataError naming the file, column and row."""
    if column.kind == "categorical":
        return
    bad = np.flatnonzero(np.isinf(column.values.astype(np.float64)))
    if not len(bad):
        return
    index, row = file_row(int(bad[0]), [t.num_rows for t in tables])
    raise not_finite(files[index], root, column.name, row, tables[index].column(column.name)[row].as_py())


def _where(fingerprint: Fingerprint, entry: FileEntry) -> str:
    return f"data file {entry.relative_path} (under {fingerprint.data_root})"


def parse_file(entry: FileEntry, data: FileBytes, root: str) -> pa.Table:
    """One data file's table (CSV cells as text, Parquet as typed); ``root`` names DATA_ROOT in errors.

    Raises:
        DataError: an unsupported format, an empty file, or bytes that do not parse.
    """
    return _parse(entry, data, root)


def _parse(entry: FileEntry, data: FileBytes, root: str) -> pa.Table:
    where = f"data file {entry.relative_path} (under {root})"
    fmt = _FORMATS.get(os.path.splitext(entry.relative_path)[1].lower())
    if fmt is None:
        raise DataError(
            f"{where} has an unsupported format; expected .csv or .parquet files only "
            "(every file under DATA_ROOT is fingerprinted and read)"
        )
    if fmt == "csv":
        return csv_table(data, where)
    if not data:
        raise DataError(f"{where} is empty; expected a header line and rows")
    try:
        return pq.read_table(pa.BufferReader(data))
    except pa.ArrowException as exc:
        raise DataError(f"{where} cannot be parsed as {fmt}: {exc}") from exc
