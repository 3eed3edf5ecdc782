"""Columns typed by Arrow's CSV parser (ml8s.data.csv_typed) give exactly the chunks, datasets and errors of the text
parse they replace, whatever route a Plan asks for: a Plan may only move work, never change a result."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from ml8s.data import csv_text, dataset
from ml8s.data.csv_columns import Chunk, Numbers, Route
from ml8s.data.csv_typed import CODES, Plan
from ml8s.data.dataset import load_dataset
from ml8s.data.fingerprint import fingerprint_local
from ml8s.errors import DataError

# Each column's cells, written unquoted (the typed parse is for files without a quote); "" is an empty cell.
CELLS: dict[str, list[str]] = {
    "plain": ["1", "2.5", "", "-3e2", "4", "+.5", "5.", "0.0e-0", "00012", "1E+5"],
    "padded": [" 1", "2.5 ", "\t7", " 8\t", "9", "", "10", "11", "12", "13"],
    "tokens": ["1", "NA", "nan", "", "?", "2", "NULL", "3", "None", "4"],
    "nan spellings": ["1", "NAN", "2", "-nan", "3", "4", "5", "6", "7", "8"],
    "infinity": ["1", "inf", "2", "-Infinity", "3", "4", "5", "6", "7", "8"],
    "text": ["b", " a", "a ", "NA", "", "b", "\u00a0c\u00a0", "c", "a", "d"],
    "booleans": ["true", "False", "", "TRUE", "false", "true", "true", "false", "", "true"],
    "flags": ["true", "false", "", "NA", "false", "true", "true", "false", "?", "true"],
    "flags padded": ["true", "false", "true", "false", " true", "false", "true", "false\t", "true", "true"],
    "flags then text": ["false", "true", "false", "true", "false", "true", "false", "true", "false", "maybe"],
    "stray": ["1", " 2", "x", "3", "NA", "4e1 ", "5", "6", "7", "8"],
    "late text": ["1", "2", "3", "4", "5", "6", "7", "8", "9", "abc"],
    "odd numbers": ["1", "0x10", "1_000", "5e", ".", "1d5", "\u0661", "+-1", "Inf1", "1.5f"],
    "all missing": ["", "NA", "  ", "", "", "?", "", "", "", ""],
    "unicode blanks": ["1", "2\u3000", "\u00a03", "4", "5", "6", "7", "8", "9", "10"],
}
NAMES = sorted(CELLS)
REPEAT = 40  # 400 rows: at a block of 64 bytes, dozens of pieces
ROUTES: dict[str, Route] = {"numbers": "numbers", "codes": "codes", "text": "text", "flags": "flags"}


def _file(tmp_path: Path, cells: dict[str, list[str]], repeat: int = REPEAT) -> tuple[Path, bytes]:
    names = sorted(cells)
    lines = [",".join(names)]
    for _ in range(repeat):
        lines += [",".join(cells[name][i] for name in names) for i in range(len(cells[names[0]]))]
    data = ("\n".join(lines) + "\n").encode()
    assert b'"' not in data
    path = tmp_path / "part.csv"
    path.write_bytes(data)
    return path, data


def _summary(chunk: Chunk) -> tuple[object, ...]:
    if isinstance(chunk, Numbers):
        return ("numbers", chunk.present, np.nan_to_num(chunk.values, nan=1234.5).tobytes())
    column = chunk.column
    return ("texts", chunk.present, chunk.numbers, column.category_list(), column.values.tobytes())


def _blocks(data: bytes, plan: Plan) -> list[tuple[int, list[tuple[object, ...]]]]:
    names, blocks = dataset._typed_blocks(data, "data file part.csv", plan)
    assert list(names) == NAMES
    return [(rows, [_summary(chunk) for chunk in chunks]) for rows, chunks in blocks]


class _Text(Plan):
    """A Plan that never asks for a type: every piece parsed as text, the reference."""

    def wanted(self, names: list[str]) -> dict[str, pa.DataType]:
        return {}


class _Fixed(Plan):
    """A Plan asking for one route for every column, whatever it learns."""

    def __init__(self, route: Route) -> None:
        super().__init__()
        self.route = route

    def learn(self, name: str, route: Route) -> None:
        super().learn(name, self.route)


@pytest.fixture
def small_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(csv_text, "BLOCK", 64)


@pytest.mark.parametrize("route", ["numbers", "codes", "text", "flags", "learned"])
def test_every_route_gives_the_chunks_of_the_text_parse(
    route: str, small_blocks: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, data = _file(tmp_path, CELLS)
    expected = _blocks(data, _Text())
    plan = Plan() if route == "learned" else _Fixed(ROUTES[route])
    asked: list[dict[str, pa.DataType]] = []
    real = plan.wanted

    def wanted(names: list[str]) -> dict[str, pa.DataType]:
        asked.append(real(names))
        return asked[-1]

    monkeypatch.setattr(plan, "wanted", wanted)
    assert _blocks(data, plan) == expected
    assert len(expected) > 20, "the file was cut into many pieces"
    assert any(asked[1:]) == (route != "text"), "pieces after the first were asked typed"


def test_the_learned_routes_type_what_the_parser_can(tmp_path: Path) -> None:
    _, data = _file(tmp_path, CELLS)
    plan = Plan()  # learned from the file's one block (the file is smaller than a block)
    dataset._typed_blocks(data, "data file part.csv", plan)
    wanted = plan.wanted(NAMES)
    assert wanted["plain"] == pa.float64()
    assert {wanted[name] for name in ("text", "booleans", "stray", "odd numbers", "flags then text")} == {CODES}
    assert wanted["flags"] == wanted["flags padded"] == pa.bool_()  # their texts, trimmed, are spelled as FLAGS
    assert "tokens" not in wanted and "padded" not in wanted  # numbers among tokens or blanks: text, as before


@pytest.mark.parametrize("route", ["numbers", "codes", "flags", "learned"])
def test_a_whole_load_is_the_text_parse(
    route: str, small_blocks: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, _ = _file(tmp_path, {k: v for k, v in CELLS.items() if k not in ("infinity",)})

    def load(plan: Callable[[], Plan]) -> list[tuple[object, ...]]:
        monkeypatch.setattr(dataset, "Plan", plan)
        loaded = load_dataset(fingerprint_local(str(path)))
        return [
            (c.name, c.kind, np.nan_to_num(np.asarray(c.values, dtype=float), nan=-9).tobytes(), c.category_list())
            for c in loaded.columns
        ] + [tuple(sorted((w.column, w.message) for w in loaded.warnings))]

    expected = load(_Text)
    assert load(Plan if route == "learned" else lambda: _Fixed(ROUTES[route])) == expected


@pytest.mark.parametrize("route", ["numbers", "codes", "flags"])
@pytest.mark.parametrize(
    ("row", "says"),
    [(b"1,2\n", "has 2 field"), (b"1,\xff" + b",1" * (len(NAMES) - 2) + b"\n", "not UTF-8")],
    ids=["short", "not-utf8"],
)
def test_a_bad_record_in_a_typed_piece_is_named_as_the_text_parse_names_it(
    route: Route, row: bytes, says: str, small_blocks: None, tmp_path: Path
) -> None:
    _, data = _file(tmp_path, {k: CELLS["plain"] for k in NAMES}, repeat=10)
    bad = data + row + b",".join([b"1"] * len(NAMES)) + b"\n"
    with pytest.raises(DataError) as text:
        dataset._typed_blocks(bad, "data file part.csv", _Text())
    with pytest.raises(DataError) as typed:
        dataset._typed_blocks(bad, "data file part.csv", _Fixed(route))
    assert typed.value.message == text.value.message
    assert says in typed.value.message and "data row 101 " in typed.value.message


def test_a_column_categorical_overall_parses_its_file_again_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Blocks of a column that held only numbers keep no text; when the column is categorical overall its file is
    parsed again for that column, once, not once per block (at 20M rows, 10 blocks a file)."""
    monkeypatch.setattr(csv_text, "BLOCK", 16)  # a few rows a block: most blocks of "late text" hold numbers only
    path, _ = _file(tmp_path, {"late text": CELLS["late text"], "plain": CELLS["plain"]})
    calls: list[str] = []
    real = dataset._parse

    def counted(*args: object) -> pa.Table:
        calls.append("parse")
        return real(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(dataset, "_parse", counted)
    loaded = load_dataset(fingerprint_local(str(path)))
    assert loaded.column("late text").kind == "categorical"
    assert calls == ["parse"]


def test_files_are_read_into_two_buffers_in_turn_unless_something_holds_one(tmp_path: Path) -> None:
    """read_checking(reuse=True) fills two buffers in turn (the next file is read while the caller parses one; no
    fresh memory per file), each of its file's size; a buffer still exported (Arrow made an array of it without a
    copy) is left as it is and a new one made."""
    from ml8s.data.sources import read_checking

    contents = {f"part-{i}.csv": (f"a,b\n{i},x\n" * (50 + 30 * (i % 2))).encode() for i in range(4)}
    for name, text in contents.items():
        (tmp_path / name).write_bytes(text)
    fingerprint = fingerprint_local(str(tmp_path))
    seen, held = [], []
    for entry, data, check in read_checking(fingerprint, reuse=True):
        check()
        assert bytes(data) == contents[entry.relative_path]
        seen.append(id(data))
        if entry.relative_path == "part-1.csv":
            held.append((pa.py_buffer(data), bytes(data)))  # an export that outlives the file
        del data
    assert seen[0] != seen[1] and seen[2] == seen[0]  # the first file's buffer holds the third
    assert seen[3] not in (seen[0], seen[1])  # the second's is still exported: a new one for the fourth
    exported, copy = held[0]
    assert exported.to_pybytes() == copy  # never read over


def test_a_changed_file_read_into_the_buffer_is_named_as_changed(tmp_path: Path) -> None:
    from ml8s.data.sources import read_checking
    from ml8s.errors import DataChangedError

    for i in range(2):
        (tmp_path / f"part-{i}.csv").write_bytes(b"a,b\n1,x\n" * 20)
    fingerprint = fingerprint_local(str(tmp_path))
    (tmp_path / "part-1.csv").write_bytes(b"a,b\n1,x\n" * 25)  # longer than the buffer
    with pytest.raises(DataChangedError, match=r"part-1\.csv changed after it was fingerprinted"):
        for _, data, check in read_checking(fingerprint, reuse=True):
            check()
            del data
