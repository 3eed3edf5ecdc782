"""Raw-row transform: the rules the feature schema records, applied to raw rows, give training's matrix.

Tiny datasets, no training: the schema and matrix come from the feature-engineering functions themselves.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from ml8s.data.dataset import load_dataset, text_column
from ml8s.data.fingerprint import fingerprint_local
from ml8s.errors import DataError, InferenceError, PredictionInputError
from ml8s.features.prepared import Prepared, prepare
from ml8s.features.rules import encode
from ml8s.identity.params import validate_params
from ml8s.identity.variables import canonical_config
from ml8s.inference import MAX_CATEGORIES, MISSING, OTHER, RawTransform
from ml8s.inference.csv_rows import read_csv_columns, read_csv_rows
from ml8s.inference.output import Unseen, stray_numbers, unseen_categories
from ml8s.pipeline.features import feature_schema

HEADER = "amount,active,colour,kind,y"


def _dataset(directory: Path) -> list[str]:
    """Numeric with blanks, booleans in mixed case with blanks, a small categorical with blanks, and a
    40-category column whose rare values share __other__ (30 x 3 rows m00..m29, 10 x 2 rows a0..a9)."""
    kinds = [f"m{i:02d}" for i in range(30) for _ in range(3)] + [f"a{i}" for i in range(10) for _ in range(2)]
    lines = []
    for n, kind in enumerate(kinds):
        amount = "" if n % 7 == 0 else f"{(n * 37) % 101}.{n % 10}"
        active = "" if n % 11 == 0 else (" TRUE" if n % 3 else "false ")
        colour = "" if n % 13 == 0 else ["red", "green", "blue"][n % 3]
        lines.append(f"{amount},{active},{colour},{kind},{'yes' if (n * 5) % 7 < 3 else 'no'}")
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "part.csv").write_text("\n".join([HEADER, *lines]) + "\n")
    return lines


def _prepared_features(directory: Path, **variables: str) -> tuple[Prepared, list[dict[str, object]]]:
    raw: dict[str, str | None] = {"DATA_ROOT": str(directory), "TARGET_COLUMN": "y", "TEST_SIZE": "0.25"}
    raw.update({k.upper(): v for k, v in variables.items()})
    params = validate_params(canonical_config(raw))
    prepared = prepare(load_dataset(fingerprint_local(str(directory))), params)
    return prepared, encode(prepared, params)[1]


def _train(directory: Path, **variables: str) -> tuple[RawTransform, np.ndarray, list[dict[str, object]]]:
    raw: dict[str, str | None] = {"DATA_ROOT": str(directory), "TARGET_COLUMN": "y", "TEST_SIZE": "0.25"}
    raw.update({k.upper(): v for k, v in variables.items()})
    params = validate_params(canonical_config(raw))
    prepared = prepare(load_dataset(fingerprint_local(str(directory))), params)
    matrix, features = encode(prepared, params)
    schema = feature_schema(prepared, features).to_bytes()
    with (directory / "part.csv").open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    return RawTransform.from_schema(schema, "feature_schema.json"), matrix, rows


@pytest.fixture
def data(tmp_path: Path) -> Path:
    _dataset(tmp_path / "data")
    return tmp_path / "data"


def test_raw_rows_give_the_training_matrix_bit_for_bit(data: Path) -> None:
    transform, matrix, rows = _train(data)
    assert {c.name: c.kind for c in transform.inputs} == {
        "active": "boolean",
        "amount": "numeric",
        "colour": "categorical",
        "kind": "categorical",
    }
    assert OTHER in {r.category for r in transform.rules} and all(c.complete for c in transform.inputs)
    encoded = transform.encode(rows)
    assert encoded.dtype == np.float32
    np.testing.assert_array_equal(encoded, matrix.astype(np.float32))


def test_typed_cells_give_the_same_matrix_as_text(data: Path) -> None:
    """Numbers, booleans, None and NaN (what a DataFrame holds) encode exactly as their CSV text does."""
    transform, matrix, rows = _train(data)
    typed = []
    for row in rows:
        amount = float(row["amount"]) if row["amount"] else float("nan")
        active = None if not row["active"].strip() else row["active"].strip().lower() == "true"
        typed.append(
            {"amount": np.float64(amount), "active": active, "colour": row["colour"] or None, "kind": row["kind"]}
        )
    np.testing.assert_array_equal(transform.encode(typed), matrix.astype(np.float32))


def test_each_rule_on_hand_made_rows(data: Path) -> None:
    transform, _, _ = _train(data)
    rule = {r.name: r for r in transform.rules}
    rows = [
        {"amount": "", "active": "", "colour": "", "kind": "zzz-never-seen"},
        {"amount": "12.5", "active": "TRUE", "colour": "purple", "kind": "m03"},
    ]
    encoded = transform.encode(rows).astype(np.float64)
    got = [{name: encoded[i, j] for j, name in enumerate(transform.feature_names)} for i in range(2)]
    amount, active = rule["amount"], rule["active"]
    assert amount.impute is not None and amount.scale_mean is not None and amount.scale_std is not None
    # missing number: imputed with the training mean, then standardized; its indicator is set
    assert got[0]["amount"] == np.float32((amount.impute - amount.scale_mean) / amount.scale_std)
    assert got[0]["amount__missing"] == 1.0 and got[1]["amount__missing"] == 0.0
    assert got[1]["amount"] == np.float32((12.5 - amount.scale_mean) / amount.scale_std)
    # booleans: 1.0/0.0, a missing one imputed with the training share of true, never scaled
    assert active.scale_mean is None and got[0]["active"] == np.float32(active.impute) and got[1]["active"] == 1.0
    # a missing category is __missing__; an unseen one is __other__ when the column has that bucket...
    assert got[0][f"colour={MISSING}"] == 1.0 and got[0][f"kind={OTHER}"] == 1.0
    # ...and no one-hot at all when it has none (colour's three values were all kept)
    assert [got[1][f"colour={c}"] for c in ("blue", "green", "red", MISSING)] == [0.0] * 4
    assert got[1]["kind=m03"] == 1.0 and got[1][f"kind={OTHER}"] == 0.0


def test_max_features_that_hides_kept_categories_records_them(data: Path) -> None:
    """MAX_FEATURES kept kind=__other__ but dropped some kept categories' features: schema version 2 records
    every kept category, so a hidden kept value encodes as itself (no feature set) and an unseen one as
    __other__, exactly as training did, on every row."""
    transform, matrix, rows = _train(data, max_features="10")
    (kind,) = [c for c in transform.inputs if c.name == "kind"]
    assert f"kind={OTHER}" in transform.feature_names and kind.complete
    assert len(kind.categories) == MAX_CATEGORIES and {f"m{i:02d}" for i in range(30)} <= set(kind.categories)
    hidden = [c for c in kind.categories if f"kind={c}" not in transform.feature_names]
    assert hidden, "the case needs a kept category whose feature MAX_FEATURES dropped"
    np.testing.assert_array_equal(transform.encode(rows), matrix.astype(np.float32))
    other = transform.feature_names.index(f"kind={OTHER}")
    hidden_row, unseen_row = transform.encode([{**rows[0], "kind": hidden[0]}, {**rows[0], "kind": "zzz"}])
    assert (hidden_row[other], unseen_row[other]) == (0.0, 1.0)
    from ml8s.inference import onnx_metadata

    schema = json.loads(feature_schema(*_prepared_features(data, max_features="10")).to_bytes())
    props = onnx_metadata(json.dumps(schema).encode(), "feature_schema.json")
    assert json.loads(props["ml8s.categories"]) == {"kind": list(kind.categories)}
    assert "ml8s.categories" not in onnx_metadata(feature_schema(*_prepared_features(data)).to_bytes(), "schema")


def test_schema_version_and_categories_must_agree(data: Path) -> None:
    raw: dict[str, str | None] = {"DATA_ROOT": str(data), "TARGET_COLUMN": "y", "MAX_FEATURES": "10"}
    params = validate_params(canonical_config(raw))
    prepared = prepare(load_dataset(fingerprint_local(str(data))), params)
    schema = json.loads(feature_schema(prepared, encode(prepared, params)[1]).to_bytes())
    assert schema["schema_version"] == 2 and list(schema["categories"]) == ["kind"]
    plain = json.loads(
        feature_schema(
            prepared, encode(prepared, validate_params(canonical_config({**raw, "MAX_FEATURES": None})))[1]
        ).to_bytes()
    )
    assert plain["schema_version"] == 1 and "categories" not in plain  # every other schema keeps its bytes
    for change, message in (
        ({"schema_version": 1}, "expected version 1 without them"),
        ({"categories": {"kind": [OTHER]}}, "expected its sorted kept categories"),
        ({"categories": {**schema["categories"], "amount": ["1"]}}, "expected only columns with one-hot"),
        ({"categories": {"kind": ["m00"]}}, "a superset of its one-hot features"),
    ):
        with pytest.raises(InferenceError, match=message):
            RawTransform.from_schema(json.dumps({**schema, **change}).encode(), "feature_schema.json")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"active": "yes"}, "column 'active' has 'yes' in row 2 (of 2), which is not boolean"),
        ({"colour": ["red"]}, "row 2 column 'colour' holds a list"),
        ({"amount": float("inf")}, "column 'amount' has 'inf' in row 2"),
        # It overflows to infinity: NaN probabilities came out, without an error.
        ({"amount": "1e999"}, "column 'amount' has '1e999' in row 2 (of 2), which is not a finite number"),
        ({"amount": "-2e400"}, "column 'amount' has '-2e400' in row 2 (of 2), which is not a finite number"),
    ],
)
def test_bad_cells_are_named_errors(data: Path, change: dict[str, object], message: str) -> None:
    transform, _, rows = _train(data)
    with pytest.raises(PredictionInputError, match=message.replace("(", r"\(").replace(")", r"\)")):
        transform.encode([rows[0], {**rows[1], **change}])


def test_a_category_spelled_like_a_bucket_is_refused_as_training_refuses_it(data: Path) -> None:
    """Training refuses a category '__missing__' or '__other__' (test_features.py); raw rows put one silently into
    that bucket: a '__missing__' cell predicted as a missing value. Every way rows come names the first such row."""
    transform, _, rows = _train(data)
    bad = [rows[0], {**rows[1], "colour": " __other__ "}, {**rows[2], "colour": MISSING}]  # the first row's named
    message = "column 'colour' has '__other__' in row 2 (of 3), the name of the one-hot bucket of the categories"
    with pytest.raises(PredictionInputError, match=message.replace("(", r"\(").replace(")", r"\)")) as raised:
        transform.encode(bad)
    assert "expected a category other than '__missing__' and '__other__'" in raised.value.message
    by_column = {name: [row[name] for row in bad] for name in bad[0]}
    with pytest.raises(PredictionInputError) as from_values:
        transform.encode_values(by_column, 3)
    cells = {name: pa.array(values, type=pa.string()) for name, values in by_column.items()}
    with pytest.raises(PredictionInputError) as from_cells:
        transform.encode_cells(cells, 3)
    assert from_values.value.message == from_cells.value.message == raised.value.message
    with pytest.raises(PredictionInputError, match=r"column 'kind' has '__missing__' in row 1 \(of 1\)"):
        transform.encode([{**rows[0], "kind": MISSING}])  # before: the __other__ bucket (no row of kind is blank)
    # not a bucket's name: another spelling is an unseen category, and a numeric column's text is missing
    fine = [{**rows[0], "kind": "__Other__", "colour": "__missing"}, {**rows[1], "amount": MISSING}]
    assert transform.encode(fine).shape == (2, len(transform.rules))


def test_a_training_file_with_stray_text_gives_its_training_matrix(data: Path) -> None:
    # Training reads a numeric column's stray text (at most 5% of its cells) as missing; predicting refused it,
    # so the training file itself could not be fed back.
    path = data / "part.csv"
    lines = path.read_text().splitlines()
    for n, text in ((2, "approx. 3"), (5, "12,5"), (9, "approx. 3")):
        lines[n] = ",".join([f'"{text}"', *lines[n].split(",")[1:]])
    path.write_text("\n".join(lines) + "\n")
    transform, matrix, rows = _train(data)
    assert [rows[n - 1]["amount"] for n in (2, 5, 9)] == ["approx. 3", "12,5", "approx. 3"]  # line 0: the header
    np.testing.assert_array_equal(transform.encode(rows), matrix.astype(np.float32))
    table = read_csv_columns(path.read_bytes(), "part.csv")  # as ml8s predict reads its input
    typed = transform.typed_cells(table.cells)
    np.testing.assert_array_equal(transform.encode_typed(typed, table.rows), matrix.astype(np.float32))
    (warning,) = stray_numbers(transform, table.cells, typed)
    assert (warning.column, warning.cells, warning.examples) == ("amount", 3, ("12,5", "approx. 3"))
    assert stray_numbers(transform, _other_cells(transform, 2), transform.typed_cells(_other_cells(transform, 2))) == []
    # a typed value is its text first: a boolean in a numeric column is the stray text "true"
    blank = transform.encode([{**rows[0], "amount": ""}])
    np.testing.assert_array_equal(transform.encode([{**rows[0], "amount": True}]), blank)


def test_absent_column_is_named_and_unused_columns_are_ignored(data: Path) -> None:
    transform, matrix, rows = _train(data)
    extra = [{**row, "unused": "x", "y": ""} for row in rows[:3]]
    np.testing.assert_array_equal(transform.encode(extra), matrix[:3].astype(np.float32))
    with pytest.raises(PredictionInputError, match="row 2 has no column 'colour'"):
        transform.encode([rows[0], {k: v for k, v in rows[1].items() if k != "colour"}])
    assert transform.encode([]).shape == (0, len(transform.rules))


def _schema(data: Path) -> dict[str, object]:
    transform, _, _ = _train(data)
    rules = [r.record() for r in transform.rules]
    target = {"column": "y", "classes": list(transform.classes), "encoded_as": "__target__"}
    split = {"column": "__split__", "train": 0, "test": 1}
    return {
        "schema_version": 1,
        "features": rules,
        "target": target,
        "split": split,
        "dropped_columns": {},
        "rows": {},
        "rows_per_file": {},
    }


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda s: s["features"][0].update(extra=1), "features.0.extra: Extra inputs are not permitted"),
        (lambda s: s.update(schema_version=2), "schema_version 2 .without categories.; expected version 1"),
        (lambda s: s["features"].reverse(), "unique and sorted by name"),
        (lambda s: s["features"][0].pop("impute"), "without a finite impute value"),
        (lambda s: s["features"][-1].pop("category"), "a one-hot feature without a category"),
        (lambda s: s["features"][0].update(scale_mean=0.0, scale_std=1.0), "scaling that is not a numeric"),
        (lambda s: s["target"].update(classes=["yes"]), "expected 2 or more distinct classes"),
        (lambda s: s["features"].__setitem__(slice(None), []), "expected at least one"),
        (lambda s: s.pop("target"), "target: Field required"),
    ],
)
def test_malformed_schema_is_a_named_error(data: Path, edit: object, message: str) -> None:
    schema = _schema(data)
    assert callable(edit)
    edit(schema)
    with pytest.raises(InferenceError, match=message):
        RawTransform.from_schema(json.dumps(schema).encode(), "feature_schema.json")


@pytest.mark.parametrize("blob", [b"", b"{", b"\xff\xfe", b"[]", b'{"schema_version": "1"}'])
def test_garbage_schema_is_a_named_error(blob: bytes) -> None:
    with pytest.raises(InferenceError, match="is not a feature schema"):
        RawTransform.from_schema(blob, "feature_schema.json")


def test_text_column_types_like_the_loader(data: Path) -> None:
    """Every column typed from its raw text with its known kind equals the loader's inferred column."""
    dataset = load_dataset(fingerprint_local(str(data)))
    with (data / "part.csv").open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    for column in dataset.columns:
        typed = text_column(column.name, column.kind, pa.array([r[column.name] for r in rows]))
        assert typed.kind == column.kind
        if column.kind == "categorical":
            assert typed.text().tolist() == column.text().tolist()
        else:
            np.testing.assert_array_equal(typed.values, column.values)
    with pytest.raises(DataError, match="kind 'date'"):
        text_column("x", "date", pa.array(["1"]))


