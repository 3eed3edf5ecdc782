"""A CSV file without a quote character, cut into pieces at newlines and each piece parsed by Arrow on every core.

With no quote, every newline ends a record, so the file is cut at the first newline past each block's size and
each piece read on its own (the first with the header, the rest under its names). A quoted value may hold a
newline; a file with a quote is read by the streaming reader (:mod:`ml8s.data.csv_text`), whose parser runs on
one core. A caller may ask for a piece's columns typed by the parser (:class:`PieceTypes`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Protocol

import pyarrow as pa
import pyarrow.csv as pacsv

from ml8s.data.csv_columns import FLAGS
from ml8s.data.csv_lines import FileBytes
from ml8s.errors import DataError

# csv_text's options but for newlines in values: a file without a quote has none, and Arrow cuts its blocks faster
_NO_QUOTES = pacsv.ParseOptions(newlines_in_values=False)


class PieceTypes(Protocol):
    """What a caller asks of the parser for each piece: Arrow's CSV parser can type a column itself (numbers,
    dictionary codes) without first making a string of every cell. A piece it cannot type as asked is parsed as
    text, as every other file is, so what the text parse refuses is refused with its words."""

    def wanted(self, names: list[str]) -> dict[str, pa.DataType]:
        """The types to ask of the parser by column name; a column not named is parsed as text."""
        ...

    def accepts(self, batch: pa.RecordBatch) -> bool:
        """Whether the piece, parsed as asked, is used (else it is parsed again, as text)."""
        ...


@dataclass(frozen=True)
class Blocks:
    """Bytes of text a piece holds at least (``block``), and the block Arrow's parser cuts a piece into for its
    threads (``piece``); a row longer than ``piece`` is read with blocks of ``block``."""

    block: int
    piece: int


def segments(
    data: FileBytes,
    options: pacsv.ConvertOptions,
    header: list[str],
    types: PieceTypes | None,
    blocks: Blocks,
    unparsed: Callable[[pa.ArrowException], DataError],
) -> tuple[list[str], Iterator[pa.RecordBatch]]:
    """The file's column names and its pieces as batches (``options``: the text parse's, ``types``: what to ask
    for instead where the parser can); ``unparsed`` makes the error of text that does not parse."""
    view = pa.py_buffer(data)
    end = _cut(data, 0, blocks.block)

    def piece(start: int, stop: int, names: list[str] | None) -> pa.RecordBatch:
        where = (start, stop)
        typed = _typed_piece(view, where, options, header, names, types, blocks)
        return typed if typed is not None else _piece(view, where, options, names, blocks)

    try:
        first = piece(0, end, None)
    except pa.ArrowException as exc:
        raise unparsed(exc) from exc
    names = first.schema.names

    def rest() -> Iterator[pa.RecordBatch]:
        if first.num_rows:  # the header alone when its line is longer than a block
            yield first
        start = end
        while start < len(data):
            stop = _cut(data, start, blocks.block)
            try:
                parsed = piece(start, stop, names)
            except pa.ArrowException as exc:
                raise unparsed(exc) from exc
            if parsed.num_rows:  # a piece of blank lines (the file's tail) holds no record
                yield parsed
            start = stop

    return names, rest()


def _typed_piece(
    view: pa.Buffer,
    where: tuple[int, int],
    options: pacsv.ConvertOptions,
    header: list[str],
    names: list[str] | None,
    types: PieceTypes | None,
    blocks: Blocks,
) -> pa.RecordBatch | None:
    """A piece parsed with its columns typed as ``types`` asks, or None where it is to be parsed as text: nothing
    asked, the parser refused (a cell that is not a number, a bad record, a row longer than a parser block: the
    text parse then reads it or says which) or the caller refused the result."""
    if types is None:
        return None
    wanted = types.wanted(header)
    if not wanted:
        return None
    typed = pacsv.ConvertOptions(
        column_types={name: wanted.get(name, pa.string()) for name in header},
        strings_can_be_null=options.strings_can_be_null,
        null_values=options.null_values,
        false_values=[FLAGS[0]],  # a column asked as booleans: these spellings exactly, any other refused
        true_values=[FLAGS[1]],
    )
    try:
        batch = _piece(view, where, typed, names, blocks, retry=False)
    except pa.ArrowInvalid:
        return None
    return batch if types.accepts(batch) else None


def _cut(data: FileBytes, start: int, block: int) -> int:
    found = data.find(b"\n", start + block)
    return len(data) if found < 0 else found + 1


def _piece(
    view: pa.Buffer,
    where: tuple[int, int],
    options: pacsv.ConvertOptions,
    names: list[str] | None,
    blocks: Blocks,
    *,
    retry: bool = True,
) -> pa.RecordBatch:
    start, stop = where

    def read(block: int) -> pa.Table:
        return pacsv.read_csv(
            pa.BufferReader(view.slice(start, stop - start)),
            read_options=pacsv.ReadOptions(block_size=block, column_names=names or []),
            parse_options=_NO_QUOTES,
            convert_options=options,
        )

    try:
        table = read(blocks.piece)
    except pa.ArrowInvalid:
        if blocks.piece >= blocks.block or not retry:
            raise
        # a row longer than a piece's block (Arrow's "straddling object"): rows up to the row limit (a block) are
        # read wherever they are, as the streaming reader reads them; a failure again is the file's
        table = read(blocks.block)
    # One chunk per column: the typing works a block's column at a time (a copy of one block's text, transient);
    # a column typed as dictionary codes is then over one dictionary, the union of its chunks'.
    return table.combine_chunks().to_batches()[0] if table.num_rows else pa.RecordBatch.from_pylist([], table.schema)
