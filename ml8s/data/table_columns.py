"""Columns typed from whole Arrow tables (Parquet files, or CSV text read at once): a column's type is decided over
all its files' cells, whatever types the files gave it.

Text is typed by the rules of :mod:`ml8s.data.missing`, as the CSV path types it a block at a time
(:mod:`ml8s.data.csv_columns`): booleans spelled ``true``/``false`` in any case, a mostly-numeric column's stray
text read as missing and reported, anything else categorical.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from ml8s.data.columns import Column, categorical, number_mask, present_text
from ml8s.data.columns import convert as _convert
from ml8s.data.columns import floats as _floats
from ml8s.data.missing import DataWarning, is_mostly_numeric, stray_text_warning
from ml8s.errors import DataError

__all__ = ["type_column"]


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
