"""Which data columns TARGET_COLUMN and EXCLUDE_COLUMNS name, and which names ml8s keeps for itself.

SPEC §2 normalizes every value before it is hashed: trimmed, and a value holding a comma becomes the
sorted, deduplicated list of its trimmed parts. The canonical config stays exactly that; this module
decides which *columns* such a value names, with the same rules applied to the column's header:

- An exact header match wins (``TARGET_COLUMN=Label`` names ``Label``).
- Otherwise a header matches when it normalizes to the same value: ``TARGET_COLUMN=Label`` names a
  header ``" Label "``, and ``TARGET_COLUMN=lat,lng`` (canonically ``["lat", "lng"]``) names a header
  ``"lat, lng"``. Two headers matching one value is a DataError naming both.
- EXCLUDE_COLUMNS is a list, so a column whose header holds commas is excluded by listing every
  comma-separated part of it (``EXCLUDE_COLUMNS=lat,lng`` excludes ``"lat,lng"``, and also columns
  named ``lat`` or ``lng`` if there are any). A part listed alone names no column.

A categorical feature column may not hold the text of the encoder's own buckets, :data:`MISSING` and
:data:`OTHER` (:func:`reserved_values`): such a category shared its bucket's one-hot feature.

The feature matrix holds two columns of its own, :data:`TARGET` and :data:`SPLIT`
(:data:`RESERVED_COLUMNS`): a feature column may not be named like them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow.compute as pc

from ml8s.data.csv_columns import file_row
from ml8s.data.dataset import Column
from ml8s.data.slices import CODE_SLICE
from ml8s.errors import DataError
from ml8s.inference.rules import BUCKETS, MISSING, OTHER

TARGET = "__target__"
SPLIT = "__split__"
RESERVED_COLUMNS = frozenset({TARGET, SPLIT})
_COMMA_HINT = "a column whose name holds commas is excluded by listing every comma-separated part of it"


def name_key(name: str) -> tuple[str, ...]:
    """A header or a value as SPEC §2 normalizes it: its trimmed, non-empty comma parts, sorted, unique."""
    return tuple(sorted({part.strip() for part in name.split(",") if part.strip()}))


def resolve_target(names: Sequence[str], wanted: str) -> str:
    """The column TARGET_COLUMN names (``wanted``: its canonical value, a list joined by commas)."""
    if wanted in names:
        return wanted
    matches = sorted(name for name in names if name_key(name) == name_key(wanted))
    if not matches:
        raise DataError(f"TARGET_COLUMN={wanted!r} is not a column of the data; expected one of {sorted(names)}")
    if len(matches) > 1:
        raise DataError(
            f"TARGET_COLUMN={wanted!r} is ambiguous: columns {matches} all match it once trimmed and split at "
            "commas; expected one column, rename the others"
        )
    return matches[0]


def resolve_excluded(names: Sequence[str], items: Iterable[str]) -> tuple[str, ...]:
    """The columns EXCLUDE_COLUMNS names (``items``: its canonical items), sorted."""
    wanted = set(items)
    chosen: set[str] = set()
    used: set[str] = set()
    for item in sorted(wanted):
        matches = [item] if item in names else sorted(n for n in names if "," not in n and n.strip() == item)
        if len(matches) > 1:
            raise DataError(
                f"EXCLUDE_COLUMNS item {item!r} is ambiguous: columns {matches} all match it once trimmed; "
                "expected one column, rename the others"
            )
        chosen.update(matches)
        used.update([item] if matches else [])
    for name in names:
        parts = set(name_key(name))
        if "," in name and parts <= wanted:
            chosen.add(name)
            used |= parts
    unknown = sorted(wanted - used)
    if unknown:
        raise DataError(
            f"EXCLUDE_COLUMNS names {unknown}, which are not columns of the data; expected {sorted(names)} "
            f"({_COMMA_HINT})"
        )
    return tuple(sorted(chosen))


def check_feature_names(generated: Iterable[tuple[str, str, str]]) -> None:
    """Fail on a feature column named like a matrix column, or on one feature name made twice.

    Args:
        generated: ``(feature name, source column, how it is made)`` for every feature, in column order.
    """
    made: dict[str, tuple[str, str]] = {}
    for name, source, how in generated:
        if name in RESERVED_COLUMNS:
            raise DataError(
                f"column {source!r} of the data makes feature {name!r}, a name reserved for the feature matrix "
                f"({TARGET}: class index, {SPLIT}: train/test split); expected other names: rename the column or add "
                "it to EXCLUDE_COLUMNS"
            )
        if name in made:
            first, first_how = made[name]
            raise DataError(
                f"feature name {name!r} would be made twice: from column {first!r} ({first_how}) and from column "
                f"{source!r} ({how}); expected unique feature names: rename one column or add it to EXCLUDE_COLUMNS"
            )
        made[name] = (source, how)


@dataclass(frozen=True)
class ReservedValue:
    """A categorical column's category that is the text of a bucket of the encoder, and its first row."""

    column: str
    value: str
    code: int
    file: str
    row: int  # in ``file``, 0 = the first row after the header

    def error(self) -> DataError:
        return DataError(
            f"data file {self.file}, column {self.column!r}, data row {self.row + 1} (1 = the first row after the "
            f"header): the value {self.value!r} is the name of {BUCKETS[self.value]}, and would share its one-hot "
            f"feature ({self.column}={self.value}) so that neither the model nor the feature schema could tell them "
            f"apart; expected categories other than {MISSING!r} and {OTHER!r} (rename the value in the data, leave "
            "the cell empty if it means a missing value, or list the column in EXCLUDE_COLUMNS)"
        )


def reserved_values(columns: Iterable[Column], rows_per_file: Mapping[str, int]) -> dict[str, list[ReservedValue]]:
    """Each categorical column of ``columns`` (every row of the data, files in the order of ``rows_per_file``) that
    holds :data:`MISSING` or :data:`OTHER` as text, with the first row of each. The categories are searched by
    Arrow (an identifier column lists millions); the rows only where they hold such a value."""
    found: dict[str, list[ReservedValue]] = {}
    for column in columns:
        if column.kind != "categorical":
            continue
        for value in sorted(BUCKETS):
            code = int(pc.index(column.categories, value).as_py())
            row = _first_row(column, code) if code >= 0 else None
            if row is not None:
                index, in_file = file_row(row, list(rows_per_file.values()))
                at = ReservedValue(column.name, value, code, list(rows_per_file)[index], in_file)
                found.setdefault(column.name, []).append(at)
    return found


def refuse_reserved(found: Mapping[str, list[ReservedValue]], kept: Column) -> None:
    """Refuse a feature column whose kept rows (``kept``: with the column's categories) still hold a value
    :func:`reserved_values` found; the rows SAMPLE_ROWS left out make no feature."""
    for at in found.get(kept.name, []):
        if kept.code_counts()[at.code + 1]:
            raise at.error()


def _first_row(column: Column, code: int) -> int | None:
    for start in range(0, len(column.values), CODE_SLICE):
        hits = np.flatnonzero(column.values[start : start + CODE_SLICE] == code)
        if len(hits):
            return start + int(hits[0])
    return None
