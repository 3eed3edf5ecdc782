"""Raw rows from CSV text, read as the training data's CSV files are: a header line, then text cells.

Every cell stays text (typing is the transform's job, with the training rules); an empty cell is a missing
value. A header with a blank or repeated name, a row with more or fewer cells than the header, bytes that are
not UTF-8, a data row repeating the header line and a row longer than training reads are refused.

:func:`read_csv_columns` reads a file as text columns (Arrow's parser, as training reads its data: no Python
object per cell), :func:`read_csv_rows` as one mapping per row (Python's csv module). Both accept the same files
and refuse the others with the same errors: a file Arrow's parser refuses is read again by Python's for the
error, and a file with a quote character is first checked by Python's strict reader, which refuses stray quotes
(``"x"y``) that Arrow's would read as ``xy``.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa

from ml8s.data.csv_text import csv_table, refuse_lines
from ml8s.errors import CsvRefusedError, DataError, PredictionInputError


@dataclass(frozen=True)
class CsvRows:
    """A CSV file's header (``columns``, in file order, spelled exactly as written: the training data's names
    are never stripped, so neither are these) and its rows as ``{column: cell text}``.

    The header is kept because a file may have no rows: its columns are still checked against the model's.
    """

    columns: tuple[str, ...]
    rows: list[dict[str, object]]


@dataclass(frozen=True)
class CsvColumns:
    """A CSV file's header (``columns``, as :class:`CsvRows`'s) and its cells as text columns by name (an empty
    cell is empty text), ``rows`` rows each. A dataclass: it holds Arrow arrays that never leave the process."""

    columns: tuple[str, ...]
    cells: dict[str, pa.Array]
    rows: int


def read_csv_columns(data: bytes, where: str) -> CsvColumns:
    """The header and text columns of a CSV file; ``where`` names the file in errors.

    Raises:
        PredictionInputError: the bytes are not a well-formed UTF-8 CSV file with a header (as :func:`read_csv_rows`).
    """
    if b'"' in data:
        for _ in _records(data, where):  # Python's strict reader's verdict on quoting, holding no row
            pass
    try:
        table = csv_table(data, where)
    except CsvRefusedError:
        raise  # a rule of ml8s's own (a repeated header, a row over a block), not Arrow's: Python's reader agrees
    except DataError:
        # Arrow's reader refuses some files Python's accepts (a header without a newline): Python's reads them,
        # and names the error where both refuse
        records = _records(data, where)
        header = next(records)
        body = list(records)
        cells = {name: pa.array([row[i] for row in body], type=pa.string()) for i, name in enumerate(header)}
        return CsvColumns(columns=tuple(header), cells=cells, rows=len(body))
    names = tuple(table.column_names)
    return CsvColumns(
        columns=names, cells={name: table.column(name).combine_chunks() for name in names}, rows=table.num_rows
    )


def read_csv_rows(data: bytes, where: str) -> CsvRows:
    """The header and rows of a CSV file; ``where`` names the file in errors.

    Raises:
        PredictionInputError: the bytes are not a well-formed UTF-8 CSV file with a header.
    """
    records = _records(data, where)
    names = next(records)
    rows: list[dict[str, object]] = [dict(zip(names, cells, strict=True)) for cells in records]
    refuse_lines(data, where)  # what read_csv_columns refuses with Arrow's reader, refused here too
    return CsvRows(columns=tuple(names), rows=rows)


def _records(data: bytes, where: str) -> Iterator[list[str]]:
    """The header's names, then each row's cells (as many as the names), read by Python's strict csv reader."""
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise PredictionInputError(f"{where} is not UTF-8 text ({exc.reason} at byte {exc.start})") from exc
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    try:
        header = next(reader, None)
        if header is None:
            raise PredictionInputError(f"{where} is empty; expected a header line of column names, then rows")
        names = list(header)
        if any(not name.strip() for name in names):
            raise PredictionInputError(f"{where} has a blank column name in its header; expected named columns")
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise PredictionInputError(f"{where} repeats column(s) {repeated} in its header; expected unique names")
        yield names
        for cells in reader:
            if not cells:
                continue  # a blank line, as at the end of a file
            if len(cells) != len(names):
                raise PredictionInputError(
                    f"{where} line {reader.line_num} has {len(cells)} cells; expected {len(names)} as in the header"
                )
            yield cells
    except csv.Error as exc:
        raise PredictionInputError(f"{where} is not valid CSV at line {reader.line_num}: {exc}") from exc
