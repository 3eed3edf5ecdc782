"""Parquet columns of every Arrow type training reads: a run trained on a Parquet file predicts that file's rows
through every inference entry point (serving's rows, the MLflow pyfunc on pandas' reading of the file, a warm
start's Arrow columns, ``ml8s predict --input FILE.parquet``) as the training matrix. A type whose cells cannot
be read the same way at predict (a timestamp's text depends on its unit, which a Python value does not carry;
nested values are no cell at all) is refused in training, naming the file, the column and the type, before the
run writes anything.
"""

from __future__ import annotations

import datetime
import decimal
from pathlib import Path

import numpy as np
import onnxruntime
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import make_context
from mlflow_support import artifact_dir, train_run

from ml8s.cli.main import main
from ml8s.contract import layout
from ml8s.data.dataset import load_dataset
from ml8s.data.sources import fingerprint_data
from ml8s.errors import DataError, PredictionInputError
from ml8s.inference import Predictor, RawTransform, read_run_files
from ml8s.inference.cells import read_cells
from ml8s.inference.predictor import probabilities

ROWS = 120


def _cycle(values: list[object], n: int = ROWS) -> list[object]:
    return [values[i % len(values)] for i in range(n)]


def _table() -> pa.Table:
    big = 2**63 + 12345  # beyond 2^53: read as the nearest double by every path
    days = [datetime.date(2024, 1, 1), datetime.date(2024, 2, 29), None, datetime.date(1999, 12, 31)]
    prices = [decimal.Decimal("1.50"), decimal.Decimal("-0.00"), None, decimal.Decimal("12345.67")]
    columns = {
        "i8": pa.array(_cycle([-128, 0, None, 127, 5]), pa.int8()),
        "u8": pa.array(_cycle([0, 255, 7]), pa.uint8()),
        "i16": pa.array(_cycle([-300, None, 300]), pa.int16()),
        "u16": pa.array(_cycle([65535, 1, 2, 3]), pa.uint16()),
        "i32": pa.array(_cycle([-(2**31), 2**31 - 1, None]), pa.int32()),
        "u32": pa.array(_cycle([2**32 - 1, 0, 9, 4, 2]), pa.uint32()),
        "i64": pa.array(_cycle([-(2**62), None, 3, 2**53 + 1]), pa.int64()),
        "u64": pa.array(_cycle([big, 1, None, 2**64 - 1, 0, 6]), pa.uint64()),
        "f16": pa.array(np.array(_cycle([0.1, -2.5, 1000.0, 3.0]), dtype=np.float16)),
        "f32": pa.array(_cycle([0.1, None, 3.4e37, -1e-30, 2.0]), pa.float32()),
        "flag": pa.array(_cycle([True, False, None, False, False]), pa.bool_()),
        "flag_text": pa.array(_cycle(["TRUE", " false", None, "NA"]), pa.large_string()),
        "large": pa.array(_cycle(["alpha", "beta", None, "NA", " gamma "]), pa.large_string()),
        "coded": pa.array(_cycle(["x", "y", None, "x", "z"]), pa.string()).dictionary_encode(),
        "coded_ints": pa.array(_cycle([4, 5, None, 6]), pa.int64()).dictionary_encode(),
        "price": pa.array(_cycle(prices), pa.decimal128(7, 2)),
        "day": pa.array(_cycle(days), pa.date32()),
        "day64": pa.array(_cycle(days[::-1]), pa.date64()),
        "raw": pa.array(_cycle([b"red", b"blue", None, b"green"]), pa.binary()),
        "fixed": pa.array(_cycle([b"ab", b"cd", None]), pa.binary(2)),
        "empty": pa.array([None] * ROWS, pa.null()),
        "churned": pa.array(_cycle(["yes", "no", "no"]), pa.string()),
    }
    return pa.table(columns)


def _write(directory: Path, table: pa.Table) -> Path:
    directory.mkdir(parents=True)
    pq.write_table(table, directory / "part.parquet")
    return directory / "part.parquet"


