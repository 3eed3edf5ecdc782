"""A warm start's drift report reads its generations column by column (Arrow, no dict per row): the typed
columns, row count and errors are those of reading the same files as rows (``to_pylist``), labelled rows
only, through ``RawTransform.typed_columns``, with CSV text and typed Parquet files mixed."""

from __future__ import annotations

import datetime
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from test_inference_rules import _dataset, _train

from ml8s.data.dataset import Column, parse_file
from ml8s.data.fingerprint import Fingerprint, fingerprint_local
from ml8s.data.sources import read_verified
from ml8s.errors import PredictionInputError
from ml8s.inference import RawTransform
from ml8s.lineage.drift import _labelled_columns


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


@pytest.mark.parametrize(
    "change",
    [
        # a later file lacks 'active' while an earlier one holds a value no cell can be ('amount', sorted after)
        {
            "g2.parquet": {"amount": pa.array([datetime.date(2026, 1, 1)] * 4)},
            "g5.csv": "amount,colour,kind,y\n1,red,m00,no\n",
        },
        # one column: its bad value comes before the file that lacks it
        {
            "g2.parquet": {"active": pa.array([datetime.date(2026, 1, 1)] * 4)},
            "g5.csv": "amount,colour,kind,y\n1,red,m00,no\n",
        },
        # a kind mismatch in a text column, then a value no cell can be in a later column
        {"g1.csv": "amount,active,colour,kind,y\n1,maybe,red,m00,yes\n", "g2.parquet": {"kind": pa.array([b"x"] * 4)}},
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
