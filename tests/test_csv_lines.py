"""CSV text refused by line: a data row repeating the header, a row longer than a parse block.

``cat a.csv b.csv > c.csv`` read the second header as a data row: a numeric column only warned of stray text,
a categorical one gained a category named after the column. A cell of 200 MB failed with Arrow's "straddling
object straddles two block boundaries", naming no file, row or limit, and a row somewhat longer than a block
read or failed by where the block boundaries fell (files over a block without quotes: rows over 1 MiB). Both are
DATA_ERRORs naming the file and the line, in training and in ``ml8s predict``'s reading of its input.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import ml8s.data.csv_lines as csv_lines
import ml8s.data.csv_text as csv_text
from ml8s.data.dataset import load_dataset
from ml8s.data.sources import fingerprint_data
from ml8s.errors import DataError, PredictionInputError
from ml8s.inference.csv_rows import read_csv_columns, read_csv_rows

HEADER = "x,plan,churned"
ROWS = "".join(f"{i},{'basic' if i % 2 else 'pro'},{'yes' if i % 3 else 'no'}\n" for i in range(6))
BOM = "\ufeff"


def _load(tmp_path: Path, data: bytes) -> None:
    directory = tmp_path / "d"
    directory.mkdir(parents=True)
    (directory / "c.csv").write_bytes(data)
    load_dataset(fingerprint_data(f"file://{directory}"))


def _both_refuse(tmp_path: Path, data: bytes, *says: str) -> None:
    """Training's loader and predict's reader refuse ``data`` with a DATA_ERROR saying each of ``says``."""
    with pytest.raises(DataError) as trained:
        _load(tmp_path, data)
    with pytest.raises(DataError) as predicted:  # not PREDICTION_INPUT_INVALID from Python's csv reader
        read_csv_columns(data, "rows.csv")
    with pytest.raises(DataError) as as_rows:  # the reader of a row per mapping refuses them alike
        read_csv_rows(data, "rows.csv")
    for info, name in ((trained, "c.csv"), (predicted, "rows.csv"), (as_rows, "rows.csv")):
        assert info.value.code == "DATA_ERROR" and name in info.value.message, info.value
        assert not isinstance(info.value, PredictionInputError)
        for said in says:
            assert said in info.value.message, info.value


@pytest.mark.parametrize(
    ("first", "second"),
    [
        (HEADER + "\n" + ROWS, HEADER + "\n" + ROWS),
        (HEADER + "\r\n" + ROWS.replace("\n", "\r\n"), HEADER + "\r\n" + ROWS.replace("\n", "\r\n")),
        (BOM + HEADER + "\n" + ROWS, BOM + HEADER + "\n" + ROWS),  # Excel's "CSV UTF-8", twice
        (HEADER + "\n" + ROWS, HEADER),  # the second file is a header alone, without a line end
        (HEADER + "\r\n" + ROWS.replace("\n", "\r\n"), HEADER + "\r"),
    ],
    ids=["lf", "crlf", "bom", "header-at-the-end", "cr-at-the-end"],
)
def test_concatenated_files_are_refused_at_the_second_header(tmp_path: Path, first: str, second: str) -> None:
    data = (first + second).encode()
    _both_refuse(tmp_path, data, "line 8 (1 = the first line)", f"data row {HEADER!r} repeats the header")
    _load(tmp_path / "one", first.encode())  # each file alone loads
    assert read_csv_columns(first.encode(), "rows.csv").rows == 6


def test_the_header_text_inside_a_quoted_value_or_a_cell_is_no_repeat(tmp_path: Path) -> None:
    data = f'{HEADER}\n1,"a plan\n{HEADER}\n",yes\n2,{HEADER.replace(",", "")},no\n3,x,yes\n4,x,no\n'.encode()
    _load(tmp_path, data)
    assert read_csv_columns(data, "rows.csv").rows == 4


@pytest.mark.parametrize("misses", [0, 3, 64])
def test_many_rows_holding_the_header_text_are_searched_past_by_whole_lines(
    tmp_path: Path, misses: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Rows that start with the header's text are no repeat; past a few of them the search looks for whole
    # lines only (a Python step per such row would cost per row): both ways find the same line.
    monkeypatch.setattr(csv_lines, "_MISSES", misses)
    starting = "".join(f"{HEADER}{i}\n" for i in range(20))  # the text, then more: no whole line
    ending = "".join(f"{i}{HEADER}\n" for i in range(20))  # the text after more
    data = f"{HEADER}\n{ending}{starting}"
    assert csv_lines.repeated_header(data.encode(), len(HEADER)) is None
    found = csv_lines.repeated_header((data + f"{HEADER}\n1,a,b\n").encode(), len(HEADER))
    assert found == (42, HEADER)


LIMIT = 256


@pytest.fixture
def small_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rows limited to LIMIT bytes, parsed in blocks of LIMIT (files without quotes over LIMIT in pieces parsed
    in blocks of LIMIT / 4): the production sizes (32 MiB, 1 MiB) scaled down."""
    monkeypatch.setattr(csv_text, "BLOCK", LIMIT)
    monkeypatch.setattr(csv_text, "ROW_MAX", LIMIT)
    monkeypatch.setattr(csv_text, "_PIECE_BLOCK", LIMIT // 4)


def _with_row(size: int, *, quoted: bool, many: bool) -> bytes:
    """A file whose data row 3 is ``size`` bytes long, its line end included, the length in column ``plan``."""
    filler = "n" * (size - len("3,,yes\n") - (2 if quoted else 0))
    cell = f'"{filler}"' if quoted else filler
    before = "".join(f"{i},a,no\n" for i in range(60 if many else 2))
    return f"{HEADER}\n{before}3,{cell},yes\n4,b,no\n".encode()


@pytest.mark.usefixtures("small_blocks")
@pytest.mark.parametrize("quoted", [False, True])
@pytest.mark.parametrize("many", [False, True], ids=["one-block", "in-pieces"])
def test_a_row_over_the_limit_is_refused_by_its_line_and_one_at_the_limit_reads(
    tmp_path: Path, quoted: bool, many: bool
) -> None:
    at_limit = _with_row(LIMIT, quoted=quoted, many=many)
    _load(tmp_path / "ok", at_limit)  # in pieces: a row over a piece's block is read as the streaming reader does
    assert read_csv_columns(at_limit, "rows.csv").rows == (62 if many else 4)
    over = _with_row(LIMIT + 1, quoted=quoted, many=many)
    line = 62 if many else 4
    column = "" if quoted else ", column 'plan'"  # a quoted line's commas may be a value's: no column named
    _both_refuse(
        tmp_path,
        over,
        f"line {line} (1 = the first line){column}: a row of {LIMIT + 1} bytes; expected rows of at most {LIMIT} "
        "bytes, the line end included (was a quote left open?)",
    )


@pytest.mark.usefixtures("small_blocks")
def test_a_record_of_short_lines_over_a_block_is_refused_without_arrows_words(tmp_path: Path) -> None:
    lines = "short line\n" * (3 * LIMIT // 11)
    data = f'{HEADER}\n1,"{lines}",yes\n2,b,no\n'.encode()
    with pytest.raises(DataError, match=f"has a row over {LIMIT} bytes") as info:
        _load(tmp_path, data)
    assert "straddling" not in info.value.message


def test_a_quoted_cell_over_pythons_default_field_limit_is_read_by_predict_as_training_reads_it(
    tmp_path: Path,
) -> None:
    """Python's csv module refuses a field over 128 KiB by default ("field larger than field limit"), a limit
    Arrow's reader does not have: predict refused a quoted cell of 200 KB in a file training reads."""
    data = _with_row(200_000, quoted=True, many=False)
    _load(tmp_path, data)
    assert read_csv_columns(data, "rows.csv").rows == 4  # the quote check runs Python's strict reader first
    rows = read_csv_rows(data, "rows.csv").rows
    assert len(rows) == 4 and rows[2]["plan"] == "n" * (200_000 - len("3,,yes\n") - 2)
