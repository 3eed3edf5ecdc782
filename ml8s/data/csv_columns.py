"""CSV data typed a file at a time, so memory holds the typed columns, not every file's text at once.

Each file is parsed (as text) and each of its columns is reduced at once to a compact chunk: float64 values
when every present cell is a number (most numeric columns), else int32 codes into the file's distinct texts
(categorical and boolean columns, numeric columns with stray text). A column's type is still decided over
*all* rows once every file is read, with exactly the rules and results of typing the concatenated text
(``ml8s.data.dataset``): the chunks keep what those rules need. The one case a chunk cannot answer — a column
that is categorical overall while some file held only numbers, whose text was not kept — re-reads that file
(verified against its fingerprint again) for that column alone.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from ml8s.data.columns import (
    Column,
    FloatArray,
    categorical,
    convert,
    floats,
    number_mask,
    present_text,
    stray_as_missing,
)
from ml8s.data.missing import MISSING_TOKENS, DataWarning, is_mostly_numeric, stray_text_warning
from ml8s.data.slices import code_counts, mapped_codes
from ml8s.errors import DataError

_SAMPLE = 64  # leading cells of a block tried against the number pattern before Arrow's cast of the whole block


@dataclass(frozen=True)
class Numbers:
    """One file's cells of a column, every present one a number: their values (NaN = missing)."""

    values: FloatArray
    present: int


@dataclass(frozen=True)
class Texts:
    """One file's cells of a column, some present one not a number: codes into the file's distinct texts, and how
    many present cells are numbers (counted once, when the chunk is made: typing the column over all files
    needs it again)."""

    column: Column
    present: int
    numbers: int


Chunk = Numbers | Texts
# How a chunk was made, and how the CSV parser is asked for the column's next block (ml8s.data.csv_typed):
# numbers as read, numbers from trimmed text (so text), dictionary codes, or booleans spelled exactly FLAGS.
Route = Literal["numbers", "text", "codes", "flags"]
FLAGS = ("false", "true")  # the spellings the parser reads as booleans for the flags route (any other: text)
Reparse = Callable[[int], pa.ChunkedArray | pa.Array]  # file index -> the column's present text in that file


def chunk_route(cells: pa.ChunkedArray | pa.Array) -> tuple[Chunk, Route]:
    """The compact chunk of one file's cells of one column, and the route that made it.

    The chunk is what typing the cells as text by the module's rules gives, reached by the cheapest of three
    routes: a column of plain numbers is cast by Arrow's number parser straight from the cells as read
    (``numbers``); one whose numbers come with blanks or missing-value tokens, from its present text (``text``);
    anything else is dictionary-coded first, so trimming, the token check and the number pattern run once per
    distinct text rather than once per cell (``codes``). Cells the CSV parser has already typed (float64 from
    its number decoder, dictionary codes: :mod:`ml8s.data.csv_typed`) take the route they were typed for. A
    column whose present texts are all spelled as :data:`FLAGS` takes ``flags``: the parser's boolean decoder
    reads them without a dictionary (a hash of every cell).
    """
    if pa.types.is_floating(cells.type):  # every present cell a number, no NaN (csv_typed.Plan.accepts)
        return Numbers(values=_kept_floats(cells), present=len(cells) - cells.null_count), "numbers"
    if pa.types.is_boolean(cells.type):  # every present cell spelled as FLAGS (the parser refuses any other)
        return _flag_texts(cells), "flags"
    if pa.types.is_dictionary(cells.type):
        return _coded(_dictionary_texts(cells))
    head = pc.drop_null(present_text(cells.slice(0, _SAMPLE)))
    if not len(head) or pc.all(number_mask(head)).as_py():  # a first few present cells the pattern refuses: text
        raw = _cast_numbers(cells)
        if raw is not None:
            return Numbers(values=raw, present=len(cells) - cells.null_count), "numbers"
        values = present_text(cells)
        parsed = _cast_numbers(values)
        if parsed is not None:
            return Numbers(values=parsed, present=len(values) - values.null_count), "text"
    return _coded(_dictionary_texts(cells))


def _coded(texts: Texts) -> tuple[Chunk, Route]:
    """The chunk of dictionary-coded cells, and the route of the column's next blocks: ``flags`` where every
    present text is spelled as :data:`FLAGS`."""
    categories = texts.column.categories  # a column of many texts is not listed: it cannot be flags
    flags = texts.present > 0 and len(categories) <= len(FLAGS) and set(categories.to_pylist()) <= set(FLAGS)
    return _numbers_or_texts(texts), "flags" if flags else "codes"


def _numbers_or_texts(texts: Texts) -> Chunk:
    return Numbers(values=_as_numbers(texts), present=texts.present) if texts.numbers == texts.present else texts


