"""CSV files as spreadsheets and Windows tools write them train like plain ones.

A UTF-8 byte order mark (Excel's "CSV UTF-8") made the first column's name differ between the header read
for typing (which kept the mark) and Arrow's parse (which skips it): the run died with an INTERNAL_ERROR
from inside Arrow. CRLF line ends are covered too.
"""

from __future__ import annotations

import json
from pathlib import Path

from conftest import make_context, write_small_churn

from ml8s.context.publish import local_path
from ml8s.contract import layout
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
