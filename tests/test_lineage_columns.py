"""A warm start reads its generations column by column (Arrow, no dict per row), for its drift report and its
encoded generations: the typed columns, row count, matrix, classes and errors are those of reading the same
files as rows (``to_pylist``) through ``RawTransform.typed_columns``, with CSV text and typed Parquet files
mixed."""

from __future__ import annotations

import datetime
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from test_inference_rules import HEADER, _dataset, _train

from ml8s.contract.training_state import Generation
from ml8s.data.dataset import Column, parse_file
from ml8s.data.fingerprint import Fingerprint, fingerprint_local
from ml8s.data.sources import read_verified
from ml8s.errors import LineageDataError, PredictionInputError
from ml8s.inference import RawTransform
from ml8s.inference.cells import read_cells, row_cells
from ml8s.lineage.columns import has_label, typed_columns
from ml8s.lineage.drift import drift_report
from ml8s.lineage.history import _class_index, _split, encode_generation, held_out_tables


def _by_rows(fingerprint: Fingerprint, transform: RawTransform) -> tuple[dict[str, Column], int]:
    """The reference: every file's rows as mappings, the labelled ones typed as rows."""
    rows: list[dict[str, object]] = []
    for entry, data in read_verified(fingerprint):
        rows += parse_file(entry, data, fingerprint.data_root).to_pylist()
    rows = [row for row in rows if row.get(transform.target_column) not in (None, "")]
    return transform.typed_columns(rows), len(rows)


def _generations(data: Path) -> None:
    """CSV text with blank labels; a typed Parquet file (floats with NaN and None, booleans, dictionary text,
    labels missing); a CSV file without the label column (no row of it counts); a Parquet file lacking an input
    column whose rows are all unlabelled (no row to lack it)."""
    (data / "g1.csv").write_text("amount,active,colour,kind,y\n1.5, TRUE,red,m00,yes\n2,false,,m01,\n,,blue,zz,no\n")
    table = pa.table(
        {
            "amount": pa.array([0.25, float("nan"), None, 1e300], type=pa.float64()),
            "active": pa.array([True, None, False, True]),
            "colour": pa.array(["green", "red", None, "purple"]).dictionary_encode(),
            "kind": pa.array(["m02", "a1", "m03", "m02"]),
            "y": pa.array(["no", None, "yes", ""]),
        }
    )
    pq.write_table(table, data / "g2.parquet")
    (data / "g3.csv").write_text("amount,active,colour,kind\n3,true,red,m00\n")
    pq.write_table(pa.table({"amount": [1.0], "active": [True], "kind": ["m00"], "y": [None]}), data / "g4.parquet")


def _labelled_columns(fingerprint: Fingerprint, transform: RawTransform) -> tuple[dict[str, Column], int]:
    tokens = {entry.token for entry in fingerprint.entries}
    return typed_columns(fingerprint, tokens, transform, has_label(transform.target_column))


def _kept_rows(
    generation: Generation, fingerprint: Fingerprint, transform: RawTransform
) -> tuple[list[dict[str, object]], list[int]]:
    """The reference: the generation's rows as mappings, those with a class kept, and their class indices."""
    rows: list[dict[str, object]] = []
    for entry, data in read_verified(fingerprint):
        rows += parse_file(entry, data, fingerprint.data_root).to_pylist()
    labels = [_class_index(row.get(transform.target_column), transform, generation.index) for row in rows]
    kept = [(row, label) for row, label in zip(rows, labels, strict=True) if label is not None]
    if not kept:
        raise LineageDataError(f"generation {generation.index} ({generation.partition}) has no row with a target")
    return [row for row, _ in kept], [label for _, label in kept]


def _encoded_by_rows(fingerprint: Fingerprint, transform: RawTransform) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The reference of ``encode_generation``: its rows' path (the rows with a class, encoded as rows)."""
    generation = _generation(fingerprint)
    kept, labels = _kept_rows(generation, fingerprint, transform)
    try:
        x = transform.encode(kept)
    except PredictionInputError as exc:
        raise LineageDataError(f"does not fit the lineage's features: {exc.message}") from exc
    return x, np.array(labels, dtype=np.int64), _split(len(kept), 0.25, 7, generation.index)


def _generation(fingerprint: Fingerprint) -> Generation:
    return Generation(index=1, partition="", files=sorted(entry.token for entry in fingerprint.entries))


def _same(left: dict[str, Column], right: dict[str, Column]) -> None:
    assert sorted(left) == sorted(right)
    for name, column in left.items():
        other = right[name]
        assert (column.kind, column.category_list()) == (other.kind, other.category_list()), name
        np.testing.assert_array_equal(column.values, other.values)


def test_columns_read_as_the_rows_would_be(tmp_path: Path) -> None:
    data = tmp_path / "data"
    _dataset(data)
    transform, _, _ = _train(data)
    _generations(data)
    fingerprint = fingerprint_local(str(data))
    columns, rows = _labelled_columns(fingerprint, transform)
    expected, expected_rows = _by_rows(fingerprint, transform)
    assert rows == expected_rows == 110 + 2 + 2  # part.csv, g1's two labelled rows, g2's two
    _same(columns, expected)
    encoded = encode_generation(_generation(fingerprint), fingerprint, transform, 7, 0.25)
    x, y, split = _encoded_by_rows(fingerprint, transform)
    assert len(y) == rows  # no target here is a missing-value token: both keep the same rows
    np.testing.assert_array_equal(encoded.x, x)
    np.testing.assert_array_equal(encoded.y, y)
    np.testing.assert_array_equal(encoded.split, split)
    # the held-out rows a promotion evaluates: the same cells of every column, the same labels
    kept, labels = _kept_rows(_generation(fingerprint), fingerprint, transform)
    chosen = [i for i in range(len(kept)) if split[i] == 1]
    tables, classes = held_out_tables(_generation(fingerprint), fingerprint, transform, 7, 0.25)
    assert classes == [transform.classes[labels[i]] for i in chosen]
    names = ["active", "amount", "colour", "kind", "y"]
    read = read_cells(tables, names)
    assert read.rows == len(chosen) and not read.failed
    for name in names:
        assert read.cells[name].to_pylist() == row_cells([kept[i] for i in chosen], name).to_pylist(), name


