"""Typed columns: numbers as float64 (NaN = missing), categories as dictionary codes, never a Python object per cell.

A categorical column holds int32 codes into its sorted, distinct categories (``-1`` = missing): a 20-million-row
column of a few categories costs 80 MB and encodes with array operations. Sorting the categories by code point
makes the codes of a given set of values the same however the rows were split into files or chunks.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import BaseModel, ConfigDict, PrivateAttr

from ml8s.data import slices
from ml8s.data.missing import MISSING_TOKENS
from ml8s.data.slices import CodeArray as CodeArray  # re-exported: the column types live with the slices
from ml8s.data.slices import FloatArray as FloatArray
from ml8s.data.slices import code_counts
from ml8s.errors import DataError

ObjectArray = npt.NDArray[np.object_]

NUMBER = r"^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?$"
INFINITY = r"^[+-]?(inf|infinity)$"  # spelled infinities are numbers (found and refused, not one-hot encoded)
_NO_CATEGORIES = pa.array([], pa.string())


class Column(BaseModel):
    """One typed column: ``numeric``/``boolean`` as float64 (NaN = missing), ``categorical`` as int32 codes into
    ``categories`` (sorted, distinct; ``-1`` = missing)."""

    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True)

    name: str
    kind: str
    values: FloatArray | CodeArray
    categories: pa.Array = _NO_CATEGORIES
    _counts: npt.NDArray[np.int64] | None = PrivateAttr(default=None)

    def missing(self) -> npt.NDArray[np.bool_]:
        if self.kind == "categorical":
            return np.asarray(self.values < 0)
        return np.isnan(self.values)  # no float64 copy of the column: 160 MiB at 20M rows

    def take(self, rows: npt.NDArray[np.intp] | npt.NDArray[np.int64] | npt.NDArray[np.bool_]) -> Column:
        """The column restricted to ``rows`` (indices, or a mask of every row; categories that no longer occur stay
        listed, with a count of 0)."""
        return Column(name=self.name, kind=self.kind, values=self.values[rows], categories=self.categories)

    def compact(self, rows: npt.NDArray[np.intp] | npt.NDArray[np.int64]) -> Column:
        """:meth:`take` of ascending ``rows`` that moves them to the front of this column's own array, leaving this
        column invalid: no second copy of the column. A read-only array is copied instead.

        Moved a slice of ``slices.CODE_SLICE`` rows at a time: ascending, ``rows[i] >= i``, so a slice reads no
        place an earlier slice wrote. A slice's values are gathered into one array (a slice's, not a column's: 160
        MiB at 20M rows) before they are written, the same array for every slice (one per slice was 20 arrays of
        fresh, page-faulted memory a column).
        """
        if not self.values.flags.writeable:
            return self.take(rows)
        moved = np.empty(min(len(rows), slices.CODE_SLICE), dtype=self.values.dtype)  # made once, not per slice
        for start in range(0, len(rows), slices.CODE_SLICE):
            chosen = rows[start : start + slices.CODE_SLICE]
            np.take(self.values, chosen, out=moved[: len(chosen)], mode="wrap")  # the default would copy ``out``
            self.values[start : start + len(chosen)] = moved[: len(chosen)]
        self._counts = None  # this column's values are no longer its rows
        return self.part(0, len(rows))

    def all_missing(self) -> bool:
        """Whether every value is missing, checked a slice of ``slices.CODE_SLICE`` rows at a time (no mask of
        every row: 20 MiB of fresh memory per column at 20M rows), stopping at the first present one."""
        for start in range(0, len(self.values), slices.CODE_SLICE):
            if not self.part(start, start + slices.CODE_SLICE).missing().all():
                return False
        return True

    def part(self, start: int, stop: int) -> Column:
        """Rows ``start`` to ``stop`` (a view, no copy)."""
        return Column(name=self.name, kind=self.kind, values=self.values[start:stop], categories=self.categories)

    def code_counts(self) -> npt.NDArray[np.int64]:
        """:func:`code_counts` of the column, counted once: preparing and fitting ask a categorical column for its
        counts five times, a pass over every row each (0.06 s at 20M rows). The values are never changed in place
        once counted (:meth:`compact` leaves this column invalid and returns another)."""
        if self._counts is None:
            self._counts = code_counts(self.values, len(self.categories))
        return self._counts

    def counts(self) -> dict[str | None, int]:
        """How often each value occurs (``None``: missing), values that occur only; categorical columns only."""
        counts = self.code_counts()
        names: list[str | None] = [None, *self.category_list()]
        return {names[i]: int(counts[i]) for i in np.flatnonzero(counts)}

    def category_list(self) -> list[str]:
        return [str(c) for c in self.categories.to_pylist()]

    def text(self) -> ObjectArray:
        """A categorical column's cells as text, ``None`` where missing (for small inputs: one object per cell)."""
        table = np.array([*self.category_list(), None], dtype=object)
        return np.asarray(table[np.asarray(self.values, dtype=np.int64)], dtype=object)