@pytest.mark.parametrize(
    ("blob", "message"),
    [
        (b"", "is empty"),
        (b"a,,b\n1,2,3\n", "blank column name"),
        (b"a,b,a\n1,2,3\n", r"repeats column\(s\) \['a'\]"),
        (b"a,b\n1,2,3\n", "line 2 has 3 cells; expected 2"),
        (b"a,b\n1\n", "line 2 has 1 cells; expected 2"),
        (b"a,b\n\xff,1\n", "is not UTF-8"),
        (b'a,b\n"1,2\n', "is not valid CSV"),
    ],
)
def test_bad_csv_is_a_named_error(blob: bytes, message: str) -> None:
    with pytest.raises(PredictionInputError, match=message):
        read_csv_rows(blob, "rows.csv")
    with pytest.raises(PredictionInputError, match=message):
        read_csv_columns(blob, "rows.csv")


@pytest.mark.parametrize(
    "blob",
    [
        '\ufeffa, b\n"x, y",\n\n  2 ,TRUE\n'.encode(),  # a byte order mark, a quoted comma, a blank line
        b"a,b\r\n1,2\r\n3,\r\n",  # CRLF, an empty last cell
        b'a,b\n"line\nbreak",""""\n',  # a quoted newline, an escaped quote
        b"a,b",  # a header without a newline (Arrow's reader refuses it: Python's reads it)
        b"a,b\n",
        b"a\n\n\n",
        b'a,b\n"x"y,1\n',  # a stray quote: Arrow's reader would read xy, Python's strict one refuses
        b'a,b\n1,"2\n',  # a quoted value still open at the end
        b"a,b\n1,\xe9\n",  # not UTF-8
        b"a,b\n1,2\n3\n",
    ],
)
def test_csv_columns_read_what_csv_rows_read(blob: bytes) -> None:
    """Arrow's columns and Python's rows of one file: the same header and cells, or the same refusal."""
    try:
        rows = read_csv_rows(blob, "rows.csv")
    except PredictionInputError as exc:
        with pytest.raises(PredictionInputError) as refused:
            read_csv_columns(blob, "rows.csv")
        assert refused.value.message == exc.message
        return
    columns = read_csv_columns(blob, "rows.csv")
    assert columns.columns == rows.columns and columns.rows == len(rows.rows)
    assert {name: cells.to_pylist() for name, cells in columns.cells.items()} == {
        name: [row[name] for row in rows.rows] for name in rows.columns
    }


