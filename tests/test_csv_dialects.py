"""CSV files as spreadsheets and Windows tools write them train like plain ones.

A UTF-8 byte order mark (Excel's "CSV UTF-8") made the first column's name differ between the header read
for typing (which kept the mark) and Arrow's parse (which skips it): the run died with an INTERNAL_ERROR
from inside Arrow. CRLF line ends are covered too, and so are quoted values that hold a newline (RFC 4180
allows one): Arrow cut the text into blocks at newlines, so such a file parsed or failed by its size alone.
A file cut short inside a quoted last value (Arrow reads it as running to the end of the file) and a record
unlike the header are refused with the data row named.
"""

from __future__ import annotations

import csv
import io
import json
import tracemalloc
from pathlib import Path

import pytest
from conftest import make_context, write_small_churn

import ml8s.data.csv_text as csv_text
from ml8s.context.publish import local_path
from ml8s.contract import layout
from ml8s.data.dataset import load_dataset, parse_file
from ml8s.data.sources import fingerprint_data
from ml8s.errors import DataError
from ml8s.pipeline.features import compute_features


def _rewrite(source: Path, target: Path, *, bom: bool, crlf: bool) -> Path:
    """``source`` with its first column moved last (so a numeric column comes first, the one the mark hid)."""
    target.mkdir(parents=True)
    for path in sorted(source.iterdir()):
        lines = path.read_text().splitlines()
        text = "".join(",".join([*cells[1:], cells[0]]) + "\n" for cells in (line.split(",") for line in lines))
        data = text.replace("\n", "\r\n").encode() if crlf else text.encode()
        (target / path.name).write_bytes((b"\xef\xbb\xbf" if bom else b"") + data)
    return target


def _features(data: Path, root: Path, out: Path) -> tuple[bytes, list[str]]:
    ctx = make_context(data, root, EPOCHS="1")
    compute_features(ctx.spec, str(out))
    schema = json.loads((out / local_path("", layout.FEATURE_SCHEMA)).read_bytes())
    return (out / local_path("", layout.FEATURE_MATRIX)).read_bytes(), [f["name"] for f in schema["features"]]


def test_a_byte_order_mark_and_crlf_give_the_features_of_plain_files(tmp_path: Path) -> None:
    plain = _rewrite(
        write_small_churn(tmp_path / "source", rows=120, files=2), tmp_path / "plain", bom=False, crlf=False
    )
    assert (plain / sorted(p.name for p in plain.iterdir())[0]).read_text().startswith("tenure,")
    matrix, names = _features(plain, tmp_path / "r0", tmp_path / "f0")
    for index, (bom, crlf) in enumerate([(True, False), (False, True), (True, True)], start=1):
        other = _rewrite(tmp_path / "source", tmp_path / f"d{index}", bom=bom, crlf=crlf)
        other_matrix, other_names = _features(other, tmp_path / f"r{index}", tmp_path / f"f{index}")
        assert other_names == names, (bom, crlf)
        assert other_matrix == matrix, (bom, crlf)


def test_a_quoted_newline_in_a_header_name_is_one_column(tmp_path: Path) -> None:
    # The header was cut at the first newline, inside the quotes: the column Arrow named "monthly\ncharges"
    # was not typed as text and the run died inside Arrow (INTERNAL_ERROR).
    source = write_small_churn(tmp_path / "source", rows=120, files=2)
    data = tmp_path / "data"
    data.mkdir()
    for path in sorted(source.iterdir()):
        text = path.read_text().replace("monthly_charges", '"monthly\ncharges"', 1)
        (data / path.name).write_text(text)
    _, plain_names = _features(source, tmp_path / "r0", tmp_path / "f0")
    _, names = _features(data, tmp_path / "r1", tmp_path / "f1")
    assert "monthly\ncharges" in names
    assert names == [name.replace("monthly_charges", "monthly\ncharges") for name in plain_names]


def test_parquet_integers_beyond_2_53_read_as_their_csv_text_does(tmp_path: Path) -> None:
    # A uint64 column over 2^53 (a hashed ID) was an ArrowInvalid from the typing, an INTERNAL_ERROR; it is
    # now the nearest double, exactly what the same numbers written as CSV text give.
    import pyarrow as pa
    import pyarrow.parquet as pq

    big = [2**64 - 1, 2**53 + 1, 3, 2**63 + 12345] * 30
    labels = ["yes", "no", "no", "yes"] * 30
    tenure = list(range(120))
    (tmp_path / "pq").mkdir()
    (tmp_path / "csv").mkdir()
    pq.write_table(
        pa.table({"big": pa.array(big, pa.uint64()), "tenure": tenure, "churned": labels}),
        tmp_path / "pq" / "a.parquet",
    )
    rows = "".join(f"{b},{t},{c}\n" for b, t, c in zip(big, tenure, labels, strict=True))
    (tmp_path / "csv" / "a.csv").write_text("big,tenure,churned\n" + rows)
    from_parquet = _features(tmp_path / "pq", tmp_path / "r0", tmp_path / "f0")
    from_csv = _features(tmp_path / "csv", tmp_path / "r1", tmp_path / "f1")
    assert "big" in from_parquet[1]
    assert from_parquet == from_csv


