"""A lineage's generation files read column by column: the typed input columns of the rows a warm start uses
(its drift report, its encoded generations), in Arrow, with no Python object per row.

The results and errors are those of reading the files' rows as mappings (``to_pylist``), keeping the rows the
caller keeps and typing them with ``RawTransform.typed_columns``: a column's cells are read, then typed, then
the next column's, so the error raised is the one the rows would raise first; a row's place in an error counts
the kept rows of every file before it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ml8s.data.columns import decoded, is_text
from ml8s.data.dataset import Column, parse_file
from ml8s.data.fingerprint import Fingerprint, fingerprint_entries
from ml8s.data.sources import read_verified
from ml8s.inference import RawTransform
from ml8s.inference.cells import read_cells

Keep = Callable[[pa.Table], pa.Array]  # a file's table -> which of its rows are read (a boolean per row)


def typed_columns(
    fingerprint: Fingerprint, tokens: set[str], transform: RawTransform, keep: Keep
) -> tuple[dict[str, Column], int]:
    """The typed input columns of the kept rows of the files ``tokens`` names (each checked against
    ``fingerprint`` as it is read), and how many rows that is.

    Raises:
        PredictionInputError: a kept row lacks an input column, or holds a value its column cannot (module doc).
    """
    tables = (table.filter(keep(table)) for table in file_tables(fingerprint, tokens))
    read = read_cells(tables, [column.name for column in transform.inputs])
    return transform.typed_cells(read.cells, read.failed), read.rows


def file_tables(fingerprint: Fingerprint, tokens: set[str]) -> Iterator[pa.Table]:
    """Each file ``tokens`` names as a table (checked against ``fingerprint`` as it is read), one at a time."""
    entries = tuple(e for e in fingerprint.entries if e.token in tokens)
    sub = Fingerprint(data_root=fingerprint.data_root, fingerprint=fingerprint_entries(entries), entries=entries)
    for entry, data in read_verified(sub):
        yield parse_file(entry, data, fingerprint.data_root)


def no_rows(table: pa.Table) -> pa.Array:
    """A row mask that keeps none of ``table``'s rows."""
    return pa.array(np.zeros(table.num_rows, dtype=bool))


def has_label(target: str) -> Keep:
    """Rows whose ``target`` value is neither missing nor empty text."""

    def keep(table: pa.Table) -> pa.Array:
        if target not in table.column_names:
            return no_rows(table)
        values = decoded(table.column(target).combine_chunks())
        present = pc.is_valid(values)
        if is_text(values.type):
            present = pc.and_(present, pc.fill_null(pc.not_equal(values, ""), False))
        return present

    return keep
