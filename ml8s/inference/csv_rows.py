"""Raw rows from CSV text, read as the training data's CSV files are: a header line, then text cells.

Every cell stays text (typing is the transform's job, with the training rules); an empty cell is a missing
value. A header with a blank or repeated name, a row with more or fewer cells than the header, or bytes
that are not UTF-8 are refused.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass

from ml8s.errors import PredictionInputError


@dataclass(frozen=True)
class CsvRows:
    """A CSV file's header (``columns``, in file order, spelled exactly as written: the training data's names
    are never stripped, so neither are these) and its rows as ``{column: cell text}``.

    The header is kept because a file may have no rows: its columns are still checked against the model's.
    """

    columns: tuple[str, ...]
    rows: list[dict[str, object]]


def read_csv_rows(data: bytes, where: str) -> CsvRows:
    """The header and rows of a CSV file; ``where`` names the file in errors.

    Raises:
        PredictionInputError: the bytes are not a well-formed UTF-8 CSV file with a header.
    """
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
        rows: list[dict[str, object]] = []
        for cells in reader:
            if not cells:
                continue  # a blank line, as at the end of a file
            if len(cells) != len(names):
                raise PredictionInputError(
                    f"{where} line {reader.line_num} has {len(cells)} cells; expected {len(names)} as in the header"
                )
            rows.append(dict(zip(names, cells, strict=True)))
    except csv.Error as exc:
        raise PredictionInputError(f"{where} is not valid CSV at line {reader.line_num}: {exc}") from exc
    return CsvRows(columns=tuple(names), rows=rows)