def _flag_texts(cells: pa.ChunkedArray | pa.Array) -> Texts:
    """The :class:`Texts` of booleans the parser read from cells spelled as :data:`FLAGS` (null: missing): what
    :func:`_dictionary_texts` of those cells gives, codes into the spellings that occur, sorted."""
    if isinstance(cells, pa.ChunkedArray):
        cells = cells.combine_chunks()
    present = len(cells) - cells.null_count
    trues = int(pc.sum(cells).as_py() or 0)
    occurring = [text for text, count in zip(FLAGS, (present - trues, trues), strict=True) if count]
    true_code = pa.scalar(len(occurring) - 1, pa.int32())  # "true" is last of the two, or alone
    coded = pc.fill_null(pc.if_else(cells, true_code, pa.scalar(0, pa.int32())), pa.scalar(-1, pa.int32()))
    codes = np.asarray(coded.to_numpy(), dtype=np.int32)
    column = Column(name="", kind="categorical", values=codes, categories=pa.array(occurring, pa.string()))
    return Texts(column=column, present=present, numbers=0)


def _cast_numbers(values: pa.ChunkedArray | pa.Array) -> FloatArray | None:
    """The cells as float64 when Arrow parses every non-null one as a number that is not NaN, else None.

    Arrow's parser accepts nothing the number pattern refuses but spellings of NaN (refused here, as are the
    missing-value tokens ``NaN`` and ``nan``): where it accepts a column, the pattern would have too, and
    trimming would have changed no cell (the parser refuses surrounding blanks). Where it refuses one, the
    caller applies the rules. (tests/test_scale.py holds the parser to the pattern on tricky cells.)
    """
    try:
        parsed = pc.call_function("cast", [values], pc.CastOptions.safe(pa.float64()))
    except pa.ArrowInvalid:
        return None
    if pc.any(pc.is_nan(parsed)).as_py():
        return None
    return _kept_floats(parsed)


def _kept_floats(values: pa.ChunkedArray | pa.Array) -> FloatArray:
    """:func:`floats` of a chunk's cells, the parser's (or the cast's) own buffer where no cell is missing: kept as it
    is (read-only) instead of copied, as Arrow's ``fill_null`` copies it (at 20M rows, 1.1 GB of fresh pages)."""
    if isinstance(values, pa.Array) and values.type == pa.float64() and values.null_count == 0:
        return np.asarray(values.to_numpy(zero_copy_only=True), dtype=np.float64)
    return floats(values)


def _dictionary_texts(cells: pa.ChunkedArray | pa.Array) -> Texts:
    """:class:`Texts` of the cells, the rules applied to each distinct text once: equal to
    ``categorical("", present_text(cells))`` (codes into the sorted distinct present texts, -1 = missing)."""
    if isinstance(cells, pa.ChunkedArray):
        cells = cells.combine_chunks()  # dictionary chunks: over one dictionary, their union
    # The codes' order is immaterial: each distinct text's code is its place among the sorted present texts.
    encoded = cells if pa.types.is_dictionary(cells.type) else pc.dictionary_encode(cells)
    # each distinct raw text's code (several may trim to one text; a blank or a token is missing, -1)
    distinct = categorical("", present_text(encoded.dictionary))
    # The codes are made and kept by Arrow's allocator, as every other chunk's values: numpy arrays made per
    # block among Arrow's freed temporaries left the heap fragmented (+15% peak RSS at 2M rows).
    lut = pa.array(np.append(distinct.values, -1).astype(np.int32))  # the last slot: a null (empty) cell
    coded = pc.take(lut, pc.fill_null(encoded.indices, len(lut) - 1))
    codes = np.asarray(coded.to_numpy(), dtype=np.int32)
    column = Column(name="", kind="categorical", values=codes, categories=distinct.categories)
    # counted once, missing first: how many cells are present, and how many of them are numbers (Arrow's
    # ``equal(coded, -1)`` compared an int64 copy of the codes, made afresh for every block)
    counts = code_counts(codes, len(distinct.categories))
    is_number = _is_number(column)
    numbers = int(counts[1:][is_number].sum())
    return Texts(column=column, present=len(codes) - int(counts[0]), numbers=numbers)


def finish(name: str, chunks: list[Chunk], reparse: Reparse) -> tuple[Column, DataWarning | None]:
    """The column typed over all its files' chunks, as typing their concatenated text would type it."""
    present = sum(c.present for c in chunks)
    texts = [c for c in chunks if isinstance(c, Texts)]
    if not texts and present:
        return Column(name=name, kind="numeric", values=_drained(chunks, _as_numbers)), None
    if present and all(c.present == 0 for c in chunks if isinstance(c, Numbers)) and all(_boolean(t) for t in texts):
        del texts
        return Column(name=name, kind="boolean", values=_drained(chunks, _booleans)), None
    numbers = sum(c.present if isinstance(c, Numbers) else c.numbers for c in chunks)
    if is_mostly_numeric(numbers, present):
        warning = None
        if numbers < present:
            stray = sorted({s for t in texts for s in _stray(t)})
            warning = stray_text_warning(name, stray, numbers, cells=present - numbers)
        del texts
        return Column(name=name, kind="numeric", values=_drained(chunks, _as_numbers)), warning
    parts = [c.column if isinstance(c, Texts) else _texts(i, c, reparse) for i, c in enumerate(chunks)]
    return _merged(name, parts), None


