"""Cells as the transform reads them: a column of text, one cell a row (null or blank: a missing value).

Rows come as mappings (``ml8s.inference`` callers, the serving client), by column (a DataFrame's columns: the
MLflow model) or as Arrow columns (a data file: ``ml8s predict``, a warm start's drift report). Whichever way,
a cell becomes the text a CSV file would hold, so that a value is typed by the training rules alone: text as
it is, a boolean ``true``/``false``, an integer in decimal, a float as its shortest exact text (NaN missing).
The other values a Parquet column training reads can hold (:func:`ml8s.data.table_columns.readable`) become the
text training made of that column: a decimal as Arrow spells it (``1.50``), a date as its ISO day, bytes as
their UTF-8 text. Anything else (a datetime, whose text in training depended on the file's unit) is refused,
naming the row (1 = the first) and the column.
"""

from __future__ import annotations

import datetime
import decimal
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ml8s.data.columns import convert, decoded, is_text
from ml8s.data.table_columns import spelled_by_arrow
from ml8s.errors import PredictionInputError

Rows = Sequence[Mapping[str, object]]
# Text columns by name, one cell a row (null or blank: missing), as a CSV file's columns read as text
Cells = Mapping[str, pa.Array]


@dataclass(frozen=True)
class ReadCells:
    """Text columns read from tables (:func:`read_cells`), ``rows`` rows each, and the error of each column's
    first row that could not be read (a row without the column, or a value no cell can be): raised when a
    transform types that column, in its turn, as the rows themselves would raise it. A dataclass: it holds
    Arrow arrays and exceptions that never leave the process."""

    cells: dict[str, pa.Array]
    failed: dict[str, PredictionInputError]
    rows: int


def read_cells(tables: Iterable[pa.Table], names: Sequence[str]) -> ReadCells:
    """The text cells of columns ``names`` of the tables' rows, one table after the other (each read once, so a
    generator of tables keeps one in memory): what :func:`row_cells` makes of their ``to_pylist`` rows."""
    pieces: dict[str, list[pa.Array]] = {name: [] for name in names}
    failed: dict[str, PredictionInputError] = {}
    rows = 0
    for table in tables:
        for name in names:
            if name in failed or not table.num_rows:
                continue
            if name not in table.column_names:
                failed[name] = absent_column(name, rows)
                continue
            try:
                pieces[name].append(arrow_cells(table.column(name), name, rows))
            except PredictionInputError as exc:
                failed[name] = exc
        rows += table.num_rows
    cells = {
        name: pa.concat_arrays(parts) if parts else pa.array([], type=pa.string())
        for name, parts in pieces.items()
        if name not in failed
    }
    return ReadCells(cells=cells, failed=failed, rows=rows)


def parquet_table(data: bytes, where: str) -> pa.Table:
    """A Parquet file's rows (``ml8s predict --input FILE.parquet``), read as training reads its Parquet files;
    ``where`` names the file in errors.

    Raises:
        PredictionInputError: bytes that are no Parquet file (a column name twice included, as training says).
    """
    try:
        table = pq.read_table(pa.BufferReader(data))
    except pa.ArrowException as exc:
        raise PredictionInputError(f"{where} cannot be read as Parquet: {exc}; expected a Parquet file") from exc
    return table


def row_cells(rows: Rows, name: str) -> pa.Array:
    """The text cells of column ``name`` of ``rows``."""
    return pa.array([_cell_text(_cell(row, name, i), name, i) for i, row in enumerate(rows)], type=pa.string())


def value_cells(values: Mapping[str, Sequence[object]], name: str, rows: int) -> pa.Array:
    """The text cells of column ``name`` of ``rows`` rows given by column: what :func:`row_cells` makes of the
    same rows."""
    if name not in values:
        if rows:  # the first row lacks it, as every row does
            raise absent_column(name, 0)
        return pa.array([], type=pa.string())
    return pa.array([_cell_text(value, name, i) for i, value in enumerate(values[name])], type=pa.string())


def arrow_cells(values: pa.Array | pa.ChunkedArray, name: str, first_row: int) -> pa.Array:
    """The text cells of an Arrow column whose first value is row ``first_row`` (0-based) of the rows: a text
    column as it is (no Python object per cell), any other cell by cell, as :func:`row_cells` reads the same
    values (``to_pylist`` rows)."""
    column = decoded(values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values)
    if is_text(column.type) or spelled_by_arrow(column.type):
        try:  # the cast training made of the column (ml8s.data.table_columns.type_column)
            text: pa.Array = convert(column, pa.string())
            return text
        except pa.ArrowInvalid:  # bytes that are not UTF-8: named cell by cell below, as training refuses them
            pass
    return pa.array(
        [_cell_text(value, name, first_row + i) for i, value in enumerate(column.to_pylist())], type=pa.string()
    )


def absent_column(name: str, index: int) -> PredictionInputError:
    """The error of row ``index`` (0-based) lacking column ``name``."""
    return PredictionInputError(
        f"row {index + 1} has no column {name!r}; expected every column the model's features use"
    )


def _cell(row: Mapping[str, object], name: str, index: int) -> object:
    try:
        return row[name]
    except KeyError:
        raise absent_column(name, index) from None


def _cell_text(value: object, name: str, index: int) -> str | None:
    """A cell as CSV text: None for a missing value, numbers written so they read back exactly."""
    if isinstance(value, np.generic):
        value = value.item()
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return None if math.isnan(value) else repr(value)
    if isinstance(value, decimal.Decimal) and value.is_finite():
        return _decimal_text(value)
    if isinstance(value, datetime.date) and not isinstance(value, datetime.datetime):
        return value.isoformat()  # Arrow's text of a date column: 2024-01-31
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            raise PredictionInputError(
                f"row {index + 1} column {name!r} holds bytes that are not UTF-8; expected UTF-8 text, as training "
                "reads a binary column"
            ) from None
    raise PredictionInputError(
        f"row {index + 1} column {name!r} holds a {type(value).__name__}; expected text, a number, a boolean or None"
    )


def _decimal_text(value: decimal.Decimal) -> str:
    """A decimal as Arrow spells a decimal column's cell (``0.00``: Arrow stores no sign of zero); one no Parquet
    decimal can hold (more than 76 digits) as Python spells it, the same number."""
    try:
        spelled = convert(pa.array([value]), pa.string())  # the cast training's typing makes of the column
    except pa.ArrowException:
        return str(value)
    return str(spelled[0])
