"""Feature-engineering rules (SPEC §4) on tiny datasets, and the held-out metrics against hand-computed values."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ml8s.data.dataset import Dataset, load_dataset
from ml8s.data.fingerprint import fingerprint_local
from ml8s.errors import DataError
from ml8s.features import prepared as preparing
from ml8s.features.matrix import write_encoded
from ml8s.features.prepared import Prepared, prepare
from ml8s.features.rules import encode, fit_rules
from ml8s.identity.params import RunParams, validate_params
from ml8s.identity.variables import canonical_config
from ml8s.inference.rules import MAX_CATEGORIES, MISSING, OTHER
from ml8s.training.metrics import classification_metrics, roc_auc


def params(**values: str) -> RunParams:
    """Validated parameters; TARGET_COLUMN defaults to ``y``, DATA_ROOT is never read by these tests."""
    raw: dict[str, str | None] = {"DATA_ROOT": "/unused", "TARGET_COLUMN": "y"}
    raw.update({name.upper(): value for name, value in values.items()})
    return validate_params(canonical_config(raw))


def write_csv(directory: Path, name: str, header: str, rows: list[str]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text("\n".join([header, *rows]) + "\n")
    return path


def load(directory: Path) -> Dataset:
    return load_dataset(fingerprint_local(str(directory)))


def run(directory: Path, p: RunParams) -> tuple[Prepared, np.ndarray, list[dict[str, object]]]:
    prepared = prepare(load(directory), p)
    matrix, described = encode(prepared, p)
    return prepared, matrix, described


def names_of(described: list[dict[str, object]]) -> list[str]:
    return [str(d["name"]) for d in described]


def column_of(matrix: np.ndarray, described: list[dict[str, object]], name: str) -> np.ndarray:
    return np.asarray(matrix[:, names_of(described).index(name)])


def labels(n: int) -> list[str]:
    """Alternating yes/no: two classes for any n >= 2."""
    return ["yes" if i % 2 else "no" for i in range(n)]


# -- columns and types ---------------------------------------------------------------------------------------


def test_columns_sorted_by_name(tmp_path: Path) -> None:
    rows = [f"{i},{i * 2},{lab},c{i % 2}" for i, lab in enumerate(labels(8))]
    write_csv(tmp_path, "a.csv", "zeta,alpha,y,mid", rows)
    data = load(tmp_path)
    assert data.names == ("alpha", "mid", "y", "zeta")

    _, matrix, described = run(tmp_path, params(STANDARDIZE="false"))
    assert names_of(described) == ["alpha", "mid=c0", "mid=c1", "zeta"]
    np.testing.assert_array_equal(column_of(matrix, described, "alpha"), [i * 2 for i in range(8)])
    np.testing.assert_array_equal(column_of(matrix, described, "zeta"), list(range(8)))


# Twelve rows. `n` is numeric but empty in the first four rows; `flag` is true/FALSE in any case;
# `mixed` holds numbers in the first rows and text later; `code` is numeric everywhere.
SPLIT_HEADER = "n,flag,mixed,code,y"
SPLIT_ROWS = [
    ",true,1,10,no",
    ",FALSE,2,11,yes",
    ",True,3,12,no",
    ",false,4,13,yes",
    "1.5,TRUE,abc,14,no",
    "2.5,false,5,15,yes",
    "3.5,,def,16,no",
    "4.5,true,6,17,yes",
    "5,false,7,18,no",
    "6,true,ghi,19,yes",
    "7,False,8,20,no",
    "8,true,9,21,yes",
]


def test_csv_type_inference_over_all_rows(tmp_path: Path) -> None:
    for i in range(3):
        write_csv(tmp_path, f"part-{i}.csv", SPLIT_HEADER, SPLIT_ROWS[i * 4 : (i + 1) * 4])
    data = load(tmp_path)
    kinds = {c.name: c.kind for c in data.columns}
    # the first file's `n` is all empty, the first file's `mixed` all numbers: typed over all rows
    assert kinds == {"code": "numeric", "flag": "boolean", "mixed": "categorical", "n": "numeric", "y": "categorical"}
    n = data.column("n").values
    assert np.isnan(n[:4]).all()
    np.testing.assert_array_equal(n[4:], [1.5, 2.5, 3.5, 4.5, 5, 6, 7, 8])
    flag = data.column("flag").values
    np.testing.assert_array_equal(flag[:6], [1, 0, 1, 0, 1, 0])
    assert np.isnan(flag[6])
    assert data.column("mixed").text()[:5].tolist() == ["1", "2", "3", "4", "abc"]
    assert data.rows == 12
    assert data.rows_per_file == {"part-0.csv": 4, "part-1.csv": 4, "part-2.csv": 4}


def test_same_matrix_from_one_file_or_three(tmp_path: Path) -> None:
    one, three = tmp_path / "one", tmp_path / "three"
    write_csv(one, "all.csv", SPLIT_HEADER, SPLIT_ROWS)
    for i in range(3):
        write_csv(three, f"part-{i}.csv", SPLIT_HEADER, SPLIT_ROWS[i * 4 : (i + 1) * 4])
    p = params(TEST_SIZE="0.25")
    prepared_one, matrix_one, described_one = run(one, p)
    prepared_three, matrix_three, described_three = run(three, p)

    assert described_one == described_three
    np.testing.assert_array_equal(matrix_one, matrix_three)
    np.testing.assert_array_equal(prepared_one.target, prepared_three.target)
    np.testing.assert_array_equal(prepared_one.split, prepared_three.split)
    assert "n__missing" in names_of(described_one)


def test_categorical_one_hot_sorted_with_missing(tmp_path: Path) -> None:
    colors = ["pear", "apple", "", "fig", "apple", "pear", "", "fig"]
    rows = [f"{c},{lab}" for c, lab in zip(colors, labels(8), strict=True)]
    write_csv(tmp_path, "a.csv", "color,y", rows)
    _, matrix, described = run(tmp_path, params())

    # "__missing__" sorts first by code point ("_" < "a")
    assert names_of(described) == [f"color={MISSING}", "color=apple", "color=fig", "color=pear"]
    assert [d["kind"] for d in described] == ["onehot"] * 4
    for category in ("apple", "fig", "pear"):
        expected = [1.0 if c == category else 0.0 for c in colors]
        np.testing.assert_array_equal(column_of(matrix, described, f"color={category}"), expected)
    np.testing.assert_array_equal(column_of(matrix, described, f"color={MISSING}"), [c == "" for c in colors])
    np.testing.assert_array_equal(matrix.sum(axis=1), np.ones(8))


def test_rare_categories_fold_into_other(tmp_path: Path) -> None:
    # 30 frequent categories m00..m29 (3 rows each) and 10 rare ones a0..a9 (2 rows each): 40 > MAX_CATEGORIES.
    # Top 32 by frequency = the 30 m's (despite their later names) + a0, a1 (ties broken by name);
    # a2..a9 (16 rows) share __other__.
    assert MAX_CATEGORIES == 32
    values = [f"m{i:02d}" for i in range(30) for _ in range(3)] + [f"a{i}" for i in range(10) for _ in range(2)]
    rows = [f"{v},{lab}" for v, lab in zip(values, labels(len(values)), strict=True)]
    write_csv(tmp_path, "a.csv", "kind,y", rows)
    _, matrix, described = run(tmp_path, params())

    kept = sorted([f"m{i:02d}" for i in range(30)] + ["a0", "a1", OTHER])
    assert names_of(described) == [f"kind={c}" for c in kept]
    other = column_of(matrix, described, f"kind={OTHER}")
    np.testing.assert_array_equal(other, [1.0 if v in {f"a{i}" for i in range(2, 10)} else 0.0 for v in values])
    assert other.sum() == 16


def test_identifier_column_dropped(tmp_path: Path) -> None:
    n = MAX_CATEGORIES + 8
    rows = [f"ID-{i:04d},{i % 5},{lab}" for i, lab in enumerate(labels(n))]
    write_csv(tmp_path, "a.csv", "customer,visits,y", rows)
    prepared, _, described = run(tmp_path, params())

    assert prepared.dropped == {"customer": "identifier: every value distinct"}
    assert [c.name for c in prepared.columns] == ["visits"]
    assert names_of(described) == ["visits"]


def test_excluded_and_empty_columns_dropped(tmp_path: Path) -> None:
    rows = [f"{i},{i * 3},,{lab}" for i, lab in enumerate(labels(6))]
    write_csv(tmp_path, "a.csv", "a,b,empty,y", rows)
    prepared, _, described = run(tmp_path, params(EXCLUDE_COLUMNS="b"))
    assert prepared.dropped == {"b": "EXCLUDE_COLUMNS", "empty": "all values missing"}
    assert names_of(described) == ["a"]


def test_missing_numeric_imputed_with_training_mean_and_indicator(tmp_path: Path) -> None:
    xs = ["1", "", "4", "9", "", "16", "25", "36", "", "49", "64", "81"]
    rows = [f"{x},{lab}" for x, lab in zip(xs, labels(len(xs)), strict=True)]
    write_csv(tmp_path, "a.csv", "x,y", rows)
    prepared, matrix, described = run(tmp_path, params(STANDARDIZE="false", TEST_SIZE="0.25"))

    missing = np.array([x == "" for x in xs])
    observed = np.array([float(x) if x else np.nan for x in xs])
    train = prepared.split == 0
    fill = float(observed[train & ~missing].mean())
    assert fill != pytest.approx(float(np.nanmean(observed)))  # training rows only, not all rows
    assert names_of(described) == ["x", "x__missing"]
    x = column_of(matrix, described, "x")
    np.testing.assert_array_equal(x[missing], np.full(missing.sum(), fill))
    np.testing.assert_array_equal(x[~missing], observed[~missing])
    np.testing.assert_array_equal(column_of(matrix, described, "x__missing"), missing.astype(float))
    assert described[0]["impute"] == fill
    assert described[1]["kind"] == "indicator"


def test_max_features_top_n_by_variance_ties_by_name(tmp_path: Path) -> None:
    # `beta` and `alpha` hold identical values, so their training variances are exactly equal; `gamma`
    # varies most and `delta` least. MAX_FEATURES=2 keeps gamma, then alpha over beta (by name).
    rows = [f"{v},{v},{v * 10},{v * 0.1},{lab}" for v, lab in zip([0, 1, 2, 3] * 3, labels(12), strict=True)]
    write_csv(tmp_path, "a.csv", "beta,alpha,gamma,delta,y", rows)
    _, _, everything = run(tmp_path, params(STANDARDIZE="false"))
    variance = {str(d["name"]): d["train_variance"] for d in everything}
    assert variance["alpha"] == variance["beta"]
    assert variance["gamma"] > variance["alpha"] > variance["delta"]

    _, matrix, described = run(tmp_path, params(STANDARDIZE="false", MAX_FEATURES="2"))
    assert names_of(described) == ["alpha", "gamma"]
    assert matrix.shape == (12, 2)
    _, _, three = run(tmp_path, params(STANDARDIZE="false", MAX_FEATURES="3"))
    assert names_of(three) == ["alpha", "beta", "gamma"]


def test_standardize_numeric_only(tmp_path: Path) -> None:
    rows = [
        f"{i * 1.5 + 3},{(i * 7) % 5},{['red', 'blue', ''][i % 3]},{'true' if i % 4 else 'false'},{lab}"
        for i, lab in enumerate(labels(20))
    ]
    write_csv(tmp_path, "a.csv", "a,b,color,flag,y", rows)
    prepared, scaled, described = run(tmp_path, params(STANDARDIZE="true"))
    _, raw, raw_described = run(tmp_path, params(STANDARDIZE="false"))
    train = prepared.split == 0

    assert names_of(described) == names_of(raw_described)
    kinds = {str(d["name"]): d["kind"] for d in described}
    for i, name in enumerate(names_of(described)):
        if kinds[name] == "numeric":
            assert abs(scaled[train, i].mean()) < 1e-12, name
            assert scaled[train, i].std() == pytest.approx(1.0, abs=1e-12), name
        else:  # one-hots and booleans are left alone
            np.testing.assert_array_equal(scaled[:, i], raw[:, i])
            assert set(np.unique(scaled[:, i]).tolist()) <= {0.0, 1.0}
    assert sorted(n for n, k in kinds.items() if k == "numeric") == ["a", "b"]
    assert kinds["flag"] == "boolean"


# -- rows and target -----------------------------------------------------------------------------------------


def test_sample_rows_exact_and_seeded(tmp_path: Path) -> None:
    rows = [f"{i},{lab}" for i, lab in enumerate(labels(100))]
    write_csv(tmp_path, "a.csv", "row,y", rows)

    def kept(seed: str) -> list[float]:
        prepared, matrix, described = run(tmp_path, params(SAMPLE_ROWS="30", RANDOM_SEED=seed, STANDARDIZE="false"))
        assert prepared.row_counts()["kept"] == 30
        assert prepared.train_rows + prepared.test_rows == 30
        assert matrix.shape[0] == 30
        return column_of(matrix, described, "row").tolist()

    first = kept("7")
    assert first == sorted(first)  # sampled rows stay in file order
    assert len(set(first)) == 30
    assert kept("7") == first
    assert kept("8") != first
    everything, _, _ = run(tmp_path, params(SAMPLE_ROWS="1000"))
    assert everything.row_counts()["kept"] == 100


def test_rows_with_missing_target_dropped_and_counted(tmp_path: Path) -> None:
    ys = ["yes", "", "no", "  ", "yes", "no", "", "no", "yes", "no"]
    rows = [f"{i},{y}" for i, y in enumerate(ys)]
    write_csv(tmp_path, "a.csv", "x,y", rows)
    prepared, matrix, described = run(tmp_path, params(STANDARDIZE="false"))

    counts = prepared.row_counts()
    assert counts["read"] == 10
    assert counts["missing_target_dropped"] == 3
    assert counts["kept"] == 7
    assert counts["train"] + counts["test"] == 7
    np.testing.assert_array_equal(column_of(matrix, described, "x"), [0, 2, 4, 5, 7, 8, 9])


def test_multiclass_string_target_sorted(tmp_path: Path) -> None:
    ys = ["cat", "ant", "bee", "cat", "bee", "ant"]
    write_csv(tmp_path, "a.csv", "x,y", [f"{i},{y}" for i, y in enumerate(ys)])
    prepared = prepare(load(tmp_path), params())
    assert prepared.classes == ("ant", "bee", "cat")
    assert prepared.target.tolist() == [2, 0, 1, 2, 1, 0]


def test_numeric_target_in_numeric_order(tmp_path: Path) -> None:
    ys = ["10", "2", "1", "2", "10", ""]
    write_csv(tmp_path, "a.csv", "x,y", [f"{i},{y}" for i, y in enumerate(ys)])
    prepared = prepare(load(tmp_path), params())
    assert prepared.classes == ("1", "2", "10")  # numeric order, not "1" < "10" < "2"
    assert prepared.target.tolist() == [2, 1, 0, 1, 2]
    assert prepared.rows_missing_target == 1


def test_boolean_target(tmp_path: Path) -> None:
    ys = ["true", "FALSE", "True", "false"]
    write_csv(tmp_path, "a.csv", "x,y", [f"{i},{y}" for i, y in enumerate(ys)])
    prepared = prepare(load(tmp_path), params())
    assert prepared.classes == ("false", "true")
    assert prepared.target.tolist() == [1, 0, 1, 0]


# -- Parquet -------------------------------------------------------------------------------------------------

PARQUET_TABLE = {
    "count": pa.array([3, 1, 4, 1, 5, 9], type=pa.int64()),
    "ratio": pa.array([0.5, None, 1.5, 2.5, 3.5, 4.5], type=pa.float64()),
    "active": pa.array([True, False, True, None, False, True], type=pa.bool_()),
    "tier": pa.array(["gold", "silver", None, "gold", "bronze", "silver"], type=pa.string()),
    "y": pa.array(["no", "yes", "no", "yes", "no", "yes"], type=pa.string()),
}


def test_parquet_types(tmp_path: Path) -> None:
    pq.write_table(pa.table(PARQUET_TABLE), tmp_path / "a.parquet")
    data = load(tmp_path)
    assert data.names == ("active", "count", "ratio", "tier", "y")
    kinds = {c.name: c.kind for c in data.columns}
    assert kinds == {
        "active": "boolean",
        "count": "numeric",
        "ratio": "numeric",
        "tier": "categorical",
        "y": "categorical",
    }
    np.testing.assert_array_equal(data.column("count").values, [3, 1, 4, 1, 5, 9])
    assert data.column("tier").text().tolist() == ["gold", "silver", None, "gold", "bronze", "silver"]

    prepared, matrix, described = run(tmp_path, params(STANDARDIZE="false"))
    assert prepared.classes == ("no", "yes")
    assert names_of(described) == [
        "active",
        "active__missing",
        "count",
        "ratio",
        "ratio__missing",
        f"tier={MISSING}",
        "tier=bronze",
        "tier=gold",
        "tier=silver",
    ]
    assert matrix.shape == (6, 9)
    assert not np.isnan(matrix).any()


def test_csv_and_parquet_mix(tmp_path: Path) -> None:
    header = "active,count,ratio,tier,y"
    csv_rows = ["true,2,0.25,gold,no", "false,7,,bronze,yes", ",6,1.75,,no"]
    mixed, plain = tmp_path / "mixed", tmp_path / "plain"
    write_csv(mixed, "a.csv", header, csv_rows)
    pq.write_table(pa.table(PARQUET_TABLE), mixed / "b.parquet")
    # The same rows as CSV only.
    parquet_rows = [
        "true,3,0.5,gold,no",
        "false,1,,silver,yes",
        "true,4,1.5,,no",
        ",1,2.5,gold,yes",
        "false,5,3.5,bronze,no",
        "true,9,4.5,silver,yes",
    ]
    write_csv(plain, "a.csv", header, csv_rows)
    write_csv(plain, "b.csv", header, parquet_rows)

    from_mixed, from_plain = load(mixed), load(plain)
    assert from_mixed.rows == 9
    assert from_mixed.rows_per_file == {"a.csv": 3, "b.parquet": 6}
    for a, b in zip(from_mixed.columns, from_plain.columns, strict=True):
        assert (a.name, a.kind) == (b.name, b.kind)
        if a.kind == "categorical":
            assert a.text().tolist() == b.text().tolist()
        else:
            np.testing.assert_array_equal(a.values, b.values)
    p = params()
    _, matrix_mixed, described_mixed = run(mixed, p)
    _, matrix_plain, described_plain = run(plain, p)
    assert described_mixed == described_plain
    np.testing.assert_array_equal(matrix_mixed, matrix_plain)


def test_parquet_ints_and_floats_across_files(tmp_path: Path) -> None:
    pq.write_table(pa.table({"x": pa.array([1, 2], type=pa.int32()), "y": ["a", "b"]}), tmp_path / "a.parquet")
    pq.write_table(pa.table({"x": pa.array([2.5, 3.5]), "y": ["a", "b"]}), tmp_path / "b.parquet")
    data = load(tmp_path)
    assert data.column("x").kind == "numeric"
    np.testing.assert_array_equal(data.column("x").values, [1.0, 2.0, 2.5, 3.5])


# -- metrics -------------------------------------------------------------------------------------------------


def test_roc_auc_with_ties() -> None:
    # scores 0.1 (neg), 0.5 (pos), 0.5 (neg), 0.5 (pos). Pairs (pos, neg): (0.5, 0.1) wins twice = 2,
    # (0.5, 0.5) ties twice = 2 x 0.5 = 1 -> 3 of 4 pairs -> 0.75. By ranks: 0.1 has rank 1, the three 0.5s
    # share rank (2+3+4)/3 = 3; positives' rank sum 6, U = 6 - 2*3/2 = 3, AUC = 3 / (2*2) = 0.75.
    scores = np.array([0.1, 0.5, 0.5, 0.5])
    assert roc_auc(scores, np.array([0, 1, 0, 1])) == 0.75
    assert roc_auc(np.array([0.1, 0.2, 0.3, 0.4]), np.array([0, 0, 1, 1])) == 1.0
    assert roc_auc(np.array([0.4, 0.3, 0.2, 0.1]), np.array([0, 0, 1, 1])) == 0.0
    assert roc_auc(np.array([0.3, 0.3, 0.3]), np.array([0, 1, 1])) == 0.5  # all tied
    assert roc_auc(np.array([0.2, 0.9]), np.array([1, 1])) == 0.5  # one class absent


def test_classification_metrics_binary() -> None:
    probs = np.array([[0.9, 0.1], [0.4, 0.6], [0.3, 0.7], [0.2, 0.8]])
    truth = np.array([0, 0, 1, 1])
    metrics = classification_metrics(probs, truth, 2)
    # predicted 0, 1, 1, 1: 3 of 4 right. Class 0: tp 1, fp 0, fn 1 -> F1 2/3; class 1: tp 2, fp 1, fn 0 -> 4/5.
    assert metrics["accuracy"] == 0.75
    assert metrics["macro_f1"] == pytest.approx((2 / 3 + 4 / 5) / 2)
    assert metrics["log_loss"] == pytest.approx(-(math.log(0.9) + math.log(0.4) + math.log(0.7) + math.log(0.8)) / 4)
    assert metrics["majority_class_accuracy"] == 0.5
    assert metrics["roc_auc"] == 1.0  # positive-class scores 0.1, 0.6 < 0.7, 0.8


def test_classification_metrics_multiclass() -> None:
    probs = np.array([[0.7, 0.2, 0.1], [0.1, 0.8, 0.1], [0.5, 0.3, 0.2], [0.2, 0.2, 0.6], [0.1, 0.1, 0.8]])
    truth = np.array([0, 1, 2, 2, 2])
    metrics = classification_metrics(probs, truth, 3)
    # predicted 0, 1, 0, 2, 2: class 0 F1 2/3 (tp 1, fp 1), class 1 F1 1, class 2 F1 4/5 (tp 2, fn 1)
    assert metrics["accuracy"] == pytest.approx(0.8)
    assert metrics["macro_f1"] == pytest.approx((2 / 3 + 1 + 4 / 5) / 3)
    assert metrics["majority_class_accuracy"] == pytest.approx(0.6)
    assert "roc_auc" not in metrics


def test_no_feature_left_names_each_dropped_column_and_why(tmp_path: Path) -> None:
    # the one feature an identifier: it was reported as dropped "after EXCLUDE_COLUMNS and empty columns"
    n = MAX_CATEGORIES + 8
    write_csv(tmp_path, "a.csv", "customer,y", [f"ID-{i:04d},{lab}" for i, lab in enumerate(labels(n))])
    with pytest.raises(DataError, match=r"dropped columns: 'customer' \(identifier: every value distinct\); expected"):
        prepare(load(tmp_path), params())
    write_csv(tmp_path, "a.csv", "a,empty,y", [f"{i},,{lab}" for i, lab in enumerate(labels(6))])
    with pytest.raises(DataError, match=r"'a' \(EXCLUDE_COLUMNS\), 'empty' \(all values missing\); expected"):
        prepare(load(tmp_path), params(EXCLUDE_COLUMNS="a"))


def test_a_regression_target_is_refused_naming_its_distinct_values(tmp_path: Path) -> None:
    # a number per row: 60 classes of one row each trained "successfully" with a held-out accuracy of 0
    write_csv(tmp_path, "a.csv", "x,y", [f"{i},{i * 1.37:.2f}" for i in range(60)])
    with pytest.raises(DataError, match=r"TARGET_COLUMN='y' has 60 distinct values in the 60 rows kept \(0, 1.37, "):
        prepare(load(tmp_path), params())
    # as many classes with two rows each, or 32 classes of one row each, are classes
    write_csv(tmp_path, "a.csv", "x,y", [f"{i},{i // 2}" for i in range(120)])
    assert len(prepare(load(tmp_path), params(TEST_SIZE="0.01")).classes) == 60  # a class held out whole is refused
    # 32 classes of one row each are classes, not a regression target, but TEST_SIZE holds some of them out whole
    write_csv(tmp_path, "a.csv", "x,y", [f"{i},{i}" for i in range(MAX_CATEGORIES)])
    with pytest.raises(DataError, match=r"TARGET_COLUMN='y': class\(es\) '\d+' \(1 row\(s\) kept\)"):
        prepare(load(tmp_path), params())


@pytest.mark.parametrize("value", [OTHER, MISSING])
def test_a_category_named_like_a_bucket_is_refused_naming_file_column_and_row(tmp_path: Path, value: str) -> None:
    # a real category '__other__' shared the one-hot feature plan=__other__ with the rare categories (and
    # '__missing__' plan=__missing__ with the missing values): neither the model nor the schema could tell them apart
    write_csv(tmp_path, "a.csv", "plan,y", [f"p{i % 3},{lab}" for i, lab in enumerate(labels(10))])
    write_csv(tmp_path, "b.csv", "plan,y", [f"{value if i == 2 else 'p0'},{lab}" for i, lab in enumerate(labels(10))])
    with pytest.raises(DataError) as caught:
        prepare(load(tmp_path), params())
    assert caught.value.message.startswith(
        f"data file b.csv, column 'plan', data row 3 (1 = the first row after the header): the value {value!r} is "
        "the name of the one-hot bucket of "
    )
    assert f"expected categories other than {MISSING!r} and {OTHER!r}" in caught.value.message
    # where it is no feature's category it is data like any other: a class, an excluded column's value
    write_csv(tmp_path, "b.csv", "plan,y,note", [f"p{i % 3},{value if i else 'yes'},{value}" for i in range(10)])
    write_csv(tmp_path, "a.csv", "plan,y,note", [f"p{i % 3},{lab},n" for i, lab in enumerate(labels(10))])
    rows = prepare(load(tmp_path), params(EXCLUDE_COLUMNS="note", TEST_SIZE="0.05"))
    assert value in rows.classes and [c.name for c in rows.columns] == ["plan"]


def test_a_class_with_no_training_row_is_refused_naming_it(tmp_path: Path) -> None:
    # the one 'rare' row landed in the held-out rows: the model had a 'rare' output no row trained, and succeeded
    held_out = int(np.flatnonzero(preparing._split(20, 0.2, 7) == 1)[0])
    ys = ["rare" if i == held_out else lab for i, lab in enumerate(labels(20))]
    write_csv(tmp_path, "a.csv", "x,y", [f"{i},{y}" for i, y in enumerate(ys)])
    with pytest.raises(DataError) as caught:
        prepare(load(tmp_path), params(RANDOM_SEED="7"))
    assert caught.value.message == (
        "TARGET_COLUMN='y': class(es) 'rare' (1 row(s) kept) have no row in the training split (TEST_SIZE=0.2, "
        "RANDOM_SEED=7); expected every class in the training rows: a smaller TEST_SIZE, more rows of that class "
        "(or a larger SAMPLE_ROWS), or drop its rows"
    )
    # SAMPLE_ROWS that leaves every 'rare' row out is refused the same way (its class had an output too)
    sampled = np.random.default_rng(7).permutation(20)[:10]  # prepare()'s SAMPLE_ROWS draw
    rare = min(set(range(20)) - set(sampled.tolist()))
    write_csv(tmp_path, "a.csv", "x,y", [f"{i},{'rare' if i == rare else lab}" for i, lab in enumerate(labels(20))])
    with pytest.raises(DataError, match=r"class\(es\) 'rare' \(0 row\(s\) kept\) have no row in the training"):
        prepare(load(tmp_path), params(SAMPLE_ROWS="10", RANDOM_SEED="7"))
    # in the training rows it is a class like any other
    rows = prepare(load(tmp_path), params())
    assert rows.classes == ("no", "rare", "yes") and rows.target[rows.split == 0].tolist().count(1) == 1


def test_too_few_rows_sampled_names_sample_rows(tmp_path: Path) -> None:
    # SAMPLE_ROWS=1 of 60 rows was reported as the target having a value in only 1 row
    write_csv(tmp_path, "a.csv", "x,y", [f"{i},{lab}" for i, lab in enumerate(labels(60))])
    with pytest.raises(DataError, match=r"SAMPLE_ROWS=1 of the 60 rows with a target keeps 1 row\(s\); expected at le"):
        prepare(load(tmp_path), params(SAMPLE_ROWS="1"))
    with pytest.raises(DataError, match=r"leaving 1 to train on; .* \(a larger SAMPLE_ROWS\)"):
        prepare(load(tmp_path), params(SAMPLE_ROWS="2"))
    write_csv(tmp_path, "a.csv", "x,y", ["1,no", "2,yes"])  # the data itself is too small: more rows
    with pytest.raises(DataError, match=r"leaving 1 to train on; .* \(more rows\)"):
        prepare(load(tmp_path), params())


def test_values_too_large_are_refused_by_name_without_a_numpy_warning(tmp_path: Path) -> None:
    # before the one-line error, numpy printed "RuntimeWarning: invalid value encountered in reduce" (the variance
    # of 1e308) or "overflow encountered in cast" (a held-out 1e100, standardized by the training rows') on stderr
    import warnings

    write_csv(tmp_path, "a.csv", "x,y", [f"{[1e308, -1e308][i % 2]},{lab}" for i, lab in enumerate(labels(40))])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(DataError, match="its training variance overflows a float64"):
            run(tmp_path, params())
    rows = [f"{1e100 if i == 7 else (i % 10) / 10},{lab}" for i, lab in enumerate(labels(60))]
    write_csv(tmp_path, "a.csv", "x,y", rows)
    p = params(RANDOM_SEED="11")  # row 7 held out: the training rows' std is about 0.3
    prepared = prepare(load(tmp_path), p)
    assert prepared.split[7] == 1
    rules, kept = fit_rules(prepared, p)
    columns = {c.name: c for c in prepared.columns}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(DataError, match="too large for the float32 feature matrix"):
            write_encoded(str(tmp_path / "m.parquet"), rules, columns, kept, prepared.target, prepared.split)