def test_unseen_categories_are_counted_in_the_typed_columns(data: Path) -> None:
    """Counted as the model sees them: trimmed, missing tokens and blanks left out, examples sorted."""
    transform, _, _ = _train(data)
    colour = [" red", "purple", "", None, "NaN", "purple ", "Red", "mauve", "teal", "green"]

    def unseen(cells: list[str | None]) -> list[Unseen]:
        typed = transform.typed_cells({**_other_cells(transform, len(cells)), "colour": pa.array(cells, pa.string())})
        return unseen_categories(transform, typed)

    (found,) = unseen(colour)
    assert (found.column, found.count, found.examples) == ("colour", 5, ("Red", "mauve", "purple"))
    assert unseen(["red", "  "]) == []


def _other_cells(transform: RawTransform, rows: int) -> dict[str, pa.Array]:
    return {column.name: pa.array([""] * rows, type=pa.string()) for column in transform.inputs}


def test_csv_rows_keep_text_cells() -> None:
    # " b" stays " b": training reads its header names exactly (a model trained on " b" expects " b"); a name
    # stripped here made the training file itself unusable as prediction input.
    blob = '\ufeffa, b\n"x, y",\n\n  2 ,TRUE\n'.encode()
    table = read_csv_rows(blob, "rows.csv")
    assert table.rows == [{"a": "x, y", " b": ""}, {"a": "  2 ", " b": "TRUE"}] and table.columns == ("a", " b")