def categorical(name: str, values: pa.Array | pa.ChunkedArray) -> Column:
    """A categorical column of text cells (null = missing): codes into the sorted distinct values."""
    present = pc.drop_null(pc.unique(values))
    categories = pc.take(present, pc.array_sort_indices(present))
    if isinstance(categories, pa.ChunkedArray):
        categories = categories.combine_chunks()
    codes = pc.fill_null(pc.index_in(values, value_set=categories), -1)
    return Column(name=name, kind="categorical", values=_ints(codes), categories=categories)


def text_column(name: str, kind: str, cells: pa.Array) -> Column:
    """Type text cells (null = missing) as a column of a known ``kind``, as :func:`load_dataset` types CSV text
    (a number that overflows float64 is refused, as the loader refuses it).

    Surrounding whitespace is ignored and a blank cell is missing; a ``boolean`` cell reads ``true`` or
    ``false`` in any case, a ``numeric`` cell a decimal number; ``categorical`` keeps the trimmed text. A
    ``numeric`` cell of other text is missing, as the loader reads a numeric column's stray text (the caller
    reports it: :func:`stray_cells`).

    Raises:
        DataError: a present cell is not a value of ``kind`` (the message names the column and the row, 1 = the
            first cell): a boolean cell that is not one, or a number that is not finite.
    """
    if kind not in ("boolean", "numeric", "categorical"):
        raise DataError(f"column {name!r} has kind {kind!r}; expected boolean, numeric or categorical")
    plain = _plain_numbers(cells) if kind == "numeric" else None
    if plain is not None:
        return Column(name=name, kind="numeric", values=plain)
    if kind != "numeric":
        return _by_distinct_text(name, kind, cells)
    values = stray_as_missing(present_text(cells))
    column = typed_text(name, kind, values)
    infinite = np.flatnonzero(np.isinf(column.values))  # booleans are 0/1, codes finite: numbers alone can be
    if len(infinite):  # as the loader refuses them: 1e999 overflows to infinity, and NaN probabilities follow
        row = int(infinite[0])
        raise DataError(
            f"column {name!r} has {values[row].as_py()!r} in row {row + 1} (of {len(values)}), which is not a finite "
            "number; expected a decimal number within float64's range or an empty cell"
        )
    return column


