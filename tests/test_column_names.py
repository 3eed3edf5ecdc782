"""Column names that collide with ml8s's own names, or that the normalization rules make hard to name.

Defect 3: a column named like a feature-matrix column (``__split__``, ``__target__``) or like a name
the encoding generates (``cat=a`` beside a categorical ``cat`` holding ``a``; ``x__missing`` beside a
numeric ``x`` with gaps) is a DataError naming the columns, before anything is written. Defect 7:
a column whose name holds commas can be excluded and targeted, and a header ``" Label "`` can be
targeted by ``TARGET_COLUMN=Label``; the canonical config stays as SPEC §2 normalizes it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import make_context

from ml8s.context.run import RunContext
from ml8s.contract import layout
from ml8s.data.dataset import load_dataset
from ml8s.errors import DataError
from ml8s.features.column_names import RESERVED_COLUMNS
from ml8s.features.prepared import prepare
from ml8s.features.rules import encode
from ml8s.pipeline.features import SPLIT, TARGET
from ml8s.pipeline.snapshot import snapshot


def _data(tmp_path: Path, header: str, row: str, rows: int = 40) -> Path:
    """A CSV whose rows are ``row`` formatted with ``i`` (``i_half``: i // 2; ``c``, a two-class label)."""
    data = tmp_path / "data"
    data.mkdir()
    lines = [header] + [row.format(i=i, i_half=i // 2, c="yn"[i % 2], k="ab"[i % 3 % 2]) for i in range(rows)]
    (data / "part.csv").write_text("\n".join(lines) + "\n")
    return data


def _written(root: Path) -> list[str]:
    runs = root / layout.RUNS_DIR
    return sorted(str(p.relative_to(runs)) for p in runs.rglob("*") if p.is_file()) if runs.exists() else []


def _fails_before_writing(ctx: RunContext, root: Path, *needles: str) -> str:
    with pytest.raises(DataError) as caught:
        snapshot(ctx, ctx.open_store())
    message = str(caught.value)
    for needle in needles:
        assert needle in message, f"{needle!r} not in {message!r}"
    assert "\n" not in message
    assert _written(root) == []
    return message


@pytest.mark.parametrize("reserved", sorted(RESERVED_COLUMNS))
def test_reserved_matrix_names_are_rejected_before_writing(tmp_path: Path, reserved: str) -> None:
    data = _data(tmp_path, f"x,{reserved},label", "{i},{i},{c}")
    root = tmp_path / "root"
    ctx = make_context(data, root, TARGET_COLUMN="label")
    _fails_before_writing(ctx, root, f"column {reserved!r}", "reserved", "EXCLUDE_COLUMNS")

    excluded = make_context(data, root, TARGET_COLUMN="label", EXCLUDE_COLUMNS=reserved)
    assert [c.name for c in prepare(load_dataset(excluded.fingerprint), excluded.params).columns] == ["x"]


def test_reserved_names_are_the_matrix_names() -> None:
    assert {TARGET, SPLIT} == RESERVED_COLUMNS


def test_one_hot_name_equal_to_a_column_names_both(tmp_path: Path) -> None:
    data = _data(tmp_path, "cat,cat=a,label", "{k},{i},{c}")
    root = tmp_path / "root"
    message = _fails_before_writing(make_context(data, root, TARGET_COLUMN="label"), root, "'cat=a'", "'cat'")
    assert "one-hot" in message


def test_missing_indicator_equal_to_a_column_names_both(tmp_path: Path) -> None:
    rows = "{i},1{i},{c}"
    data = _data(tmp_path, "x,x__missing,label", rows)
    (data / "part.csv").write_text((data / "part.csv").read_text() + ",5,y\n")  # x has a gap: x__missing made
    root = tmp_path / "root"
    message = _fails_before_writing(make_context(data, root, TARGET_COLUMN="label"), root, "'x__missing'", "'x'")
    assert "missing-value indicator" in message


def test_two_generated_names_that_collide_name_both_columns(tmp_path: Path) -> None:
    data = _data(tmp_path, "a,a=b,label", "b=c,c,{c}")  # a one-hot 'a=b=c' twice
    root = tmp_path / "root"
    _fails_before_writing(make_context(data, root, TARGET_COLUMN="label"), root, "'a=b=c'", "'a'", "'a=b'")


def test_a_column_with_commas_can_be_excluded_and_targeted(tmp_path: Path) -> None:
    # two rows a value: a target of one row per value is refused (test_features.py, regression target)
    data = _data(tmp_path, 'x,"lat, lng",label', '{i},"{i_half}.5, 7",{c}')
    ctx = make_context(data, tmp_path / "root", TARGET_COLUMN="label", EXCLUDE_COLUMNS="lng,lat")
    assert ctx.identity.canonical_config["exclude_columns"] == ["lat", "lng"]  # SPEC §2 rule 5, unchanged
    prepared = prepare(load_dataset(ctx.fingerprint), ctx.params)
    assert [c.name for c in prepared.columns] == ["x"]
    assert prepared.dropped == {"lat, lng": "EXCLUDE_COLUMNS"}

    # one row held out: a class of two rows both held out is refused (test_features.py, no training row)
    targeted = make_context(data, tmp_path / "root", TARGET_COLUMN="lat,lng", TEST_SIZE="0.025")
    assert targeted.identity.canonical_config["target_column"] == ["lat", "lng"]
    prepared = prepare(load_dataset(targeted.fingerprint), targeted.params)
    assert prepared.target_column == "lat, lng"
    assert len(prepared.classes) == 20


def test_excluding_part_of_a_comma_name_is_an_unknown_column(tmp_path: Path) -> None:
    data = _data(tmp_path, 'x,"lat,lng",label', '{i},"{i},7",{c}')
    ctx = make_context(data, tmp_path / "root", TARGET_COLUMN="label", EXCLUDE_COLUMNS="lat")
    _fails_before_writing(ctx, tmp_path / "root", "EXCLUDE_COLUMNS", "'lat'", "not columns of the data")


def test_a_padded_header_is_targeted_by_its_trimmed_name(tmp_path: Path) -> None:
    data = _data(tmp_path, "x, Label ", "{i},{c}")
    ctx = make_context(data, tmp_path / "root", TARGET_COLUMN=" Label ")
    assert ctx.identity.canonical_config["target_column"] == "Label"
    prepared = prepare(load_dataset(ctx.fingerprint), ctx.params)
    matrix, features = encode(prepared, ctx.params)
    assert prepared.target_column == " Label " and prepared.classes == ("n", "y")
    assert [f["name"] for f in features] == ["x"] and matrix.shape == (40, 1)


def test_two_headers_that_trim_alike_are_ambiguous(tmp_path: Path) -> None:
    data = _data(tmp_path, "x, Label,Label ", "{i},{c},{c}")
    root = tmp_path / "root"
    _fails_before_writing(make_context(data, root, TARGET_COLUMN="Label"), root, "' Label'", "'Label '", "ambiguous")


def test_exact_name_wins_over_a_trimmed_one(tmp_path: Path) -> None:
    data = _data(tmp_path, "x,Label, Label", "{i},{c},{i}")
    ctx = make_context(data, tmp_path / "root", TARGET_COLUMN="Label")
    prepared = prepare(load_dataset(ctx.fingerprint), ctx.params)
    assert prepared.target_column == "Label"
    assert json.dumps(sorted(c.name for c in prepared.columns)) == json.dumps([" Label", "x"])