def _one_file(directory: Path, text: bytes) -> Path:
    directory.mkdir()
    (directory / "a.csv").write_bytes(text)
    return directory


def _parsed_both_ways(directory: Path) -> tuple[int, list[object]]:
    """The rows the training path reads (blocks) and the column ``note`` as the lineage path reads it (a table)."""
    fingerprint = fingerprint_data(f"file://{directory}")
    rows = load_dataset(fingerprint).rows
    (entry,) = fingerprint.entries
    table = parse_file(entry, (directory / entry.relative_path).read_bytes(), fingerprint.data_root)
    return rows, table.column("note").to_pylist()


def test_quoted_newlines_in_values_parse_alike_at_any_size(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # 1.6 MB read in 64 KiB blocks: block boundaries fall inside quoted values. Both paths failed ("Expected 3
    # columns, got 1") before: training's (32 MiB blocks) over 32 MiB, parse_file's (read_csv, 1 MiB) over 1 MiB.
    monkeypatch.setattr(csv_text, "BLOCK", 64 * 1024)
    rows = 40_000
    lines = [f'{i},"line one, {i}\nline two",{"yes" if i % 3 else "no"}\n' for i in range(rows)]
    text = ("x,note,churned\n" + "".join(lines)).encode()
    assert len(text) > 1024 * 1024
    expected = [record[1] for record in csv.reader(io.StringIO(text.decode(), newline=""))][1:]
    assert _parsed_both_ways(_one_file(tmp_path / "d", text)) == (rows, expected)


@pytest.mark.parametrize(
    "ending",
    ['"no\n', '"no', '"\n', '"n""o', '"no\r\n\r\n', '"no\n5,e,yes\n'],
    ids=["newline", "no-newline", "empty", "escaped-quote", "crlf", "rows-swallowed"],
)
def test_a_file_cut_inside_a_quoted_last_value_is_refused(tmp_path: Path, ending: str) -> None:
    directory = _one_file(tmp_path / "d", ("x,note,churned\n1,a,yes\n2,b,no\n3,c,yes\n4,d," + ending).encode())
    fingerprint = fingerprint_data(f"file://{directory}")
    says = "column 'churned', data row 4 (1 = the first row after the header): a quoted value is still open"
    with pytest.raises(DataError, match=r"a\.csv .*" + says.replace("(", r"\(").replace(")", r"\)")):
        load_dataset(fingerprint)
    with pytest.raises(DataError, match="still open at the end of the file"):
        parse_file(fingerprint.entries[0], (directory / "a.csv").read_bytes(), fingerprint.data_root)


@pytest.mark.parametrize("ending", ['"no"\n', '"n""o"\r\n\r\n', "\n", "no", '""', '"a\nb"'])
def test_a_closed_or_unquoted_last_value_loads(tmp_path: Path, ending: str) -> None:
    text = "x,note,churned\n1,a,yes\n2,b,no\n3,c,yes\n4,d," + ending
    rows, notes = _parsed_both_ways(_one_file(tmp_path / "d", text.encode()))
    assert (rows, notes) == (4, ["a", "b", "c", "d"])


@pytest.mark.parametrize(("ending", "closed"), [('"no', False), ('"no"', True), ("no", True), ('"n""o', False)])
def test_the_end_check_finds_the_text_past_many_trailing_newlines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ending: str, closed: bool
) -> None:
    # The check compares the file's end in place, stepping back over trailing newlines a window at a time (no copy
    # of the file): with 4-byte windows, the newlines span many windows and the last value straddles one.
    monkeypatch.setattr(csv_text, "_TAIL", 4)
    text = "x,note,churned\n1,a,yes\n2,b,no\n3,c,yes\n4,d," + ending + "\r\n" * 9 + "\n" * 7
    directory = _one_file(tmp_path / "d", text.encode())
    if closed:
        assert _parsed_both_ways(directory) == (4, ["a", "b", "c", "d"])
        return
    fingerprint = fingerprint_data(f"file://{directory}")
    with pytest.raises(DataError, match=r"data row 4 .* still open at the end of the file"):
        parse_file(fingerprint.entries[0], (directory / "a.csv").read_bytes(), fingerprint.data_root)


