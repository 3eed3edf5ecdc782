"""Read DATA_ROOT exactly as fingerprinted and type its columns deterministically.

Files are read in fingerprint order and each is re-checked against its fingerprint entry while it is
read (local: sha256 and size of the bytes parsed), so the data that trains is the data that was
hashed. CSV cells are read as text and typed over *all* rows at once, so how the rows are split into
files never changes a column's type. Text cells that spell a missing value (:mod:`ml8s.data.missing`)
are missing in every column; a mostly-numeric column's stray text is read as missing and reported.
"""

from __future__ import annotations

import csv
import io
import os

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
from pydantic import BaseModel, ConfigDict

from ml8s.data.columns import NUMBER as _NUMBER
from ml8s.data.columns import Column, FloatArray, ObjectArray, categorical, present_text, text_column
from ml8s.data.columns import convert as _convert
from ml8s.data.columns import floats as _floats
from ml8s.data.fingerprint import FileEntry, Fingerprint
from ml8s.data.missing import MISSING_TOKENS, DataWarning, is_mostly_numeric, stray_text_warning
from ml8s.data.sources import read_verified
from ml8s.errors import DataError

__all__ = ["Column", "Dataset", "FloatArray", "ObjectArray", "load_dataset", "parse_file", "text_column"]

# Spelled infinities are numbers too (so they are found and refused below, not one-hot encoded).
_INFINITY = r"^[+-]?(inf|infinity)$"
_FORMATS = {".csv": "csv", ".parquet": "parquet", ".pq": "parquet"}


class Dataset(BaseModel):
    """All rows of DATA_ROOT, columns sorted by name, rows in fingerprint then file order."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    columns: tuple[Column, ...]
    rows: int
    rows_per_file: dict[str, int]
    warnings: tuple[DataWarning, ...] = ()

    def column(self, name: str) -> Column:
        for column in self.columns:
            if column.name == name:
                return column
        raise KeyError(name)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)


def load_dataset(fingerprint: Fingerprint) -> Dataset:
    """Parse every file of the fingerprint into one typed dataset.

    Raises:
        DataChangedError: a file's bytes differ from its fingerprint entry.
        DataError: unsupported, unreadable or inconsistent files, or no rows at all.
    """
    tables: list[pa.Table] = []
    rows_per_file: dict[str, int] = {}
    names: tuple[str, ...] | None = None
    first = ""
    for entry, data in read_verified(fingerprint):
        table = _parse(entry, data, fingerprint.data_root)
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
    typed = [_type_column(name, [t.column(name) for t in tables]) for name in names]
    for column, _ in typed:
        _check_finite(column, tables, list(rows_per_file), fingerprint.data_root)
    return Dataset(
        columns=tuple(column for column, _ in typed),
        rows=total,
        rows_per_file=rows_per_file,
        warnings=tuple(warning for _, warning in typed if warning is not None),
    )


def _check_finite(column: Column, tables: list[pa.Table], files: list[str], root: str) -> None:
    """A number that overflowed (``1e999``) or an infinity is a DataError naming the file, column and row."""
    if column.kind == "categorical":
        return
    bad = np.flatnonzero(np.isinf(column.values.astype(np.float64)))
    if not len(bad):
        return
    row = int(bad[0])
    for path, table in zip(files, tables, strict=True):
        if row < table.num_rows:
            cell = table.column(column.name)[row].as_py()
            shown = repr(cell.strip()) if isinstance(cell, str) else str(cell)
            raise DataError(
                f"data file {path} (under {root}), column {column.name!r}, data row {row + 1} (1 = the first row "
                f"after the header): {shown} is not a finite number; expected finite numbers (a missing value is "
                f"empty or one of {list(MISSING_TOKENS)})"
            )
        row -= table.num_rows


def _where(fingerprint: Fingerprint, entry: FileEntry) -> str:
    return f"data file {entry.relative_path} (under {fingerprint.data_root})"


def parse_file(entry: FileEntry, data: bytes, root: str) -> pa.Table:
    """One data file's table (CSV cells as text, Parquet as typed); ``root`` names DATA_ROOT in errors.

    Raises:
        DataError: an unsupported format, an empty file, or bytes that do not parse.
    """
    return _parse(entry, data, root)


def _parse(entry: FileEntry, data: bytes, root: str) -> pa.Table:
    where = f"data file {entry.relative_path} (under {root})"
    fmt = _FORMATS.get(os.path.splitext(entry.relative_path)[1].lower())
    if fmt is None:
        raise DataError(
            f"{where} has an unsupported format; expected .csv or .parquet files only "
            "(every file under DATA_ROOT is fingerprinted and read)"
        )
    if not data:
        raise DataError(f"{where} is empty; expected a header line and rows")
    try:
        if fmt == "parquet":
            return pq.read_table(pa.BufferReader(data))
        header = _csv_header(data, where)
        options = pacsv.ConvertOptions(column_types={n: pa.string() for n in header}, strings_can_be_null=False)
        return pacsv.read_csv(pa.BufferReader(data), convert_options=options)
    except (pa.ArrowException, UnicodeDecodeError, csv.Error) as exc:
        raise DataError(f"{where} cannot be parsed as {fmt}: {exc}") from exc


def _csv_header(data: bytes, where: str) -> list[str]:
    line = data.split(b"\n", 1)[0].decode("utf-8")
    header = next(csv.reader(io.StringIO(line)), [])
    if not header or any(not name.strip() for name in header):
        raise DataError(f"{where} has an empty or blank column name in its header; expected named columns")
    duplicates = sorted({n for n in header if header.count(n) > 1})
    if duplicates:
        raise DataError(f"{where} repeats column(s) {duplicates} in its header; expected unique names")
    return header


def _type_column(name: str, chunks: list[pa.ChunkedArray]) -> tuple[Column, DataWarning | None]:
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
    spelled_infinity = pc.match_substring_regex(values, _INFINITY, ignore_case=True)
    is_number = pc.fill_null(pc.or_(pc.match_substring_regex(values, _NUMBER), spelled_infinity), False)
    numbers = int(pc.sum(is_number).as_py() or 0)
    if not is_mostly_numeric(numbers, len(non_missing)):
        return categorical(name, values), None
    warning = None
    if numbers < len(non_missing):
        stray = pc.drop_null(pc.if_else(is_number, pa.scalar(None, pa.string()), values)).to_pylist()
        warning = stray_text_warning(name, [str(v) for v in stray], numbers)
        values = pc.if_else(is_number, values, pa.scalar(None, pa.string()))
    return Column(name=name, kind="numeric", values=_floats(_convert(values, pa.float64()))), warning
