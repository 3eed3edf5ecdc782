"""Columns typed from whole Arrow tables (Parquet files, or CSV text read at once): a column's type is decided over
all its files' cells, whatever types the files gave it.

Text is typed by the rules of :mod:`ml8s.data.missing`, as the CSV path types it a block at a time
(:mod:`ml8s.data.csv_columns`): booleans spelled ``true``/``false`` in any case, a mostly-numeric column's stray
text read as missing and reported, anything else categorical.

A Parquet column is read only if predicting can read its cells as training does (:func:`refuse_unreadable`):
numbers (decimals too), booleans, text (binary as UTF-8), dates (their ISO day) and nulls. A timestamp's or a
time's text depends on the unit the file stores (``2024-01-01 00:00:00.000000`` at microseconds), a duration's
number too, and rows sent to predict (JSON, a pandas frame, Python values) do not carry that unit; nested values
are no cell at all. Those are refused by name before the run writes anything, unless EXCLUDE_COLUMNS names them
(:func:`ml8s.features.prepared.prepare` decides, once the excluded columns are known).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ml8s.data.columns import Column, categorical, number_mask, present_text
from ml8s.data.columns import convert as _convert
from ml8s.data.columns import floats as _floats
from ml8s.data.missing import DataWarning, is_mostly_numeric, stray_text_warning
from ml8s.errors import DataError

__all__ = ["missing_column", "readable", "type_column", "unreadable"]


def type_column(name: str, chunks: list[pa.ChunkedArray]) -> tuple[Column, DataWarning | None]:
    """The column ``name`` typed over every file's cells (``chunks``: one per file), and its warning if any.

    Raises:
        DataError: files whose types for the column cannot be read as one.
    """
    common = _common_type(name, chunks)
    try:  # files may disagree on a column's type (CSV text vs Parquet int, int32 vs int64, ...)
        parts = [c if c.type == common else _convert(c, common) for chunk in chunks for c in chunk.chunks]
    except pa.ArrowException as exc:
        types = sorted({str(c.type) for c in chunks})
        raise DataError(
            f"column {name!r} has type(s) {types} that cannot be read as {common}; expected numbers, booleans or text"
        ) from exc
    array = pa.chunked_array(parts, type=common)
    if pa.types.is_string(array.type) or pa.types.is_large_string(array.type):
        return _infer_text(name, array)
    if pa.types.is_boolean(array.type):
        return Column(name=name, kind="boolean", values=_floats(_convert(array, pa.float64()))), None
    return Column(name=name, kind="numeric", values=_floats(_convert(array, pa.float64()))), None


def unreadable(table: pa.Table, where: str) -> dict[str, str]:
    """The columns of a Parquet file's ``table`` whose type predicting cannot read as training does (module
    doc), each with the DataError message that refuses it unless EXCLUDE_COLUMNS names it; ``where`` names the
    file."""
    refused: dict[str, str] = {}
    for name in sorted(table.column_names):
        kind = table.schema.field(name).type
        if not readable(kind):
            refused[name] = (
                f"{where} column {name!r} is of type {kind}; expected numbers, booleans, decimals, dates or text, "
                f"whose cells predicting reads as training does: {_advice(kind)}"
            )
    return refused


def missing_column(name: str, rows: int) -> Column:
    """A column of ``rows`` missing values: what a refused column is until EXCLUDE_COLUMNS is known."""
    return Column(name=name, kind="categorical", values=np.full(rows, -1, dtype=np.int32))


def timed(kind: pa.DataType) -> bool:
    """Whether ``kind`` is a timestamp, time or duration: typed in training as before (the text or number of its
    cells), refused only where the column is kept (:meth:`ml8s.data.dataset.Dataset.refuse_unread`)."""
    if pa.types.is_dictionary(kind):
        return timed(kind.value_type)
    return bool(pa.types.is_timestamp(kind) or pa.types.is_time(kind) or pa.types.is_duration(kind))


def readable(kind: pa.DataType) -> bool:
    """Whether a column of Arrow type ``kind`` is read in training (module doc)."""
    if pa.types.is_dictionary(kind):
        return readable(kind.value_type)
    return bool(
        pa.types.is_integer(kind)
        or pa.types.is_floating(kind)
        or pa.types.is_boolean(kind)
        or pa.types.is_string(kind)
        or pa.types.is_large_string(kind)
        or pa.types.is_string_view(kind)
        or pa.types.is_null(kind)
        or spelled_by_arrow(kind)
    )


def spelled_by_arrow(kind: pa.DataType) -> bool:
    """Types whose cells training reads as Arrow's text of them (decimals, dates, binary): predicting spells a
    value of each so too (:mod:`ml8s.inference.cells`), so the two read one rule."""
    return bool(
        pa.types.is_decimal(kind)
        or pa.types.is_date(kind)
        or pa.types.is_binary(kind)
        or pa.types.is_large_binary(kind)
        or pa.types.is_fixed_size_binary(kind)
        or pa.types.is_binary_view(kind)
    )


def _advice(kind: pa.DataType) -> str:
    if pa.types.is_dictionary(kind):
        return _advice(kind.value_type)
    unit = "its text depends on the unit the file stores, which rows sent to predict do not carry"
    if pa.types.is_timestamp(kind) or pa.types.is_time(kind):
        return (
            "name it in EXCLUDE_COLUMNS, or write it as text (the value you mean, e.g. the day 2024-01-31 or "
            f"the hour 09) or as a number (e.g. seconds since 1970) before training ({unit})"
        )
    if pa.types.is_duration(kind) or pa.types.is_interval(kind):
        return (
            "name it in EXCLUDE_COLUMNS, or write it as a number in a unit you choose (e.g. seconds) before "
            f"training ({unit})"
        )
    return "name it in EXCLUDE_COLUMNS, or flatten it into columns of those types before training"


def _common_type(name: str, chunks: list[pa.ChunkedArray]) -> pa.DataType:
    types = {str(c.type) for c in chunks}
    if len(types) == 1:
        only = chunks[0].type
        if pa.types.is_integer(only) or pa.types.is_floating(only) or pa.types.is_boolean(only):
            return only
        if pa.types.is_string(only) or pa.types.is_large_string(only) or pa.types.is_null(only):
            return pa.string()
    if all(pa.types.is_integer(c.type) or pa.types.is_floating(c.type) for c in chunks):
        return pa.float64()
    return pa.string()


def _infer_text(name: str, array: pa.ChunkedArray) -> tuple[Column, DataWarning | None]:
    values = present_text(array)
    lower = pc.utf8_lower(values)
    non_missing = pc.drop_null(values)
    if len(non_missing) and pc.all(pc.is_in(pc.drop_null(lower), pa.array(["true", "false"]))).as_py():
        return Column(name=name, kind="boolean", values=_floats(_convert(pc.equal(lower, "true"), pa.float64()))), None
    is_number = number_mask(values)
    numbers = int(pc.sum(is_number).as_py() or 0)
    if not is_mostly_numeric(numbers, len(non_missing)):
        return categorical(name, values), None
    warning = None
    if numbers < len(non_missing):
        stray = pc.drop_null(pc.if_else(is_number, pa.scalar(None, pa.string()), values)).to_pylist()
        warning = stray_text_warning(name, [str(v) for v in stray], numbers)
        values = pc.if_else(is_number, values, pa.scalar(None, pa.string()))
    return Column(name=name, kind="numeric", values=_floats(_convert(values, pa.float64()))), warning
