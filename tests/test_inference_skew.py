"""Training/serving skew: a run's own training rows, predicted through every inference entry point, give the
matrix training wrote, cell kinds whose reading depends on the source column's kind included.

The case that broke: a numeric column with stray text whose only kept feature is its ``__missing`` indicator
(MAX_FEATURES dropped its value). Training read the stray text as missing (indicator 1); the transform typed
such an indicator-only column as text, where any text is present (indicator 0).
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import onnxruntime
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import make_context
from mlflow_support import artifact_dir, train_run

from ml8s.cli.main import main
from ml8s.context.publish import local_path
from ml8s.contract import layout
from ml8s.errors import PredictionInputError
from ml8s.inference import Predictor, RawTransform, read_run_files
from ml8s.inference.cells import read_cells
from ml8s.inference.csv_rows import read_csv_columns
from ml8s.inference.output import stray_numbers
from ml8s.inference.predictor import probabilities
from ml8s.pipeline.features import compute_features

STRAY = {4: "approx. 3", 50: "approx. 3", 77: "TRUE"}  # row -> the numeric column's stray text


def _write(directory: Path) -> Path:
    """``amount``: tiny numbers (a variance below its indicator's), a third blank, three stray cells (under 5%
    of its present ones), one of them a boolean's spelling; ``flag``: booleans, nearly all false, a quarter
    blank. MAX_FEATURES=2 keeps the two ``__missing`` indicators alone."""
    lines = ["amount,flag,churned"]
    for n in range(120):
        amount = STRAY.get(n, "" if n % 3 == 0 else f"0.00{n % 10}")
        flag = "" if n % 4 == 1 else (" True" if n == 2 else "false")
        lines.append(f"{amount},{flag},{'yes' if n % 2 else 'no'}")
    directory.mkdir(parents=True)
    (directory / "part.csv").write_text("\n".join(lines) + "\n")
    return directory / "part.csv"


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


def _features(tmp_path: Path) -> tuple[RawTransform, np.ndarray, Path]:
    path = _write(tmp_path / "data")
    ctx = make_context(path.parent, tmp_path / "root", MAX_FEATURES="2")
    out = tmp_path / "features"
    compute_features(ctx.spec, str(out))
    schema = (out / local_path("", layout.FEATURE_SCHEMA)).read_bytes()
    table = pq.read_table(out / local_path("", layout.FEATURE_MATRIX))
    transform = RawTransform.from_schema(schema, "feature_schema.json")
    matrix = np.column_stack([table.column(name).to_numpy() for name in transform.feature_names])
    return transform, matrix.astype(np.float32), path


def test_every_entry_point_reads_the_training_rows_as_training_did(tmp_path: Path) -> None:
    transform, matrix, path = _features(tmp_path)
    assert transform.feature_names == ("amount__missing", "flag__missing")
    assert [matrix[n, 0] for n in STRAY] == [1.0] * len(STRAY)  # training: the stray text is missing
    rows = _rows(path)
    np.testing.assert_array_equal(transform.encode(rows), matrix)  # rows as mappings: the serving client
    by_column = {name: [row[name] for row in rows] for name in ("amount", "flag")}
    np.testing.assert_array_equal(transform.encode_values(by_column, len(rows)), matrix)  # the MLflow pyfunc
    table = read_csv_columns(path.read_bytes(), "part.csv")  # ml8s predict
    typed = transform.typed_cells(table.cells)
    np.testing.assert_array_equal(transform.encode_typed(typed, table.rows), matrix)
    read = read_cells([pa.table(by_column)], ["amount", "flag"])  # a warm start's generations, Parquet text
    np.testing.assert_array_equal(transform.encode_cells(read.cells, read.rows, read.failed), matrix)
    # the stray text is counted as it is for a numeric column with its value kept
    (warning,) = stray_numbers(transform, table.cells, typed)
    assert (warning.column, warning.cells, warning.examples) == ("amount", 3, ("TRUE", "approx. 3"))


def test_an_indicator_only_column_reads_each_cell_kind_as_training_would(tmp_path: Path) -> None:
    transform, _, _ = _features(tmp_path)
    cells = ["", " NA ", "7", " -.5e1 ", "words", "TRUE", "false"]
    # amount held stray text in training (the schema records it): numeric, a boolean's spelling is stray text.
    # flag held none: numeric or boolean, the schema cannot say; a number and true/false are values of one of
    # them, other text is missing as a numeric column's stray text is.
    rows = [{"amount": cell, "flag": cell} for cell in cells]
    encoded = transform.encode(rows)
    assert encoded[:, 0].tolist() == [1.0, 1.0, 0.0, 0.0, 1.0, 1.0, 1.0]
    assert encoded[:, 1].tolist() == [1.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.0]
    for column in ("amount", "flag"):  # as training refuses a non-finite number
        with pytest.raises(PredictionInputError, match=rf"column '{column}' has 'inf' in row 2 \(of 2\)"):
            transform.encode([{"amount": "1", "flag": "1"}, {"amount": "1", "flag": "1", column: "inf"}])


def test_ml8s_predict_and_the_pyfunc_on_the_training_file_score_the_training_matrix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import mlflow.pyfunc
    import pandas as pd

    from ml8s.inference.pyfunc import save_model_dir

    path = _write(tmp_path / "data")
    ctx = make_context(path.parent, tmp_path / "root", MAX_FEATURES="2")
    train_run(ctx)
    ctx.open_store().put_if_absent(ctx.key(layout.SUCCESS_MARKER), b"")
    run = artifact_dir(tmp_path / "root", ctx.run_id)
    names = RawTransform.from_schema((run / layout.FEATURE_SCHEMA).read_bytes(), "schema").feature_names
    table = pq.read_table(run / layout.FEATURE_MATRIX)
    matrix = np.column_stack([table.column(name).to_numpy() for name in names]).astype(np.float32)
    session = onnxruntime.InferenceSession(str(run / layout.model_export("onnx")), providers=["CPUExecutionProvider"])
    (logits,) = session.run(["logits"], {"features": matrix})
    expected = probabilities(np.asarray(logits, dtype=np.float32))
    files = read_run_files(f"file://{tmp_path / 'root'}", ctx.run_id)
    np.testing.assert_array_equal(Predictor(files).predict(_rows(path)).probabilities, expected)  # serving's
    save_model_dir(str(tmp_path / "model"), files)
    frame = mlflow.pyfunc.load_model(str(tmp_path / "model")).predict(pd.read_csv(path))  # pandas' own typing
    np.testing.assert_array_equal(frame[["probability_no", "probability_yes"]].to_numpy(), expected)
    capsys.readouterr()
    args = ["--run", ctx.run_id, "--root", str(tmp_path / "root"), "--precision", "full", "--input", str(path)]
    assert main(["predict", *args]) == 0
    out, err = capsys.readouterr()
    got = [[float(p) for p in line.split(",")[1:]] for line in out.splitlines()[1:]]
    np.testing.assert_array_equal(np.asarray(got), expected)
    assert "column 'amount' holds 77 numbers and 3 cell(s) of other text" in err