def test_a_run_on_parquet_predicts_its_training_rows_through_every_entry_point(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import mlflow.pyfunc
    import pandas as pd

    from ml8s.inference.pyfunc import save_model_dir

    path = _write(tmp_path / "data", _table())
    ctx = make_context(path.parent, tmp_path / "root", MAX_FEATURES="200", EPOCHS="1")
    train_run(ctx)
    ctx.open_store().put_if_absent(ctx.key(layout.SUCCESS_MARKER), b"")
    run = artifact_dir(tmp_path / "root", ctx.run_id)
    transform = RawTransform.from_schema((run / layout.FEATURE_SCHEMA).read_bytes(), "schema")
    sources = {column.name: column.kind for column in transform.inputs}
    for name in ("i8", "u8", "i16", "u16", "i32", "u32", "i64", "u64", "f16", "f32", "price", "coded_ints"):
        assert sources[name] == "numeric", name
    for name in ("flag", "flag_text"):
        assert sources[name] == "boolean", name
    for name in ("large", "coded", "day", "day64", "raw", "fixed"):
        assert sources[name] == "categorical", name
    assert "empty" not in sources  # no value in any row: no feature
    assert "day=2024-02-29" in transform.feature_names  # a date's category is its ISO spelling
    table = pq.read_table(run / layout.FEATURE_MATRIX)
    matrix = np.column_stack([table.column(name).to_numpy() for name in transform.feature_names]).astype(np.float32)
    data = pq.read_table(path)
    names = [column.name for column in transform.inputs]

    rows = data.to_pylist()  # Python's values: int, float, bool, str, Decimal, date, bytes, None
    np.testing.assert_array_equal(transform.encode(rows), matrix)  # serving's rows
    frame = pd.read_parquet(path)  # pandas' own reading: float64 for ints with nulls, Categorical, objects
    cells = frame.astype(object).where(frame.notna(), None)
    values = {name: cells[name].tolist() for name in names}
    np.testing.assert_array_equal(transform.encode_values(values, ROWS), matrix)  # the pyfunc's columns
    read = read_cells([data.slice(0, 50), data.slice(50)], names)  # a warm start's Arrow columns, two files
    np.testing.assert_array_equal(transform.encode_cells(read.cells, read.rows, read.failed), matrix)

    session = onnxruntime.InferenceSession(str(run / layout.model_export("onnx")), providers=["CPUExecutionProvider"])
    (logits,) = session.run(["logits"], {"features": matrix})
    expected = probabilities(np.asarray(logits, dtype=np.float32))
    files = read_run_files(f"file://{tmp_path / 'root'}", ctx.run_id)
    np.testing.assert_array_equal(Predictor(files).predict(rows).probabilities, expected)
    save_model_dir(str(tmp_path / "model"), files)
    predicted = mlflow.pyfunc.load_model(str(tmp_path / "model")).predict(pd.read_parquet(path))
    np.testing.assert_array_equal(predicted[["probability_no", "probability_yes"]].to_numpy(), expected)
    capsys.readouterr()
    args = ["--run", ctx.run_id, "--root", str(tmp_path / "root"), "--precision", "full", "--input", str(path)]
    assert main(["predict", *args, "--id-column", "price"]) == 0
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert lines[0] == "price,predicted_class,probability_no,probability_yes", err
    assert [line.split(",")[0] for line in lines[1:5]] == ["1.50", "0.00", "", "12345.67"]  # as training read them
    got = [[float(p) for p in line.split(",")[2:]] for line in lines[1:]]
    np.testing.assert_array_equal(np.asarray(got), expected)


def test_parquet_rows_at_predict_read_as_the_cells_training_read(tmp_path: Path) -> None:
    path = _write(tmp_path / "data", _table())
    ctx = make_context(path.parent, tmp_path / "root", MAX_FEATURES="200", EPOCHS="1")
    train_run(ctx)
    run = artifact_dir(tmp_path / "root", ctx.run_id)
    transform = RawTransform.from_schema((run / layout.FEATURE_SCHEMA).read_bytes(), "schema")
    base = _table().slice(0, 1).to_pylist()[0]
    # a Decimal spelled with any exponent reads as its number; a date as its ISO day; bytes as their UTF-8 text
    same = [
        {**base, "price": decimal.Decimal("1.5")},
        {**base, "price": decimal.Decimal("15E-1")},
        {**base, "price": "1.50", "day": "2024-01-01", "raw": "red", "fixed": "ab"},
    ]
    encoded = transform.encode([base, *same])
    np.testing.assert_array_equal(encoded[1:], np.repeat(encoded[:1], 3, axis=0))
    huge = transform.encode([{**base, "price": decimal.Decimal("1E-100")}, {**base, "price": 1e-100}])
    np.testing.assert_array_equal(huge[0], huge[1])  # beyond a Parquet decimal: the same number still
    with pytest.raises(PredictionInputError, match=r"row 1 column 'raw' holds bytes that are not UTF-8"):
        transform.encode([{**base, "raw": b"\xff"}])
    with pytest.raises(PredictionInputError, match=r"row 2 column 'day' holds a datetime"):
        transform.encode([base, {**base, "day": datetime.datetime(2024, 1, 1)}])
    bad = pa.table({"raw": pa.array([b"red", b"\xff"], pa.binary())})
    read = read_cells([bad], ["raw"])
    assert read.failed["raw"].message.startswith("row 2 column 'raw' holds bytes that are not UTF-8")


REFUSED = {  # name: (a column of 4 rows, its type as the file reads back, a word of the advice)
    "timestamp": (pa.array([datetime.datetime(2024, 1, 1)] * 4, pa.timestamp("us")), "timestamp[us]", "a number"),
    "timestamp_tz": (
        pa.array([datetime.datetime(2024, 1, 1)] * 4, pa.timestamp("ms", tz="UTC")),
        "timestamp[ms, tz=UTC]",
        "text",
    ),
    "time64": (pa.array([datetime.time(12)] * 4, pa.time64("us")), "time64[us]", "text"),
    "time32": (pa.array([datetime.time(12)] * 4, pa.time32("ms")), "time32[ms]", "text"),
    "duration": (pa.array([datetime.timedelta(1)] * 4, pa.duration("ms")), "duration[ms]", "a number"),
    "list": (pa.array([[1], [], None, [2, 3]], pa.list_(pa.int64())), "list<element: int64>", "flatten"),
    "struct": (pa.array([{"a": 1}] * 4, pa.struct([("a", pa.int64())])), "struct<a: int64>", "flatten"),
    "map": (pa.array([[("k", 1)]] * 4, pa.map_(pa.string(), pa.int64())), "map<string, int64", "flatten"),
}


@pytest.mark.parametrize("kind", sorted(REFUSED))
def test_a_column_of_a_type_predict_cannot_read_alike_is_refused_before_the_run_writes(
    tmp_path: Path, kind: str
) -> None:
    column, spelled, advice = REFUSED[kind]
    table = pa.table({"churned": ["yes", "no", "yes", "no"], "n": [1, 2, 3, 4], "when": column})
    data = tmp_path / "data"
    _write(data, table.slice(0, 2))
    pq.write_table(table.slice(2), data / "zz.parquet")
    ctx = make_context(data, tmp_path / "root")
    with pytest.raises(DataError) as caught:
        train_run(ctx)
    message = caught.value.message
    where = f"data file part.parquet (under file://{data})"
    assert message.startswith(f"{where} column 'when' is of type {spelled}"), message
    assert advice in message and "name it in EXCLUDE_COLUMNS" in message
    assert not [p for p in (tmp_path / "root").rglob("*") if p.is_file()]  # nothing written
    dataset = load_dataset(fingerprint_data(f"file://{data}"))  # typed; refused once EXCLUDE_COLUMNS is known
    assert dataset.refused == {"when": message}
    # a nested column cannot be typed (all missing, refused unless excluded); a timed one is typed as it always was,
    # and refused only where it is kept as a feature or is the target
    assert dataset.column("when").all_missing() == (advice == "flatten")
    assert dataset.unread == (("when",) if advice == "flatten" else ())


def test_a_timestamp_column_dropped_as_an_identifier_trains_as_before(tmp_path: Path) -> None:
    """An event-time column (every value distinct) was always dropped as an identifier, never a feature, so nothing
    reads it at predict: refusing it would stop runs that trained, for no skew."""
    table = _table().select(["churned", "i8"])
    start = datetime.datetime(2024, 1, 1)
    stamps = [start + datetime.timedelta(seconds=n) for n in range(ROWS)]
    table = table.append_column("when", pa.array(stamps, pa.timestamp("us")))
    data = tmp_path / "data"
    _write(data, table)
    ctx = make_context(data, tmp_path / "root", EPOCHS="1")
    train_run(ctx)
    run = artifact_dir(tmp_path / "root", ctx.run_id)
    transform = RawTransform.from_schema((run / layout.FEATURE_SCHEMA).read_bytes(), "schema")
    assert [column.name for column in transform.inputs] == ["i8"]
    assert b"identifier" in (run / layout.FEATURE_SCHEMA).read_bytes()  # dropped, and why, as before


def test_ml8s_predict_on_a_parquet_input_reads_only_the_columns_the_model_uses(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path / "data", _table())
    ctx = make_context(path.parent, tmp_path / "root", MAX_FEATURES="200", EPOCHS="1")
    train_run(ctx)
    ctx.open_store().put_if_absent(ctx.key(layout.SUCCESS_MARKER), b"")
    args = ["predict", "--run", ctx.run_id, "--root", str(tmp_path / "root"), "--precision", "full"]
    capsys.readouterr()
    assert main([*args, "--input", str(path)]) == 0
    expected = capsys.readouterr().out
    # columns training would refuse, none of them the model's: ignored, as a CSV input's extra columns are
    extra = _table().append_column("when", pa.array([datetime.datetime(2024, 1, 1)] * ROWS, pa.timestamp("us")))
    extra = extra.append_column("nested", pa.array([[1]] * ROWS, pa.list_(pa.int64())))
    pq.write_table(extra, tmp_path / "extra.pq")
    assert main([*args, "--input", str(tmp_path / "extra.pq")]) == 0
    assert capsys.readouterr().out == expected

    def refused(table_or_bytes: pa.Table | bytes, *more: str) -> str:
        target = tmp_path / "bad.parquet"
        if isinstance(table_or_bytes, bytes):
            target.write_bytes(table_or_bytes)
        else:
            pq.write_table(table_or_bytes, target)
        assert main([*args, "--input", str(target), *more]) == 1
        out, err = capsys.readouterr()
        assert out == "" and "Traceback" not in err and len(err.splitlines()) == 1, err
        return err

    day = _table().column_names.index("day")
    stamped = _table().set_column(day, "day", pa.array([datetime.datetime(2024, 1, 1)] * ROWS, pa.timestamp("ms")))
    assert "row 1 column 'day' holds a datetime" in refused(stamped)  # a model's column of a type training refuses
    assert "row 1 column 'when' holds a datetime" in refused(extra, "--id-column", "when")
    assert "bad.parquet cannot be read as Parquet" in refused(b"amount,flag\n1,true\n")
    assert "bad.parquet cannot be read as Parquet" in refused(b"")
    assert "bad.parquet has no column(s) ['day'] in its header" in refused(_table().drop_columns(["day"]))
    assert main([*args, "--input", str(tmp_path / "bad.parquet"), "--output", str(tmp_path / "out.csv")]) == 1
    assert not (tmp_path / "out.csv").exists()
    pq.write_table(_table().slice(0, 0), tmp_path / "none.parquet")  # no rows: the header line alone
    assert main([*args, "--input", str(tmp_path / "none.parquet")]) == 0
    assert capsys.readouterr().out == "predicted_class,probability_no,probability_yes\n"


def test_a_parquet_input_with_a_column_name_twice_is_refused_by_name(tmp_path: Path) -> None:
    from ml8s.inference.cells import parquet_table

    table = pa.table([pa.array([1, 2]), pa.array([3, 4])], names=["x", "x"])
    pq.write_table(table, tmp_path / "twice.parquet")
    with pytest.raises(PredictionInputError, match=r"^PREDICTION_INPUT_INVALID: rows cannot be read as Parquet: .*x"):
        parquet_table((tmp_path / "twice.parquet").read_bytes(), "rows")


def test_a_column_of_a_refused_type_trains_when_excluded_and_a_refused_target_is_named(tmp_path: Path) -> None:
    table = _table().select(["churned", "i8", "large"])
    table = table.append_column("when", pa.array([datetime.datetime(2024, 1, 1)] * ROWS, pa.timestamp("us")))
    table = table.append_column("tags", pa.array([[1, 2]] * ROWS, pa.list_(pa.int64())))
    data = tmp_path / "data"
    _write(data, table)
    ctx = make_context(data, tmp_path / "root", EXCLUDE_COLUMNS="tags,when", EPOCHS="1")
    train_run(ctx)
    run = artifact_dir(tmp_path / "root", ctx.run_id)
    transform = RawTransform.from_schema((run / layout.FEATURE_SCHEMA).read_bytes(), "schema")
    assert sorted(column.name for column in transform.inputs) == ["i8", "large"]
    encoded = transform.encode(table.to_pylist())  # the excluded columns' values are never read
    assert encoded.shape[0] == ROWS
    only_one = make_context(data, tmp_path / "other", EXCLUDE_COLUMNS="when", EPOCHS="1")
    with pytest.raises(DataError, match=r"column 'tags' is of type list<element: int64>; .*EXCLUDE_COLUMNS"):
        train_run(only_one)
    stamped = make_context(data, tmp_path / "third", TARGET_COLUMN="when", EXCLUDE_COLUMNS="tags", EPOCHS="1")
    with pytest.raises(DataError, match=r"column 'when' is of type timestamp\[us\]; "):
        train_run(stamped)
    assert not (tmp_path / "other").exists() or not [p for p in (tmp_path / "other").rglob("*") if p.is_file()]
