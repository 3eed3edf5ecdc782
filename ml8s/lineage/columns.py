"""A lineage's generation files read column by column: the typed input columns of the rows a warm start uses
(its drift report, its encoded generations), in Arrow, with no Python object per row.

The results and errors are those of reading the files' rows as mappings (``to_pylist``), keeping the rows the
caller keeps and typing them with ``RawTransform.typed_columns``: a column's cells are read, then typed, then
the next column's, so the error raised is the one the rows would raise first; a row's place in an error counts
the kept rows of every file before it.
"""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa
import pyarrow.compute as pc

from ml8s.data.dataset import Column, parse_file
from ml8s.data.fingerprint import Fingerprint, fingerprint_entries
from ml8s.data.sources import read_verified
from ml8s.errors import PredictionInputError
from ml8s.inference import RawTransform
from ml8s.inference.cells import absent_column, arrow_cells

Keep = Callable[[pa.Table], pa.Array]  # a file's table -> which of its rows are read (a boolean per row)


def typed_columns(
    fingerprint: Fingerprint, tokens: set[str], transform: RawTransform, keep: Keep
) -> tuple[dict[str, Column], int]:
    """The typed input columns of the kept rows of the files ``tokens`` names (each checked against
    ``fingerprint`` as it is read), and how many rows that is.

    Raises:
        PredictionInputError: a kept row lacks an input column, or holds a value its column cannot (module doc).
    """
    entries = tuple(e for e in fingerprint.entries if e.token in tokens)
    sub = Fingerprint(data_root=fingerprint.data_root, fingerprint=fingerprint_entries(entries), entries=entries)
    pieces: dict[str, list[pa.Array]] = {column.name: [] for column in transform.inputs}
    failed: dict[str, PredictionInputError] = {}  # column -> the error of its first row that cannot be read
    rows = 0
    for entry, data in read_verified(sub):
        table = parse_file(entry, data, fingerprint.data_root)
        table = table.filter(keep(table))
        for column in transform.inputs:
            if column.name in failed or not table.num_rows:
                continue
            if column.name not in table.column_names:
                failed[column.name] = absent_column(column.name, rows)
                continue
            try:
                pieces[column.name].append(arrow_cells(table.column(column.name), column.name, rows))
            except PredictionInputError as exc:
                failed[column.name] = exc
        rows += table.num_rows
    columns: dict[str, Column] = {}
    for column in transform.inputs:
        if column.name in failed:
            raise failed[column.name]
        parts = pieces.pop(column.name)
        columns[column.name] = transform.typed_column(
            column, pa.concat_arrays(parts) if parts else pa.array([], type=pa.string())
        )
    return columns, rows


def has_label(target: str) -> Keep:
    """Rows whose ``target`` value is neither missing nor empty text."""

    def keep(table: pa.Table) -> pa.Array:
        if target not in table.column_names:
            return pa.array([False] * table.num_rows, type=pa.bool_())
        values = table.column(target).combine_chunks()
        if pa.types.is_dictionary(values.type):
            values = values.cast(values.type.value_type)
        present = pc.is_valid(values)
        if pa.types.is_string(values.type) or pa.types.is_large_string(values.type):
            present = pc.and_(present, pc.fill_null(pc.not_equal(values, ""), False))
        return present

    return keep
