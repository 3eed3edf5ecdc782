"""Lines of CSV text found by bytes searches (``find``, ``rfind``, ``count``: memchr speed), never a Python step per
row: a CSV file of 20M rows is checked in a few passes over its bytes.

- :func:`repeated_header`: a data row that is the header line again (``cat a.csv b.csv``: Arrow reads the second
  header as data, a numeric column then warns of stray text and a categorical one gains a category named after
  the column);
- :func:`long_line`: a line longer than Arrow's parse block, which Arrow refuses without naming it.
"""

from __future__ import annotations

# A file's bytes as the readers take them: a bytearray where files are read into one reused buffer
# (ml8s.data.sources.read_checking).
FileBytes = bytes | bytearray
BOM = b"\xef\xbb\xbf"  # the second file of a concatenation brings its own byte order mark
# Hits of the header's text that are no whole line (a row holding it as part of a cell) searched past one at a
# time before the search looks for whole lines only: a few passes over the bytes, whatever the rows hold.
_MISSES = 64
_CELLS_SHOWN = 4096  # separators in a long line beyond which its longest cell is not looked for
_SHOWN = 80  # characters of a repeated header shown in an error


def repeated_header(data: FileBytes, end: int) -> tuple[int, str] | None:
    """The line number (1 = the first line) and text of the first line after the header, which ends at ``end``
    (its newline, or the end of the data), that repeats the header line, or None. A repeat may end with LF or
    CRLF, or the data, and start with a byte order mark; one inside a quoted value (an odd number of quotes
    since the header) is not a row."""
    line = data[len(BOM) if data.startswith(BOM) else 0 : end]
    line = line[:-1] if line.endswith(b"\r") else line
    if not line or end >= len(data):
        return None
    pos, misses, quotes, counted = end + 1, 0, 0, end
    while True:
        hit = data.find(line, pos) if misses < _MISSES else _whole_line(data, line, pos)
        if hit < 0:
            return None
        first = _line_start(data, hit)
        if first >= 0 and _ends_line(data, hit + len(line)):
            quotes, counted = quotes + data.count(b'"', counted, first), first
            if quotes % 2 == 0:
                text = line.decode("utf-8", "replace")
                shown = text if len(text) <= _SHOWN else text[:_SHOWN] + "..."
                return data.count(b"\n", 0, first) + 1, shown
        misses, pos = misses + 1, hit + 1


def _line_start(data: FileBytes, hit: int) -> int:
    """Where the line holding the header's text at ``hit`` starts when that text starts it (after a byte order
    mark or not), else -1."""
    if data.endswith(b"\n", 0, hit):
        return hit
    if data.endswith(b"\n" + BOM, 0, hit):
        return hit - len(BOM)
    return -1


def _ends_line(data: FileBytes, at: int) -> bool:
    return at == len(data) or data.startswith((b"\n", b"\r\n"), at) or (at == len(data) - 1 and data[at] == 0x0D)


def _whole_line(data: FileBytes, line: FileBytes, pos: int) -> int:
    """The first place from ``pos`` where ``line`` is a whole line (see :func:`repeated_header`), else -1: four
    searches that each find whole lines only, so rows holding the text in a cell cost nothing more."""
    found = [
        hit + len(before)
        for before in (b"\n", b"\n" + BOM)
        for after in (b"\n", b"\r\n")
        if (hit := data.find(before + line + after, max(0, pos - len(before)))) >= 0
    ]
    for before in (b"\n", b"\n" + BOM):
        for after in (b"", b"\r"):
            if data.endswith(before + line + after) and len(data) - len(line + after) >= pos:
                found.append(len(data) - len(line + after))
    return min(found, default=-1)


def long_line(data: FileBytes, limit: int) -> tuple[int, int] | None:
    """Where the first line longer than ``limit`` bytes (its newline included) starts and ends (its newline, or
    the end of the data), or None: each step looks ``limit`` bytes ahead for the last newline and jumps past it,
    so the search makes about ``len(data) / limit`` steps."""
    start = 0
    while len(data) - start > limit:
        newline = data.rfind(b"\n", start, start + limit)
        if newline < 0:
            end = data.find(b"\n", start)
            return start, len(data) if end < 0 else end
        start = newline + 1
    return None


def longest_cell(data: FileBytes, start: int, end: int) -> int | None:
    """The index of the longest comma-separated cell of the line ``data[start:end]``, or None when the line
    holds a quote (a comma may then be inside a value) or too many cells to look through."""
    if data.find(b'"', start, end) >= 0 or data.count(b",", start, end) > _CELLS_SHOWN:
        return None
    sizes: list[int] = []
    at = start
    while (comma := data.find(b",", at, end)) >= 0:
        sizes.append(comma - at)
        at = comma + 1
    sizes.append(end - at)
    return max(range(len(sizes)), key=sizes.__getitem__)