def test_a_missing_column_spelled_with_other_spaces_gets_a_hint() -> None:
    from ml8s.cli.predict import _spacing_hint

    assert _spacing_hint([" tenure "], ("x", "tenure")) == (
        " (names are matched exactly, spaces included: the header has ['tenure'])"
    )
    assert _spacing_hint(["tenure"], ("x", "plan")) == ""


def _huge(directory: Path, value: str) -> Path:
    directory.mkdir(parents=True)
    lines = [f"{value if n % 2 else '-' + value},{n % 5},{'yes' if n % 3 else 'no'}" for n in range(40)]
    (directory / "part.csv").write_text("\n".join(["x,z,y", *lines]) + "\n")
    return directory


@pytest.mark.parametrize(
    ("value", "standardize", "says"),
    [
        ("1e300", "true", "its training variance overflows a float64"),  # was: INTERNAL_ERROR writing the schema
        ("1e39", "false", "the float32 feature matrix cannot hold them unscaled"),  # was: a NaN training loss
    ],
)
def test_values_too_large_for_a_feature_are_refused_while_fitting(
    tmp_path: Path, value: str, standardize: str, says: str
) -> None:
    with pytest.raises(DataError, match=f"column 'x' has values too large to be a feature .*: {says}"):
        _prepared_features(_huge(tmp_path / "data", value), standardize=standardize)


