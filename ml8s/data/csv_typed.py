"""CSV columns typed by Arrow's parser as it reads them, where the column's earlier blocks say how.

Typing a block parsed as text (:func:`ml8s.data.csv_columns.chunk_route`) first makes a string of every cell, then
reads numbers from those strings or dictionary-codes them: at 20M rows that is a copy of every file's text and a
second pass over it. Arrow's CSV parser can type a column itself: numbers by its number decoder, text straight
into dictionary codes. A :class:`Plan` asks it to, for each column, by the route the column's last block parsed
as text took (a load's first pieces are parsed as text), and only where the result is the chunk the text would
have given:

- ``numbers`` (every present cell a number as read): parsed as float64. The decoder accepts a number with blanks
  or tabs around it, which the text rules trim, and nothing the number pattern refuses but spellings of NaN
  (a piece holding a NaN is parsed again as text: the rules read ``nan`` as missing and ``-nan`` as stray text).
  A cell it refuses (a missing-value token, a blank, stray text) makes the piece be parsed again as text, and the
  column's route learned from that parse.
- ``codes`` (text, or numbers among other text): parsed as dictionary codes; the rules are then applied once per
  distinct text, as for a column coded after the text parse, and the codes' order is immaterial (each text's
  code is its place among the sorted texts).
- ``text`` (numbers among tokens or blanks): parsed as text, as before.
- ``flags`` (every present text spelled ``true`` or ``false``, exactly): parsed as booleans, which the parser
  reads from those two spellings alone (a piece holding any other, ``True`` or `` true`` included, is parsed
  again as text); the chunk is the dictionary route's, codes into the spellings that occur. A boolean parse
  costs a fifth less than a dictionary's (measured: 0.9 of 4.9 CPU s per 4M-row demo file).

A piece the parser refuses for any other reason (a bad record, bytes that are not UTF-8) is parsed again as text,
whose error names the row. So a Plan changes where the work is done, never a chunk or an error
(tests/test_csv_typed.py compares every chunk with the text parse's).
"""

from __future__ import annotations

import threading

import pyarrow as pa
import pyarrow.compute as pc

from ml8s.data.csv_columns import Route

__all__ = ["CODES", "Plan"]

CODES = pa.dictionary(pa.int32(), pa.string())
_TYPES: dict[Route, pa.DataType] = {"numbers": pa.float64(), "codes": CODES, "flags": pa.bool_()}


class Plan:
    """How the parser is asked for each column of the pieces to come, learned from the chunks made so far; one
    per load (its files have the same columns), shared by the parsing and the typing threads."""

    def __init__(self) -> None:
        self._routes: dict[str, Route] = {}
        self._lock = threading.Lock()

    def wanted(self, names: list[str]) -> dict[str, pa.DataType]:
        """The types to ask for: a column whose route is not known yet, or ``text``, is parsed as text."""
        with self._lock:
            return {name: _TYPES[route] for name in names if (route := self._routes.get(name)) in _TYPES}

    def accepts(self, batch: pa.RecordBatch) -> bool:
        """A piece is used as parsed unless a column parsed as numbers holds a NaN (the rules' words for it differ
        by spelling: parsed again as text)."""
        return not any(
            pc.any(pc.is_nan(column)).as_py() for column in batch.columns if pa.types.is_floating(column.type)
        )

    def learn(self, name: str, route: Route) -> None:
        """The route ``name``'s latest chunk took: how its next pieces are asked for."""
        with self._lock:
            self._routes[name] = route