@pytest.mark.parametrize(
    "change",
    [
        # a later file lacks 'active' while an earlier one holds a value no cell can be ('amount', sorted after)
        {
            "g2.parquet": {"amount": pa.array([datetime.datetime(2026, 1, 1)] * 4)},
            "g5.csv": "amount,colour,kind,y\n1,red,m00,no\n",
        },
        # one column: its bad value comes before the file that lacks it
        {
            "g2.parquet": {"active": pa.array([datetime.datetime(2026, 1, 1)] * 4)},
            "g5.csv": "amount,colour,kind,y\n1,red,m00,no\n",
        },
        # a kind mismatch in a text column, then a value no cell can be in a later column
        {
            "g1.csv": "amount,active,colour,kind,y\n1,maybe,red,m00,yes\n",
            "g2.parquet": {"kind": pa.array([datetime.time(12)] * 4)},
        },
    ],
)
def test_errors_are_the_rows_first_error(tmp_path: Path, change: dict[str, object]) -> None:
    data = tmp_path / "data"
    _dataset(data)
    transform, _, _ = _train(data)
    _generations(data)
    for name, content in change.items():
        if isinstance(content, str):
            (data / name).write_text(content)
        else:
            assert isinstance(content, dict)
            table = pq.read_table(data / name)
            for column, values in content.items():
                table = table.set_column(table.column_names.index(column), column, values)
            pq.write_table(table, data / name)
    fingerprint = fingerprint_local(str(data))
    with pytest.raises(PredictionInputError) as by_rows:
        _by_rows(fingerprint, transform)
    with pytest.raises(PredictionInputError) as by_columns:
        _labelled_columns(fingerprint, transform)
    assert by_columns.value.message == by_rows.value.message
    with pytest.raises(LineageDataError) as encoded_by_rows:
        _encoded_by_rows(fingerprint, transform)
    with pytest.raises(LineageDataError) as encoded:
        encode_generation(_generation(fingerprint), fingerprint, transform, 7, 0.25)
    assert encoded.value.message.endswith(encoded_by_rows.value.message)


@pytest.mark.parametrize(
    ("targets", "message"),
    [
        (["no", "maybe", "yes", "perhaps"], "has 'maybe', not one of the lineage's classes"),  # the first in row order
        ([None, None, None, None], "has no row with a target"),
        (["NA", " ", None, "null"], "has no row with a target"),  # missing-value tokens are no label
    ],
)
def test_encoding_refuses_classes_as_the_rows_do(tmp_path: Path, targets: list[str | None], message: str) -> None:
    data = tmp_path / "data"
    _dataset(data)
    transform, _, _ = _train(data)
    generation_dir = tmp_path / "generation"
    generation_dir.mkdir()
    table = pa.table({"amount": [1.0] * 4, "active": [True] * 4, "colour": ["red"] * 4, "kind": ["m00"] * 4})
    # a dictionary in another order than the rows' (sorted, reversed): the first bad class is the first row's
    dictionary = pa.array(sorted({t for t in targets if t is not None}, reverse=True), type=pa.string())
    indices = pa.array([None if t is None else dictionary.to_pylist().index(t) for t in targets], type=pa.int32())
    y = pa.DictionaryArray.from_arrays(indices, dictionary)
    pq.write_table(table.append_column("y", y), generation_dir / "g.parquet")
    assert pq.read_table(generation_dir / "g.parquet").column("y").type == y.type
    fingerprint = fingerprint_local(str(generation_dir))
    with pytest.raises(LineageDataError, match=message) as by_rows:
        _encoded_by_rows(fingerprint, transform)
    with pytest.raises(LineageDataError) as encoded:
        encode_generation(_generation(fingerprint), fingerprint, transform, 7, 0.25)
    assert encoded.value.message == by_rows.value.message


def test_a_new_generation_with_a_category_spelled_like_a_bucket_is_refused(tmp_path: Path) -> None:
    """A cold start refuses a category '__missing__' or '__other__'; a warm start's new generation, encoded by the
    lineage's frozen transform, put it into that bucket ('__missing__' as a missing value) and trained on it. Its
    drift report (bootstrap) and its encoding both refuse it, naming the generation, column and row."""
    data = tmp_path / "data"
    _dataset(data)
    transform, _, _ = _train(data)
    generation_dir = tmp_path / "generation"
    generation_dir.mkdir()
    rows = ["1,true,red,m00,yes", "2,false,blue,m01,", "3,true,__missing__,m02,no"]  # the blank target is no row
    (generation_dir / "g.csv").write_text("\n".join([HEADER, *rows]) + "\n")
    fingerprint = fingerprint_local(str(generation_dir))
    generation = Generation(index=4, partition="g.csv", files=[fingerprint.entries[0].token])
    said = "column 'colour' has '__missing__' in row 2 (of 2), the name of the one-hot bucket of missing values"
    with pytest.raises(LineageDataError) as encoded:
        encode_generation(generation, fingerprint, transform, 7, 0.25)
    assert encoded.value.message.startswith("generation 4 (g.csv) does not fit the lineage's features: " + said)
    with pytest.raises(LineageDataError) as drift:
        drift_report([generation], fingerprint, transform)
    assert drift.value.message.startswith(f"generations [4]: {said}")