def test_large_values_that_fit_once_scaled_train(tmp_path: Path) -> None:
    _, features = _prepared_features(_huge(tmp_path / "data", "1e39"))  # standardized: +-1, not 1e39
    (x,) = [f for f in features if f["name"] == "x"]
    assert x["scale_std"] == pytest.approx(1e39, rel=0.01)


def test_a_row_too_large_for_the_float32_input_is_named(data: Path) -> None:
    transform, _, rows = _train(data, standardize="false")
    big = [dict(rows[0]), {**rows[1], "amount": "1e39"}]
    with pytest.raises(PredictionInputError, match=r"row 2 column 'amount' gives feature 'amount' the value 1e\+39"):
        transform.encode(big)
    assert np.isfinite(transform.encode([rows[0], {**rows[1], "amount": "3e38"}])).all()


def test_a_matrix_value_beyond_float32_is_refused_not_written_as_an_infinity() -> None:
    from ml8s.features.matrix_groups import GroupBuffers, fill_group

    buffers = GroupBuffers(1, 2, alternate=False)
    out = buffers.take(2)
    fill_group(["f"], np.array([[1.0], [-3e38]]), out, buffers)
    assert out.dtype == np.float32 and out[0].tolist() == np.array([1.0, -3e38], dtype=np.float32).tolist()
    with pytest.raises(
        DataError, match=r"feature 'f' has a value too large for the float32 feature matrix \(magnitude 1e\+39"
    ):
        fill_group(["f"], np.array([[1.0], [-1e39]]), out, buffers)