def stray_as_missing(values: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """Present text with every cell that is no number (:func:`number_mask`) made missing: the training rule for
    the stray text of a column typed numeric (:mod:`ml8s.data.missing`)."""
    return pc.if_else(number_mask(values), values, pa.scalar(None, pa.string()))


def stray_cells(cells: pa.Array, column: Column) -> pa.Array:
    """The present text of the ``cells`` a numeric ``column`` (:func:`text_column` of them) holds as missing:
    its stray text, a cell per row that has one."""
    text = present_text(cells)
    if isinstance(text, pa.ChunkedArray):
        text = text.combine_chunks()
    return pc.filter(text, pc.and_(pc.is_valid(text), pa.array(column.missing())))


def number_mask(values: pa.ChunkedArray | pa.Array) -> pa.ChunkedArray | pa.Array:
    """True where the (present) text is a decimal number or a spelled infinity."""
    spelled = pc.match_substring_regex(values, INFINITY, ignore_case=True)
    return pc.fill_null(pc.or_(pc.match_substring_regex(values, NUMBER), spelled), False)


def _by_distinct_text(name: str, kind: str, cells: pa.Array) -> Column:
    """A categorical or boolean column of text cells typed the way :func:`text_column` types every cell, but with
    the rules applied once per distinct text (trimming, the tokens, the kind's check): the cells are dictionary
    coded first, and a code's result is every row's with that code. A boolean cell that is not one names the
    first such row, as the per-cell check does."""
    if isinstance(cells, pa.ChunkedArray):
        cells = cells.combine_chunks()
    encoded = pc.dictionary_encode(cells)
    indices = np.asarray(pc.fill_null(encoded.indices, len(encoded.dictionary)).to_numpy(), dtype=np.int64)
    distinct = present_text(encoded.dictionary)  # a null (missing) cell takes the slot after the last code
    if kind == "categorical":
        typed = categorical(name, distinct)
        lut = np.append(typed.values, -1).astype(np.int32)
        return Column(name=name, kind="categorical", values=lut[indices], categories=typed.categories)
    lower = pc.utf8_lower(distinct)
    valid = pc.fill_null(pc.or_kleene(pc.is_null(distinct), pc.is_in(lower, pa.array(["true", "false"]))), False)
    bad = np.append(~np.asarray(valid.to_numpy(zero_copy_only=False), dtype=bool), False)
    if bad.any():
        row = int(np.flatnonzero(bad[indices])[0])
        raise DataError(
            f"column {name!r} has {distinct[int(indices[row])].as_py()!r} in row {row + 1} (of {len(cells)}), "
            "which is not boolean; expected true or false or an empty cell"
        )
    lut = np.append(floats(convert(pc.equal(lower, "true"), pa.float64())), np.nan)
    return Column(name=name, kind="boolean", values=np.asarray(lut[indices], dtype=np.float64))


def _plain_numbers(cells: pa.Array) -> FloatArray | None:
    """The values of a numeric column whose every cell is empty, null or a finite number Arrow's parser reads as
    it is (no blank around it, no missing-value token, no spelling of NaN or infinity), else None. Arrow's parser
    accepts nothing else the number pattern refuses (tests/test_scale.py), and such a cell is its own present
    text: so these are the values :func:`text_column` types the slow way, in one cast instead of a trim, a token
    check, a pattern match and the cast."""
    text = pc.if_else(pc.equal(cells, ""), pa.scalar(None, pa.string()), cells)
    try:
        parsed = convert(text, pa.float64())
    except pa.ArrowInvalid:
        return None
    values = floats(parsed)
    present = np.asarray(pc.is_valid(parsed).to_numpy(zero_copy_only=False), dtype=bool)
    if not np.isfinite(values[present]).all():  # NaN or an infinity spelled, or overflowed: the slow way's words
        return None
    return values


def present_text(array: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """Trimmed text, null where the cell is null or one of the missing-value tokens (blank included)."""
    text = pc.utf8_trim_whitespace(array)
    present = pc.invert(pc.fill_null(pc.is_in(text, value_set=pa.array(MISSING_TOKENS, pa.string())), True))
    return pc.if_else(present, text, pa.scalar(None, pa.string()))


def typed_text(name: str, kind: str, values: pa.Array | pa.ChunkedArray) -> Column:
    """Present text (null = missing) already known to hold values of ``kind``, as a column of that kind."""
    if kind == "boolean":
        lower = pc.utf8_lower(values)
        return Column(name=name, kind="boolean", values=floats(convert(pc.equal(lower, "true"), pa.float64())))
    if kind == "numeric":
        return Column(name=name, kind="numeric", values=floats(convert(values, pa.float64())))
    return categorical(name, values)


def floats(array: pa.ChunkedArray | pa.Array) -> FloatArray:
    return np.asarray(pc.fill_null(array, float("nan")).to_numpy(), dtype=np.float64)


def _ints(array: pa.ChunkedArray | pa.Array) -> CodeArray:
    return np.asarray(array.to_numpy(), dtype=np.int32)


def is_text(kind: pa.DataType) -> bool:
    """Whether an Arrow type holds text (any of its string layouts)."""
    return bool(pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_string_view(kind))


def decoded(array: pa.Array) -> pa.Array:
    """A dictionary-coded array as its plain values (a Parquet file's categories); any other array as it is."""
    if pa.types.is_dictionary(array.type):
        plain: pa.Array = convert(array, array.type.value_type)
        return plain
    return array


def convert(array: pa.Array | pa.ChunkedArray, to: pa.DataType) -> pa.Array | pa.ChunkedArray:
    """Arrow's safe type conversion (overflow, truncation or unparsable text raise ArrowInvalid).

    An integer beyond 2^53 becomes the nearest double, as the same number written as CSV text does (a Parquet
    uint64 ID column was an ArrowInvalid from deep inside the typing, an INTERNAL_ERROR)."""
    if pa.types.is_integer(array.type) and pa.types.is_floating(to):
        return pc.call_function("cast", [array], pc.CastOptions.unsafe(to))
    return pc.call_function("cast", [array], pc.CastOptions.safe(to))