def file_row(row: int, rows: list[int]) -> tuple[int, int]:
    """(file index, row in that file) of a row of all files' rows, ``rows`` being each file's row count."""
    for index, count in enumerate(rows):
        if row < count:
            return index, row
        row -= count
    raise IndexError(row)


def not_finite(path: str, root: str, name: str, row: int, cell: object) -> DataError:
    """The error of a number that overflowed (``1e999``) or an infinity, naming the file, column and row."""
    shown = repr(cell.strip()) if isinstance(cell, str) else str(cell)
    return DataError(
        f"data file {path} (under {root}), column {name!r}, data row {row + 1} (1 = the first row "
        f"after the header): {shown} is not a finite number; expected finite numbers (a missing value is "
        f"empty or one of {list(MISSING_TOKENS)})"
    )


Values = Callable[[Chunk, FloatArray | None], FloatArray]  # a chunk's float per row, made in ``out`` if given


def _drained(chunks: list[Chunk], value: Values) -> FloatArray:
    """The chunks' values as one array, each chunk's made in its place and the chunk released: the column is never
    held twice, and no chunk's values are made apart first."""
    if len(chunks) == 1:
        return value(chunks.pop(), None)
    out = np.empty(sum(_rows(c) for c in chunks), dtype=np.float64)
    start = 0
    while chunks:
        chunk = chunks.pop(0)
        rows = _rows(chunk)
        value(chunk, out[start : start + rows])
        start += rows
    return out


def _rows(chunk: Chunk) -> int:
    return len(chunk.values) if isinstance(chunk, Numbers) else len(chunk.column.values)


def _per_category(chunk: Texts, value: Callable[[pa.Array], pa.Array], out: FloatArray | None) -> FloatArray:
    """A float per row from a float per distinct text (NaN where missing; a code of -1 takes the last entry)."""
    lut: FloatArray = np.append(floats(value(chunk.column.categories)), np.nan)
    codes = np.asarray(chunk.column.values, dtype=np.int32)  # int32 already: no copy
    made: FloatArray = np.empty(len(codes), dtype=np.float64) if out is None else out
    # mode "wrap": -1 is the last entry, as in indexing; the default mode makes a temporary copy of ``out``
    np.take(lut, codes, out=made, mode="wrap")
    return made


def _as_numbers(chunk: Chunk, out: FloatArray | None = None) -> FloatArray:
    if isinstance(chunk, Numbers):
        return chunk.values if out is None else _copied(chunk.values, out)
    return _per_category(chunk, lambda texts: convert(stray_as_missing(texts), pa.float64()), out)


def _copied(values: FloatArray, out: FloatArray) -> FloatArray:
    np.copyto(out, values)
    return out


def _boolean(chunk: Texts) -> bool:
    return bool(pc.all(pc.is_in(pc.utf8_lower(chunk.column.categories), pa.array(["true", "false"]))).as_py())


def _booleans(chunk: Chunk, out: FloatArray | None = None) -> FloatArray:
    if isinstance(chunk, Numbers):  # every cell missing: NaN
        return chunk.values if out is None else _copied(chunk.values, out)
    return _per_category(chunk, lambda texts: convert(pc.equal(pc.utf8_lower(texts), "true"), pa.float64()), out)


def _is_number(column: Column) -> npt.NDArray[np.bool_]:
    """Which of a chunk's distinct texts are numbers."""
    return np.asarray(number_mask(column.categories).to_numpy(zero_copy_only=False), dtype=bool)


def _stray(chunk: Texts) -> list[str]:
    """The distinct texts of this file's cells that are not numbers."""
    occurs = code_counts(chunk.column.values, len(chunk.column.categories))[1:] > 0  # [0]: missing cells
    names = chunk.column.category_list()
    return [names[i] for i in np.flatnonzero(~_is_number(chunk.column) & occurs)]


def _texts(index: int, chunk: Numbers, reparse: Reparse) -> Column:
    if chunk.present == 0:
        return Column(name="", kind="categorical", values=np.full(len(chunk.values), -1, dtype=np.int32))
    return categorical("", present_text(reparse(index)))


def _merged(name: str, parts: list[Column]) -> Column:
    """One categorical column of the files' columns: codes into the sorted union of their texts."""
    union = pc.unique(pa.chunked_array([p.categories for p in parts], type=pa.string()))
    categories = pc.take(union, pc.array_sort_indices(union))
    values = np.empty(sum(len(part.values) for part in parts), dtype=np.int32)
    start = 0
    for part in parts:  # each part's codes made in their place: not made apart, then concatenated
        lut = np.append(np.asarray(pc.index_in(part.categories, value_set=categories).to_numpy(), dtype=np.int32), -1)
        mapped_codes(lut, part.values, out=values[start : start + len(part.values)])
        start += len(part.values)
    return Column(name=name, kind="categorical", values=values, categories=categories)