@pytest.mark.parametrize("precision", [0, 1, 3, 6, 17, None])
def test_csv_probabilities_are_the_rounded_values_digits(precision: int | None) -> None:
    """CSV cells are formatted straight from the probabilities: the same text as formatting round(p, N) (ties
    at the last decimal, tiny and near-1 values included); JSON carries round(p, N) itself."""
    from ml8s.inference.output import render
    from ml8s.inference.predictor import Predictions

    rng = np.random.default_rng(3)
    first = np.concatenate([[0.0, 5e-7, 1.5e-6, 0.1234565, 0.5, 1 - 5e-7, 1e-300], rng.random(2000)])
    probabilities = np.column_stack([first, 1 - first])
    predictions = Predictions(classes=("no", "yes"), labels=("no",) * len(first), probabilities=probabilities)
    lines = render(predictions, "csv", precision=precision).decode().splitlines()[1:]
    for line, row in zip(lines, probabilities.tolist(), strict=True):
        expected = [repr(p) if precision is None else f"{round(p, precision):.{precision}f}" for p in row]
        assert line.split(",")[1:] == expected
    records = json.loads(render(predictions, "json", precision=precision))
    assert [r["probability_yes"] for r in records] == [
        p if precision is None else round(p, precision) for p in probabilities[:, 1].tolist()
    ]


@pytest.mark.parametrize(
    ("rule", "kind", "values"),
    [
        (dict(kind="numeric", impute=2.5), "numeric", [1.0, np.nan, -3e5, 0.1, 7e-9]),
        (dict(kind="numeric", impute=0.3, scale_mean=0.7, scale_std=3.1), "numeric", [1.0, np.nan, -3e5, 0.1, 7e-9]),
        (dict(kind="boolean", impute=0.25), "boolean", [1.0, 0.0, np.nan, 1.0, 0.0]),
        (dict(kind="indicator"), "numeric", [1.0, np.nan, 2.0, np.nan, 3.0]),
        (dict(kind="indicator"), "categorical", [0, -1, 1, -1, 2]),
        (dict(kind="onehot", category="b"), "categorical", [0, -1, 1, 2, 1]),
        (dict(kind="onehot", category=MISSING), "categorical", [0, -1, 1, 2, 1]),
        (dict(kind="onehot", category="zzz"), "categorical", [0, -1, 1, 2, 1]),
    ],
)
def test_a_feature_made_in_place_is_the_feature_values_as_float32(
    rule: dict[str, object], kind: str, values: list[float]
) -> None:
    """The matrix writer's in-place encoding (reused arrays) gives the bits of feature_values cast to float32."""
    from ml8s.data.columns import Column
    from ml8s.inference.rules import FeatureRule, bucket, feature_into, feature_values

    if kind == "categorical":
        column = Column(
            name="c", kind=kind, values=np.array(values, dtype=np.int32), categories=pa.array(["a", "b", "c"])
        )
    else:
        column = Column(name="c", kind=kind, values=np.array(values, dtype=np.float64))
    feature = FeatureRule.model_validate({"name": "f", "source": "c", **rule})
    buckets = bucket(column, ["a", "b"]) if feature.kind == "onehot" else None
    out = np.full(len(values), 99.0, dtype=np.float32)
    feature_into(feature, column, buckets, out, np.full(len(values), 5.0), np.ones(len(values), dtype=bool))
    assert out.tobytes() == feature_values(feature, column, buckets).astype(np.float32).tobytes()
