"""CSV text refused by line: a data row repeating the header.

``cat a.csv b.csv > c.csv`` read the second header as a data row: a numeric column only warned of stray text,
a categorical one gained a category named after the column. It is a DATA_ERROR naming the file and the line,
in training and in ``ml8s predict``'s reading of its input.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import ml8s.data.csv_lines as csv_lines
from ml8s.data.dataset import load_dataset
from ml8s.data.sources import fingerprint_data
from ml8s.errors import DataError, PredictionInputError
from ml8s.inference.csv_rows import read_csv_columns

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
    for info, name in ((trained, "c.csv"), (predicted, "rows.csv")):
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