def test_the_end_check_copies_no_file_sized_bytes() -> None:
    # It ran once per file at the end of its parse, beside the file's bytes and the typed columns: two copies of
    # the file (rstrip, then a slice) were 660 MiB at the step's peak for the 20M-row demo's 330 MiB files.
    data = b"x,note\n" + b"1,abc\n" * (4 << 20) + b"\r\n" * 1000
    tracemalloc.start()
    try:
        csv_text._check_closed(data, "note", "abc", 4 << 20, "a.csv")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20, peak


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (b"1,a,yes\n\n2,b\n3,c,no\n", "data row 2 (1 = the first row after the header) has 2 field(s); expected 3"),
        (b"1,a,yes\n2,b,no,extra\n", "data row 2 (1 = the first row after the header) has 4 field(s); expected 3"),
        (
            b"1,a,yes\n2,b,no\n3,c\xffd,no\n",
            "data row 3 (1 = the first row after the header) has bytes that are not UTF-8 in column 'note'",
        ),
    ],
    ids=["short-after-empty-line", "long", "not-utf8"],
)
def test_a_record_unlike_the_header_is_named_by_its_row(tmp_path: Path, body: bytes, says: str) -> None:
    directory = _one_file(tmp_path / "d", b"x,note,churned\n" + body)
    fingerprint = fingerprint_data(f"file://{directory}")
    for read in (
        lambda: load_dataset(fingerprint),
        lambda: parse_file(fingerprint.entries[0], (directory / "a.csv").read_bytes(), fingerprint.data_root),
    ):
        with pytest.raises(DataError) as info:
            read()
        assert "a.csv" in str(info.value) and "cannot be parsed as csv" in str(info.value), info.value
        assert says in str(info.value), info.value


# Files without a quote are cut into pieces at newlines past each BLOCK and the pieces parsed on every core;
# with a BLOCK of a few bytes every record boundary is a cut. They must read exactly as the streaming reader
# (a BLOCK larger than the file) reads them.
UNQUOTED = {
    "plain": b"x,note,churned\n1,a,yes\n2,,no\n3,c,yes\n4,d,no\n",
    "crlf": b"x,note,churned\r\n1,a,yes\r\n2,b,no\r\n3,c,yes\r\n",
    "blank lines inside and at the end": b"x,note,churned\n1,a,yes\n\n\n2,b,no\n\n3,c,yes\n\n\n\n",
    "no final newline": b"x,note,churned\n1,a,yes\n2,b,no\n3,c,yes",
    "byte order mark": b"\xef\xbb\xbfx,note,churned\n1,a,yes\n2,b,no\n3,c,yes\n",
    "spaces and tokens": b"x,note,churned\n 1 ,NA,yes\n2, b ,no\n?,c,yes\n",
}


def _read_at(block: int, data: bytes, monkeypatch: pytest.MonkeyPatch) -> tuple[list[str], list[dict[str, object]]]:
    monkeypatch.setattr(csv_text, "BLOCK", block)
    names, batches = csv_text.csv_batches(data, "data file a.csv", empty_as_null=True)
    rows = [row for batch in batches for row in batch.to_pylist()]
    return names, rows


@pytest.mark.parametrize("name", sorted(UNQUOTED))
@pytest.mark.parametrize("block", [1, 8, 20])
def test_a_file_without_quotes_cut_into_pieces_reads_as_one(
    name: str, block: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = UNQUOTED[name]
    assert _read_at(block, data, monkeypatch) == _read_at(len(data), data, monkeypatch)
    assert _read_at(block, data, monkeypatch)[1], "rows were read"


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (b"1,a,yes\n2,b,no\n3,c,yes\n\n4,d\n5,e,no\n", "data row 4 (1 = the first row after the header) has 2 field"),
        (b"1,a,yes\n2,b,no\n3,c,yes\n4,d\xffx,no\n", "data row 4 (1 = the first row after the header) has bytes"),
    ],
    ids=["short", "not-utf8"],
)
def test_a_bad_record_in_a_later_piece_is_named_by_its_row(
    tmp_path: Path, body: bytes, says: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(csv_text, "BLOCK", 10)
    directory = _one_file(tmp_path / "d", b"x,note,churned\n" + body)
    with pytest.raises(DataError, match="cannot be parsed as csv") as info:
        load_dataset(fingerprint_data(f"file://{directory}"))
    assert says in str(info.value), info.value


def test_a_large_unquoted_dataset_types_as_the_streaming_reader_types_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    directory = write_small_churn(tmp_path / "d", rows=3000, files=2)
    fingerprint = fingerprint_data(f"file://{directory}")
    monkeypatch.setattr(csv_text, "BLOCK", 1 << 30)
    whole = load_dataset(fingerprint)
    monkeypatch.setattr(csv_text, "BLOCK", 4096)
    pieces = load_dataset(fingerprint)
    assert pieces.names == whole.names and pieces.rows_per_file == whole.rows_per_file
    for a, b in zip(pieces.columns, whole.columns, strict=True):
        assert a.kind == b.kind and a.category_list() == b.category_list(), a.name
        assert a.values.tobytes() == b.values.tobytes(), a.name
