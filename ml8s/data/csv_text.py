"""CSV text read the way every ml8s reader reads it: a header of unique, non-blank names, every cell as text,
``"`` quoting in which a value may hold commas and newlines, a block of text at a time.

Arrow parses; this module checks what Arrow lets through or reports badly: a header whose names Arrow and
Python would read differently, a data row repeating the header line (files concatenated), a quoted value still
open at the end of the file (a file cut short), and the data row of a record unlike the header (Arrow's message
names no row).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator

import pyarrow as pa
import pyarrow.csv as pacsv

from ml8s.data.csv_lines import FileBytes, long_line, longest_cell, repeated_header
from ml8s.data.csv_pieces import Blocks, PieceTypes, segments
from ml8s.errors import CsvRefusedError, DataError
from ml8s.text import is_utf8

HEADER_MAX = 1024 * 1024  # bytes a header row may span (quoted newlines included)
# Arrow cuts CSV text into blocks at newlines; unless told that values may hold one (RFC 4180 allows a newline
# in a quoted value), a quoted newline across a block boundary fails to parse, so a valid file would pass or
# fail by its size alone.
PARSE_OPTIONS = pacsv.ParseOptions(newlines_in_values=True)
BLOCK = 32 * 1024 * 1024  # bytes of CSV text parsed at a time: the text held besides the typed chunks
# The longest line read (its line end included): Arrow's parser needs a whole row in a block, and refused a longer
# one or not by where the block boundaries fell. Longer lines are refused, by a check of every file, named.
ROW_MAX = BLOCK
# Python's csv reader (predict's strict quote check, the search for a bad record's row) refuses a field over 128 KiB
# by default, a limit Arrow's reader does not have: a quoted cell training reads was refused by predict. The limit is
# the process's; it is only ever raised, to the longest row read.
csv.field_size_limit(max(csv.field_size_limit(), ROW_MAX))
_PIECE_BLOCK = 1024 * 1024  # Arrow's default block: the pieces of one batch parsed on every core


def csv_table(data: FileBytes, where: str) -> pa.Table:
    """A whole CSV file as a table of text columns (:func:`csv_batches`, collected); ``where`` names it in errors."""
    names, batches = csv_batches(data, where)
    return pa.Table.from_batches(list(batches), schema=pa.schema([(name, pa.string()) for name in names]))


def csv_batches(
    data: FileBytes, where: str, *, empty_as_null: bool = False, types: PieceTypes | None = None
) -> tuple[list[str], Iterator[pa.RecordBatch]]:
    """A CSV file's column names and its rows as text, a block of :data:`BLOCK` bytes at a time; with
    ``empty_as_null`` an empty cell (quoted or not) is null, at no cost (the parser marks it). With ``types``, a
    file cut into pieces (no quote, over a block) has each piece's columns typed as ``types`` asks where it can.

    Raises:
        DataError: the file is empty, its header is unusable, its text does not parse (naming the data row where
            Python's csv module finds it), or it ends inside a quoted value.
    """
    if not data:
        raise DataError(f"{where} is empty; expected a header line and rows")
    try:
        header, end = _header(data, where)
    except (UnicodeDecodeError, csv.Error) as exc:
        raise DataError(f"{where} cannot be parsed as csv: {exc}") from exc
    _refuse_lines(data, end, header, where)
    try:
        options = pacsv.ConvertOptions(
            column_types={n: pa.string() for n in header},
            strings_can_be_null=empty_as_null,
            null_values=[""] if empty_as_null else [],
        )
        if len(data) > BLOCK and data.find(b'"') < 0:
            # No quote: no value was left open at the end (nothing to check), and with ``types`` a column need not
            # be text.
            blocks = Blocks(block=BLOCK, piece=_PIECE_BLOCK)
            return segments(data, options, header, types, blocks, lambda exc: _unparsed(where, data, header, exc))
        reader = pacsv.open_csv(
            pa.BufferReader(data),
            read_options=pacsv.ReadOptions(block_size=BLOCK),
            parse_options=PARSE_OPTIONS,
            convert_options=options,
        )
        names, parsed = list(reader.schema.names), iter(reader)
    except pa.ArrowException as exc:
        raise _unparsed(where, data, header, exc) from exc

    def batches() -> Iterator[pa.RecordBatch]:
        rows, last = 0, ""
        try:
            for batch in parsed:
                if batch.num_rows:  # only the last value is kept: a batch held on would add a block to the peak
                    rows, last = rows + batch.num_rows, batch.column(header[-1])[-1].as_py() or ""
                yield batch
        except pa.ArrowException as exc:
            raise _unparsed(where, data, header, exc) from exc
        if rows:
            _check_closed(data, header[-1], last, rows, where)

    return names, batches()


def refuse_lines(data: FileBytes, where: str) -> None:
    """The checks by line of :func:`csv_batches` (a repeated header line, a line over :data:`ROW_MAX`), for a
    reader that parses the text otherwise (Python's csv module) and must refuse what training refuses.

    Raises:
        CsvRefusedError: as :func:`csv_batches`.
        DataError: the header cannot be read as :func:`csv_batches` reads it.
    """
    try:
        header, end = _header(data, where)
    except (UnicodeDecodeError, csv.Error) as exc:
        raise DataError(f"{where} cannot be parsed as csv: {exc}") from exc
    _refuse_lines(data, end, header, where)


def _refuse_lines(data: FileBytes, end: int, header: list[str], where: str) -> None:
    found = repeated_header(data, end)
    if found is not None:
        line, text = found
        raise CsvRefusedError(
            f"{where}, line {line} (1 = the first line): the data row {text!r} repeats the header: were files "
            "concatenated (cat a.csv b.csv)? expected the header line once, at the top of each file"
        )
    long = long_line(data, ROW_MAX)
    if long is not None:
        raise _too_long(where, data, header, long)


def _header(data: FileBytes, where: str) -> tuple[list[str], int]:
    # The header ends at the first newline outside quotes (a quoted name may hold one, as Arrow reads it); an
    # escaped quote ("") keeps the parity. Only the header's bytes are scanned and decoded, never the file.
    start, quotes = 0, 0
    while True:
        end = data.find(b"\n", start)
        quotes += data.count(b'"', start, len(data) if end < 0 else end)
        if end < 0 or quotes % 2 == 0:
            break
        start = end + 1
        if start > HEADER_MAX:
            raise DataError(
                f"{where} has a header over {HEADER_MAX} bytes (an unclosed quote?); expected a header line"
            )
    # utf-8-sig: Arrow's reader skips a byte order mark (Excel writes one), so the names typed as text here
    # must be the names Arrow reports, without it.
    line = (data if end < 0 else data[:end]).decode("utf-8-sig")
    header = next(csv.reader(io.StringIO(line, newline="")), [])
    if not header or any(not name.strip() for name in header):
        raise DataError(f"{where} has an empty or blank column name in its header; expected named columns")
    duplicates = sorted({n for n in header if header.count(n) > 1})
    if duplicates:
        raise DataError(f"{where} repeats column(s) {duplicates} in its header; expected unique names")
    return header, len(data) if end < 0 else end


def _check_closed(data: FileBytes, name: str, value: str, rows: int, where: str) -> None:
    """Refuse a quoted value left open at the end of a file (a file cut short inside it): Arrow reads it as
    running to the end of the file, so a truncated file would otherwise load a made-up last value. The file's
    text must end with the last value, quoted and closed or not quoted at all (trailing newlines aside)."""
    # Compared in place: data.rstrip() and a slice of it were two copies of the file (660 MiB at the end of each
    # of the 20M-row demo's 330 MiB files), at the step's peak.
    end, raw = _text_end(data), value.encode("utf-8")
    if data.endswith(b'"' + raw.replace(b'"', b'""') + b'"', 0, end):
        return
    start = end - len(raw)
    if (
        not raw.startswith(b'"')
        and data.endswith(raw, 0, end)
        and (start == 0 or data.endswith((b",", b"\n", b"\r"), 0, start))
    ):
        return
    raise DataError(
        f"{where}, column {name!r}, data row {rows} (1 = the first row after the header): a quoted value is "
        "still open at the end of the file (was the file cut short?); expected a closing '\"'"
    )


def _text_end(data: FileBytes) -> int:
    """Where the file's text ends, trailing newlines aside (``len(data.rstrip(b"\\r\\n"))``, copying at most
    64 KiB at a time)."""
    end = len(data)
    while end:
        window = data[max(0, end - _TAIL) : end]
        stripped = len(window.rstrip(b"\r\n"))
        if stripped:
            return end - len(window) + stripped
        end -= len(window)
    return 0


_TAIL = 1 << 16


def _unparsed(where: str, data: FileBytes, header: list[str], exc: pa.ArrowException) -> DataError:
    """The error of a CSV file Arrow could not parse, naming the data row (and column) of the first record unlike
    the header when Python's csv module finds it (a second pass, on this failure path only; Arrow's own message
    names neither)."""
    if "straddling" in str(exc):  # Arrow's words for a row longer than its block: a record of quoted newlines
        return _too_long(where, data, header, None)
    found = _first_bad_record(data, header)
    if found is None:
        return DataError(f"{where} cannot be parsed as csv: {exc}")
    row, problem = found
    return DataError(
        f"{where} cannot be parsed as csv: data row {row} (1 = the first row after the header) {problem} ({exc})"
    )


def _too_long(where: str, data: FileBytes, header: list[str], long: tuple[int, int] | None) -> CsvRefusedError:
    """The error of a row longer than :data:`ROW_MAX` (``long``: where its line starts and ends) or than a parse
    block (``long`` None: a record of quoted newlines, named by no line): its line and, when found, the column
    of its longest cell."""
    expected = f"expected rows of at most {ROW_MAX} bytes, the line end included (was a quote left open?)"
    if long is None:
        return CsvRefusedError(f"{where} has a row over {BLOCK} bytes (quoted newlines included); {expected}")
    start, end = long
    cell = longest_cell(data, start, end)
    column = f", column {header[cell]!r}" if cell is not None and cell < len(header) else ""
    line, size = data.count(b"\n", 0, start) + 1, min(end + 1, len(data)) - start
    return CsvRefusedError(f"{where}, line {line} (1 = the first line){column}: a row of {size} bytes; {expected}")


def _first_bad_record(data: FileBytes, header: list[str]) -> tuple[int, str] | None:
    # surrogateescape: a byte that is not UTF-8 becomes a lone surrogate in its cell, found below, rather than
    # an error at an unknown record.
    text = io.TextIOWrapper(io.BytesIO(data), encoding="utf-8-sig", errors="surrogateescape", newline="")
    records = csv.reader(text)
    row = 0
    try:
        next(records, None)  # the header, checked by _header
        for record in records:
            if not record:
                continue  # an empty line: Arrow skips it, and it is not counted
            row += 1
            for name, cell in zip(header, record, strict=False):
                if not cell.isascii() and not is_utf8(cell):
                    return row, f"has bytes that are not UTF-8 in column {name!r}; expected UTF-8 text"
            if len(record) != len(header):
                return row, f"has {len(record)} field(s); expected {len(header)}, as in the header"
    except csv.Error:
        return None  # Python's reader stops where Arrow's did not (e.g. its field size limit): no row to name
    return None
