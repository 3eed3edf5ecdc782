"""Raw-row inference on a trained run (no MLflow): `ml8s predict`, the ONNX metadata alone, altered files."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import safetensors.torch
from conftest import make_context, write_small_churn
from mlflow_support import artifact_dir, raw_rows, train_run, write_rows
from serving_support import chain_at, meta

from ml8s.chain import ReadTrust
from ml8s.cli.main import main
from ml8s.context.run import RunContext
from ml8s.contract import layout
from ml8s.errors import InferenceError, IntegrityError, PredictionInputError
from ml8s.inference import ModelFiles, Predictor, read_model_dir, read_onnx_metadata, read_run_files
from ml8s.inference.cells import read_cells
from ml8s.inference.csv_rows import read_csv_columns
from ml8s.serving import ClientConfig, DeltaProducer, InferenceClient

ONNX = layout.model_export("onnx")
HEADER_ONLY_PREDICTIONS = "predicted_class,probability_no,probability_yes\n"


@dataclass(frozen=True)
class Trained:
    data: Path
    root: Path
    onnx: RunContext
    safetensors: RunContext

    def files(self, rel: str, run: RunContext | None = None) -> Path:
        return artifact_dir(self.root, (run or self.onnx).run_id) / rel


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Trained:
    """One configuration trained twice, exported as ONNX and as safetensors; each marked complete (the marker
    is finalization's last write: MLflow and the manifest do not matter to inference)."""
    base = tmp_path_factory.mktemp("inference")
    data = write_small_churn(base / "data")
    runs = [make_context(data, base / "root", model_format=fmt) for fmt in ("onnx", "safetensors")]
    for ctx in runs:
        train_run(ctx)
        ctx.open_store().put_if_absent(ctx.key(layout.SUCCESS_MARKER), b"")
    return Trained(data, base / "root", *runs)


@pytest.fixture
def copy(trained: Trained, tmp_path: Path) -> Trained:
    """A copy of the trained runs' root that a test may alter."""
    shutil.copytree(trained.root, tmp_path / "root")
    return Trained(trained.data, tmp_path / "root", trained.onnx, trained.safetensors)


def _predict_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(["predict", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_raw_rows_reproduce_the_training_matrix(trained: Trained) -> None:
    predictor = Predictor(read_run_files(f"file://{trained.root}", trained.onnx.run_id))
    table = pq.read_table(trained.files(layout.FEATURE_MATRIX))
    matrix = np.column_stack([table.column(name).to_numpy() for name in predictor.transform.feature_names])
    np.testing.assert_array_equal(predictor.transform.encode(raw_rows(trained.data)), matrix)


@pytest.mark.parametrize("fmt", ["onnx", "safetensors"])
def test_text_columns_predict_what_rows_predict(trained: Trained, fmt: str) -> None:
    """``ml8s predict`` reads its file as text columns (no dict per row): the same matrix and predictions as the
    rows of the same file, for both model formats."""
    run = trained.onnx if fmt == "onnx" else trained.safetensors
    predictor = Predictor(read_run_files(f"file://{trained.root}", run.run_id))
    rows = raw_rows(trained.data)
    rows_csv = (trained.data / next(iter(sorted(p.name for p in trained.data.glob("*.csv"))))).read_bytes()
    table = read_csv_columns(rows_csv, "part.csv")
    first = rows[: table.rows]
    np.testing.assert_array_equal(
        predictor.transform.encode_cells(table.cells, table.rows), predictor.transform.encode(first)
    )
    by_cells, by_rows = predictor.predict_cells(table.cells, table.rows), predictor.predict(first)
    assert by_cells.labels == by_rows.labels and by_cells.classes == by_rows.classes
    np.testing.assert_array_equal(by_cells.probabilities, by_rows.probabilities)
    empty = read_csv_columns(rows_csv.split(b"\n", 1)[0] + b"\n", "header.csv")
    assert predictor.predict_cells(empty.cells, empty.rows).probabilities.shape == (0, len(predictor.classes))


def test_columns_of_typed_values_predict_what_their_rows_predict(trained: Trained) -> None:
    """The MLflow model's path (a DataFrame's columns, no dict per row): the rows' predictions and errors."""
    predictor = Predictor(read_run_files(f"file://{trained.root}", trained.onnx.run_id))
    rows: list[dict[str, object]] = [dict(row) for row in raw_rows(trained.data)[:40]]
    for n, row in enumerate(rows):  # typed cells, as a DataFrame holds them
        row["tenure"] = None if n % 9 == 0 else float(str(row["tenure"]) or "nan")
    values = {name: [row[name] for row in rows] for name in rows[0]}
    by_values, by_rows = predictor.predict_values(values, len(rows)), predictor.predict(rows)
    assert by_values.labels == by_rows.labels
    np.testing.assert_array_equal(by_values.probabilities, by_rows.probabilities)
    stray = {"tenure": ["x"] * len(rows)}  # text in a numeric column: missing, either way
    with_stray = [{**row, "tenure": "x"} for row in rows]
    by_values, by_rows = predictor.predict_values({**values, **stray}, len(rows)), predictor.predict(with_stray)
    assert by_values.to_csv() == by_rows.to_csv()
    for change in ({"plan": [object()] * len(rows)}, {"tenure": ["1e999"] * len(rows)}):
        with pytest.raises(PredictionInputError) as from_rows:
            predictor.predict([{**row, **{k: v[i] for k, v in change.items()}} for i, row in enumerate(rows)])
        with pytest.raises(PredictionInputError) as from_values:
            predictor.predict_values({**values, **change}, len(rows))
        assert from_values.value.message == from_rows.value.message
    absent = {name: cells for name, cells in values.items() if name != "plan"}
    with pytest.raises(PredictionInputError, match="row 1 has no column 'plan'"):
        predictor.predict_values(absent, len(rows))
    empty = predictor.predict_values({name: [] for name in absent}, 0)
    assert empty.probabilities.shape == (0, len(predictor.classes)) == predictor.predict([]).probabilities.shape


def test_cells_read_from_tables_predict_and_fail_as_their_rows(trained: Trained) -> None:
    """A promotion's held-out rows (tables read column by column, ``read_cells``): the rows' predictions, and
    their first error where a later table lacks a column or holds a value no cell can be."""
    predictor = Predictor(read_run_files(f"file://{trained.root}", trained.onnx.run_id))
    first = pa.Table.from_pylist([dict(row) for row in raw_rows(trained.data)[:30]])
    names = sorted(column.name for column in predictor.transform.inputs)
    for second in (
        first.slice(0, 5),
        first.slice(0, 5).drop_columns(["plan"]),
        first.slice(0, 5).set_column(first.column_names.index("tenure"), "tenure", pa.array([b"x"] * 5)),
    ):
        rows = first.to_pylist() + second.to_pylist()
        read = read_cells([first, second], names)
        try:
            expected = predictor.predict(rows)
        except PredictionInputError as exc:
            with pytest.raises(PredictionInputError) as refused:
                predictor.predict_cells(read.cells, read.rows, read.failed)
            assert refused.value.message == exc.message and "row 31 " in exc.message
            continue
        got = predictor.predict_cells(read.cells, read.rows, read.failed)
        assert got.labels == expected.labels
        np.testing.assert_array_equal(got.probabilities, expected.probabilities)


@pytest.mark.parametrize(
    ("changes", "named"),
    [
        ({2: {"tenure": "1e300"}, 4: {"monthly_charges": "-1e300"}}, "row 3 column 'tenure'"),  # the first row
        ({2: {"tenure": "1e300", "monthly_charges": "1e300"}}, "row 3 column 'monthly_charges'"),  # its first feature
    ],
)
def test_a_value_beyond_float32_names_its_first_row_then_feature(
    trained: Trained, changes: dict[int, dict[str, str]], named: str
) -> None:
    """The matrix is narrowed a feature at a time: the error still names the first row in row order, and in that
    row the first feature in matrix order, with the float64 value before narrowing."""
    predictor = Predictor(read_run_files(f"file://{trained.root}", trained.onnx.run_id))
    rows = [dict(row) for row in raw_rows(trained.data)[:6]]
    for index, change in changes.items():
        rows[index].update(change)
    with pytest.raises(PredictionInputError) as refused, warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # the narrowing's overflow was also printed to stderr
        predictor.predict(rows)
    assert (
        refused.value.message.startswith(named) and "too large for the model's float32 input" in refused.value.message
    )
    source = named.split("'")[1]
    rule = next(r for r in predictor.transform.rules if r.source == source and r.kind == "numeric")
    assert rule.scale_mean is not None and rule.scale_std is not None
    value = (float(rows[int(named.split()[1]) - 1][source]) - rule.scale_mean) / rule.scale_std
    assert f"gives feature {rule.name!r} the value {value:.6g}," in refused.value.message


def test_onnx_metadata_carries_classes_features_and_rules(trained: Trained) -> None:
    meta = read_onnx_metadata(trained.files(ONNX).read_bytes())
    schema = json.loads(trained.files(layout.FEATURE_SCHEMA).read_bytes())
    metadata = json.loads(trained.files(layout.TRAINING_METADATA).read_bytes())
    assert sorted(meta) == [
        "ml8s.classes",
        "ml8s.feature_names",
        "ml8s.feature_rules",
        "ml8s.input",
        "ml8s.output",
        "ml8s.target_column",
    ]
    assert json.loads(meta["ml8s.classes"]) == schema["target"]["classes"] == metadata["model"]["classes"]
    assert json.loads(meta["ml8s.feature_names"]) == metadata["model"]["feature_names"]
    assert json.loads(meta["ml8s.feature_rules"]) == schema["features"]
    assert meta["ml8s.target_column"] == "churned"


def _docs_recipe() -> str:
    """docs/predict.md's "With onnxruntime alone" recipe, as written there."""
    text = (Path(__file__).parent.parent / "docs" / "predict.md").read_text()
    section = text[text.index("## With onnxruntime alone") :]
    code = section[section.index("```python\n") + len("```python\n") :]
    return code[: code.index("\n```")]


def test_plain_onnxruntime_from_the_metadata_predicts_the_same(
    trained: Trained, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The docs' recipe (nothing but the ONNX file, numpy and onnxruntime), run as written on CSV text: the same
    probabilities as ``ml8s predict``, missing-value tokens and a numeric column's stray text included (the
    recipe read only an empty cell as missing, and failed on stray text)."""
    rows = raw_rows(trained.data)[:50]
    odd = {"customer_id": "N", "tenure": "", "monthly_charges": " 80 ", "plan": "", "auto_pay": "TRUE", "churned": ""}
    rows.append(odd)
    rows.append({**odd, "tenure": "NA", "monthly_charges": " ? ", "plan": "null", "auto_pay": "N/A"})
    rows.append({**odd, "tenure": "twelve", "monthly_charges": "1_000", "plan": "#N/A", "auto_pay": "false"})
    rows.append({**odd, "tenure": "+.5e1", "monthly_charges": "None", "plan": "<NA>", "auto_pay": "NaN"})
    predictor = Predictor(read_run_files(f"file://{trained.root}", trained.onnx.run_id))
    expected = predictor.predict(rows).probabilities
    shutil.copyfile(trained.files(ONNX), tmp_path / "model.onnx")
    write_rows(tmp_path / "rows.csv", rows)
    monkeypatch.chdir(tmp_path)
    recipe: dict[str, object] = {}
    exec(compile(_docs_recipe(), "docs/predict.md", "exec"), recipe)
    np.testing.assert_allclose(np.asarray(recipe["probabilities"]), expected, rtol=0, atol=0)
    assert capsys.readouterr().out.startswith("[")  # the recipe's labels


def test_labelling_is_deterministic_across_processes(trained: Trained, tmp_path: Path) -> None:
    """Labelling the exported model again (in two fresh processes) gives the exported bytes exactly."""
    schema = trained.files(layout.FEATURE_SCHEMA)
    code = "import sys; from ml8s.inference import label_onnx; label_onnx(sys.argv[1], sys.argv[2])"
    outputs = []
    for i in range(2):
        target = tmp_path / f"model-{i}.onnx"
        shutil.copyfile(trained.files(ONNX), target)
        subprocess.run([sys.executable, "-c", code, str(target), str(schema)], check=True, timeout=120)
        outputs.append(target.read_bytes())
    assert outputs[0] == outputs[1] == trained.files(ONNX).read_bytes()


def test_ml8s_predict_writes_csv_to_stdout_or_a_file(
    trained: Trained, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    rows = raw_rows(trained.data)[:20]
    rows_csv = write_rows(tmp_path / "rows.csv", rows)
    predictions = Predictor(read_run_files(f"file://{trained.root}", trained.onnx.run_id)).predict(rows)
    args = ["--run", trained.onnx.run_id, "--root", str(trained.root), "--precision", "full"]

    code, out, _ = _predict_cli(capsys, *args, "--input", str(rows_csv))
    assert code == 0 and out == predictions.to_csv()
    assert out.splitlines()[0] == "predicted_class,probability_no,probability_yes" and len(out.splitlines()) == 21
    # by default, six decimals
    code, rounded, _ = _predict_cli(capsys, *args[:-2], "--input", str(rows_csv))
    first = [float(p) for p in predictions.probabilities[0]]
    assert code == 0 and rounded.splitlines()[1].split(",")[1:] == [f"{p:.6f}" for p in first]

    target = tmp_path / "out.csv"
    target.write_text("previous content")
    code, out, _ = _predict_cli(capsys, *args, "--input", str(rows_csv), "--output", str(target))
    assert (code, out) == (0, "") and target.read_text() == predictions.to_csv()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.csv", "rows.csv"]

    # A FIFO (as /dev/stdout or a device would be) is written in place, never renamed over: as root, the
    # rename used to replace /dev/full and /dev/stdout themselves with regular files.
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # both ends held here: no open blocks, no read hangs
    holder = os.open(fifo, os.O_WRONLY)
    try:
        code, out, _ = _predict_cli(capsys, *args, "--input", str(rows_csv), "--output", str(fifo))
        os.close(holder)  # the command's writes sit in the pipe's buffer (64 KiB, more than these rows)
        received = os.read(reader, 1 << 16)
    finally:
        os.close(reader)
    assert (code, out) == (0, "") and received.decode() == predictions.to_csv()
    assert stat.S_ISFIFO(fifo.lstat().st_mode)
    fifo.unlink()

    link = tmp_path / "link.csv"  # a symlink: its target is replaced, with its permissions; the link stays
    target.chmod(0o640)
    link.symlink_to(target.name)
    header_only = tmp_path / "header.csv"  # every column, no row: no prediction, and no error
    header_only.write_text(rows_csv.read_text().splitlines()[0] + "\n")
    code, out, _ = _predict_cli(capsys, *args, "--input", str(header_only), "--output", str(link))
    assert (code, out) == (0, "") and link.is_symlink() and target.read_text() == HEADER_ONLY_PREDICTIONS
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    link.unlink()

    code, out, _ = _predict_cli(capsys, *args, "--input", str(header_only))
    assert code == 0 and out == HEADER_ONLY_PREDICTIONS
    header_only.unlink()

    class Stdin:
        buffer = rows_csv.open("rb")

    monkeypatch.setattr(sys, "stdin", Stdin)
    code, out, _ = _predict_cli(capsys, *args, "--input", "-")
    assert code == 0 and out == predictions.to_csv()


@pytest.mark.parametrize(
    ("case", "code", "message"),
    [
        ("bad run id", 2, "is not a RUN_ID"),
        ("unknown run", 1, "ml8s: INFERENCE_ERROR: run 000000000000 at "),
        ("no input file", 1, "ml8s: PREDICTION_INPUT_INVALID: cannot read --input"),
        (
            "bad cell",
            1,
            "ml8s: PREDICTION_INPUT_INVALID: column 'tenure' has '1e999' in row 2 (of 2), which is not a finite",
        ),
        (
            "bucket name",
            1,
            "ml8s: PREDICTION_INPUT_INVALID: column 'plan' has '__other__' in row 2 (of 2), the name of the one-hot",
        ),
        ("missing column", 1, "rows.csv has no column(s) ['plan'] in its header"),
        ("header only, missing column", 1, "rows.csv has no column(s) ['plan'] in its header"),
        ("output is input", 1, "ml8s: PREDICTION_INPUT_INVALID: --output "),
        ("output dir absent", 1, "ml8s: INFERENCE_ERROR: cannot write --output"),
        # /dev/zero's shape in 1.1 MiB: refused after the first MiB, where reading on filled the memory
        ("no line end", 1, "rows.csv has no line end in its first 1048576 bytes; expected CSV text"),
    ],
)
def test_ml8s_predict_errors_are_one_line(
    trained: Trained, tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str, code: int, message: str
) -> None:
    rows = raw_rows(trained.data)[:2]
    run, rows_path, output = trained.onnx.run_id, tmp_path / "rows.csv", "-"
    if case == "bad run id":
        run = "not-a-run"
    elif case == "unknown run":
        run = "000000000000"
    elif case == "bad cell":
        rows[1]["tenure"] = "1e999"
    elif case == "bucket name":  # refused by training; was predicted as an unseen plan, after a warning
        rows[1]["plan"] = "__other__"
    elif case == "missing column":
        rows = [{k: v for k, v in row.items() if k != "plan"} for row in rows]
    elif case == "output dir absent":
        output = str(tmp_path / "absent" / "out.csv")
    elif case == "output is input":
        output = str(rows_path)
    if case == "header only, missing column":  # no row to miss it in: the header alone is checked
        rows_path.write_text(",".join(name for name in rows[0] if name != "plan") + "\n")
    elif case == "no line end":
        rows_path.write_bytes(b"a" * (1100 * 1024))
    elif case != "no input file":
        write_rows(rows_path, rows)
    before = rows_path.read_bytes() if rows_path.exists() else b""
    if code == 2:
        with pytest.raises(SystemExit) as exited:
            main(["predict", "--run", run, "--input", str(rows_path)])
        assert exited.value.code == 2 and message in capsys.readouterr().err
        return
    got, out, err = _predict_cli(
        capsys, "--run", run, "--root", str(trained.root), "--input", str(rows_path), "--output", output
    )
    assert (got, out) == (code, "") and err.startswith("ml8s: ") and message in err and len(err.splitlines()) == 1
    assert err.startswith(message) or case in ("missing column", "header only, missing column", "no line end"), err
    if case == "output is input":
        assert "is the --input file" in err and rows_path.read_bytes() == before  # the rows are still there


def test_incomplete_run_is_refused(copy: Trained) -> None:
    (copy.files(layout.SUCCESS_MARKER)).unlink()
    with pytest.raises(InferenceError, match=r"is not complete \(no success.marker\)"):
        read_run_files(f"file://{copy.root}", copy.onnx.run_id)


@pytest.mark.parametrize("where", [0, 0.5, -1])
def test_flipped_model_byte_is_refused(copy: Trained, where: float) -> None:
    path = copy.files(ONNX)
    data = bytearray(path.read_bytes())
    data[int(where * len(data))] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(
        IntegrityError, match=r"model\.onnx has sha256 .*; expected .* as training_metadata\.json records"
    ):
        Predictor(read_run_files(f"file://{copy.root}", copy.onnx.run_id))


def test_truncated_schema_and_garbage_metadata_are_refused(copy: Trained) -> None:
    schema = copy.files(layout.FEATURE_SCHEMA)
    schema.write_bytes(schema.read_bytes()[:-10])
    with pytest.raises(IntegrityError, match=r"feature_schema\.json has sha256"):
        Predictor(read_run_files(f"file://{copy.root}", copy.onnx.run_id))
    copy.files(layout.TRAINING_METADATA).write_bytes(b"\x00garbage")
    with pytest.raises(InferenceError, match=r"training_metadata\.json is not training metadata"):
        read_run_files(f"file://{copy.root}", copy.onnx.run_id)


def test_missing_file_and_mismatched_metadata_are_refused(copy: Trained) -> None:
    metadata_path = copy.files(layout.TRAINING_METADATA)
    metadata = json.loads(metadata_path.read_bytes())
    metadata["model"]["classes"] = ["yes", "no"]
    metadata_path.write_text(json.dumps(metadata))
    with pytest.raises(InferenceError, match=r"records classes \['yes', 'no'\] .* expected those of feature_schema"):
        Predictor(read_run_files(f"file://{copy.root}", copy.onnx.run_id))
    copy.files(ONNX).unlink()
    with pytest.raises(InferenceError, match=r"model/model\.onnx is missing"):
        read_run_files(f"file://{copy.root}", copy.onnx.run_id)
    with pytest.raises(InferenceError, match=r"feature_schema\.json is missing; expected the model's feature_schema"):
        read_model_dir(str(copy.files("model")), "onnx")  # a directory without the three files side by side
    os.mkfifo(copy.files("model") / "feature_schema.json")  # a plain open() waited for a writer: forever
    with pytest.raises(InferenceError, match=r"a FIFO; expected a regular file .*expected the model's feature_schema"):
        read_model_dir(str(copy.files("model")), "onnx")
    (copy.files("model") / "feature_schema.json").unlink()
    (copy.files("model") / "feature_schema.json").mkdir()  # was a raw IsADirectoryError
    with pytest.raises(
        InferenceError, match=r"a directory; expected a regular file .*expected the model's feature_schema"
    ):
        read_model_dir(str(copy.files("model")), "onnx")


def _resealed(trained: Trained, run: RunContext, model: bytes) -> ModelFiles:
    """The run's files with ``model`` as its model, and training metadata recording that model's checksum: files
    that pass the checksums (an edit made consistently, a payload committed so) yet may not load or fit."""
    files = read_run_files(f"file://{trained.root}", run.run_id)
    metadata = json.loads(files.training_metadata)
    rel = layout.model_export(metadata["export"]["format"])
    metadata["artifacts"][rel] = {"sha256": hashlib.sha256(model).hexdigest(), "size": len(model)}
    return files.model_copy(update={"model": model, "training_metadata": json.dumps(metadata).encode()})


@pytest.mark.parametrize(("layers", "units"), [(10**9, 64), (2, 10**7), (3, 60_000)])
def test_a_safetensors_spec_beyond_what_a_run_accepts_is_refused_not_built(
    trained: Trained, layers: int, units: int
) -> None:
    """training_metadata.json edited to 10**9 hidden layers (checksums recomputed: ``predict --run`` reads no
    signature) built a torch layer per hidden layer and never ended; wide ones asked torch for terabytes."""
    files = read_run_files(f"file://{trained.root}", trained.safetensors.run_id)
    metadata = json.loads(files.training_metadata)
    metadata["model"]["spec"].update(hidden_layers=layers, hidden_units=units)
    edited = files.model_copy(update={"training_metadata": json.dumps(metadata).encode()})
    with pytest.raises(InferenceError, match=r"does not load into its recorded spec: model spec .* beyond what a run"):
        Predictor(edited)


def _onnx_of_width(features: int, classes: int) -> bytes:
    weights = onnx.numpy_helper.from_array(np.ones((features, classes), np.float32), "W")
    graph = onnx.helper.make_graph(
        [onnx.helper.make_node("MatMul", ["features", "W"], ["logits"])],
        "g",
        [onnx.helper.make_tensor_value_info("features", onnx.TensorProto.FLOAT, ["rows", features])],
        [onnx.helper.make_tensor_value_info("logits", onnx.TensorProto.FLOAT, ["rows", classes])],
        [weights],
    )
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)])
    model.ir_version = 8
    return bytes(model.SerializeToString())


def test_model_files_that_pass_their_checksums_but_do_not_load_or_fit_are_refused(trained: Trained) -> None:
    """onnxruntime's errors (InvalidProtobuf, InvalidArgument) and safetensors' derive from Exception, not the
    RuntimeError that was caught: a model that did not load or fit was INTERNAL_ERROR, exit 2."""
    with pytest.raises(InferenceError, match=r"model\.onnx cannot be loaded by onnxruntime: .*INVALID_PROTOBUF"):
        Predictor(_resealed(trained, trained.onnx, b"garbage"))
    with pytest.raises(InferenceError, match=r"model\.safetensors does not load into its recorded spec"):
        Predictor(_resealed(trained, trained.safetensors, b"garbage, not safetensors"))
    with pytest.raises(InferenceError, match=r"cannot read an ONNX model's metadata"):
        read_onnx_metadata(b"garbage")
    features = len(Predictor(read_run_files(f"file://{trained.root}", trained.onnx.run_id)).transform.feature_names)
    with pytest.raises(
        InferenceError, match=rf"features is tensor\(float\) \['rows', 3\]; expected .* \[rows, {features}\]"
    ):
        Predictor(_resealed(trained, trained.onnx, _onnx_of_width(3, 2)))
    with pytest.raises(InferenceError, match=r"logits is tensor\(float\) \['rows', 5\]; expected .* \[rows, 2\]"):
        Predictor(_resealed(trained, trained.onnx, _onnx_of_width(features, 5)))


def test_a_chain_version_of_a_safetensors_run_is_served_like_ml8s_predict(trained: Trained, tmp_path: Path) -> None:
    """The serving client looked for model.onnx alone: a MODEL_FORMAT=safetensors version, which `ml8s predict
    --chain` scores with torch, was SERVING_NO_MODEL_GRAPH 'lacks model.onnx'."""
    run = trained.files(layout.TRAINING_METADATA, trained.safetensors).parent
    files = {
        "feature_schema.json": (run / layout.FEATURE_SCHEMA).read_bytes(),
        "training_metadata.json": (run / layout.TRAINING_METADATA).read_bytes(),
        "model.safetensors": (run / layout.model_export("safetensors")).read_bytes(),
    }
    chain = chain_at(f"file://{tmp_path}", "torch-served")
    weights = safetensors.torch.load(files["model.safetensors"])
    DeltaProducer(chain, interval=3).publish_sync(weights, meta("torch-served"), extra=files)
    client = InferenceClient(chain, ClientConfig(pinned=1), trust=ReadTrust())
    client.refresh()
    rows = raw_rows(trained.data)[:20]
    expected = Predictor(read_run_files(f"file://{trained.root}", trained.safetensors.run_id)).predict(rows)
    assert client.predict_sync(rows).to_csv() == expected.to_csv()


def test_safetensors_run_predicts_with_torch_like_the_onnx_run(trained: Trained) -> None:
    rows = raw_rows(trained.data)[:100]
    onnx = Predictor(read_run_files(f"file://{trained.root}", trained.onnx.run_id))
    torch = Predictor(read_run_files(f"file://{trained.root}", trained.safetensors.run_id))
    assert (onnx.model_format, torch.model_format) == ("onnx", "safetensors")
    first, second = onnx.predict(rows), torch.predict(rows)
    assert first.labels == second.labels
    np.testing.assert_allclose(first.probabilities, second.probabilities, rtol=0, atol=1e-5)


def test_ml8s_predict_formats_ids_precision_and_unseen_categories(
    trained: Trained, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--format json|parquet carry what the CSV does; --id-column is passed through first; a category the
    model never saw is a warning with its count and examples (a wrong case named as such), --strict refuses."""
    rows = raw_rows(trained.data)[:6]
    rows[1]["plan"], rows[2]["plan"], rows[3]["plan"] = "Basic", "gold", "gold"
    rows_csv = write_rows(tmp_path / "rows.csv", rows)
    predictions = Predictor(read_run_files(f"file://{trained.root}", trained.onnx.run_id)).predict(rows)
    args = ["--run", trained.onnx.run_id, "--root", str(trained.root), "--input", str(rows_csv)]
    ids = [row["customer_id"] for row in rows]

    code, out, err = _predict_cli(capsys, *args, "--format", "json", "--id-column", "customer_id", "--precision", "3")
    assert code == 0
    (warning,) = err.splitlines()
    assert warning == (
        "ml8s: warning: column 'plan': 3 row(s) hold a category the model never saw ('Basic' (did you mean "
        "'basic'?), 'gold'); they are predicted as an unknown category"
    )
    records = json.loads(out)
    assert [r["customer_id"] for r in records] == ids
    assert [r["predicted_class"] for r in records] == list(predictions.labels)
    assert [r["probability_yes"] for r in records] == [round(float(p[1]), 3) for p in predictions.probabilities]

    target = tmp_path / "out.parquet"
    code, out, _ = _predict_cli(
        capsys, *args, "--format", "parquet", "--id-column", "customer_id", "--output", str(target)
    )
    table = pq.read_table(target)
    assert (code, out) == (0, "") and table.column_names == [
        "customer_id",
        "predicted_class",
        *predictions.columns()[1:],
    ]
    assert table.column("customer_id").to_pylist() == ids

    code, out, err = _predict_cli(capsys, *args, "--strict")
    assert (code, out) == (1, "") and err.startswith(
        "ml8s: PREDICTION_INPUT_INVALID: --strict: column 'plan': 3 row(s)"
    )
    code, _, err = _predict_cli(capsys, *args, "--id-column", "nope")
    assert code == 1 and "--id-column 'nope' is not a column of" in err


def test_ml8s_predict_reads_stray_text_in_a_numeric_column_as_missing(
    trained: Trained, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """As training reads a numeric column's stray text (a training file with some fed back was refused): missing,
    a warning with the count and examples; --strict refuses."""
    rows = raw_rows(trained.data)[:4]
    rows[1]["tenure"], rows[3]["tenure"] = "ten", "n/k"
    blank = [{**row, "tenure": "" if i in (1, 3) else row["tenure"]} for i, row in enumerate(rows)]
    numbers = sum(1 for row in blank if str(row["tenure"]).strip())
    predictor = Predictor(read_run_files(f"file://{trained.root}", trained.onnx.run_id))
    assert predictor.predict(rows).to_csv() == predictor.predict(blank).to_csv()
    args = [
        "--run",
        trained.onnx.run_id,
        "--root",
        str(trained.root),
        "--input",
        str(write_rows(tmp_path / "r.csv", rows)),
    ]
    code, out, err = _predict_cli(capsys, *args, "--precision", "full")
    assert (code, out) == (0, predictor.predict(blank).to_csv())
    assert err.splitlines() == [
        f"ml8s: warning: column 'tenure' holds {numbers} numbers and 2 cell(s) of other text (e.g. ['n/k', 'ten']); "
        "typed numeric, the text read as missing"
    ]
    code, out, err = _predict_cli(capsys, *args, "--strict")
    assert (code, out) == (1, "") and err == (
        "ml8s: PREDICTION_INPUT_INVALID: --strict: column 'tenure' holds 2 cell(s) of text that is not a number "
        "(e.g. ['n/k', 'ten']); expected numbers or an empty cell (without --strict such text is read as missing, "
        "as training reads a numeric column's stray text)\n"
    )


def test_predict_output_format_follows_the_extension_unless_given(
    trained: Trained, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--output preds.json`` (or ``.parquet``) without --format wrote CSV into it; --format still wins."""
    rows_csv = write_rows(tmp_path / "rows.csv", raw_rows(trained.data)[:3])
    args = ["--run", trained.onnx.run_id, "--root", str(trained.root), "--input", str(rows_csv)]
    for name in ("p.json", "P.JSON", "p.parquet", "p.txt", "p"):
        assert _predict_cli(capsys, *args, "--output", str(tmp_path / name))[0] == 0
    assert len(json.loads((tmp_path / "p.json").read_bytes())) == 3
    assert json.loads((tmp_path / "P.JSON").read_bytes()) == json.loads((tmp_path / "p.json").read_bytes())
    assert pq.read_table(tmp_path / "p.parquet").num_rows == 3
    assert (tmp_path / "p.txt").read_bytes() == (tmp_path / "p").read_bytes()
    assert (tmp_path / "p").read_bytes().startswith(b"predicted_class,")
    assert _predict_cli(capsys, *args, "--output", str(tmp_path / "q.json"), "--format", "csv")[0] == 0
    assert (tmp_path / "q.json").read_bytes() == (tmp_path / "p").read_bytes()


@pytest.mark.parametrize("fmt", ["csv", "json", "parquet"])
@pytest.mark.parametrize("name", ["predicted_class", "probability_yes"])
def test_an_id_column_named_like_a_prediction_column_is_refused(
    trained: Trained, tmp_path: Path, capsys: pytest.CaptureFixture[str], fmt: str, name: str
) -> None:
    """Such an id was overwritten by the prediction in JSON and Parquet (the ids lost) and repeated the CSV
    header: refused before anything is written."""
    rows = [{**row, name: row["customer_id"]} for row in raw_rows(trained.data)[:2]]
    rows_csv = write_rows(tmp_path / "rows.csv", rows)
    target = tmp_path / f"out.{fmt}"
    args = ["--run", trained.onnx.run_id, "--root", str(trained.root), "--input", str(rows_csv)]
    code, out, err = _predict_cli(capsys, *args, "--id-column", name, "--format", fmt, "--output", str(target))
    assert (code, out) == (1, "") and not target.exists()
    assert err == (
        f"ml8s: PREDICTION_INPUT_INVALID: --id-column {name!r} is also the name of a prediction column; expected "
        "a column named other than ['predicted_class', 'probability_no', 'probability_yes'] (rename it in the "
        "input)\n"
    )


@pytest.mark.parametrize("text", ["\uff13", "\u00b2", "\u0663"])
def test_predict_numbers_are_ascii_digits(text: str) -> None:
    """'３' (full width) and '٣' (Arabic-Indic) were read as 3 by --precision and --version; '²' is no number."""
    import argparse

    from ml8s.cli.predict import _counter, _precision

    for parse in (_precision, _counter):
        with pytest.raises(argparse.ArgumentTypeError, match="expected"):
            parse(text)
