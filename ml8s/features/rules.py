"""The pure feature-engineering transform (no I/O): target, sampling, split, encoding, selection.

Kept apart from the pipeline step so it can be tested on tiny in-memory datasets.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from functools import partial

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict

from ml8s.data.dataset import Column, Dataset, FloatArray
from ml8s.data.missing import DataWarning
from ml8s.errors import DataError
from ml8s.features.column_names import check_feature_names, resolve_excluded, resolve_target
from ml8s.identity.params import RunParams
from ml8s.inference.rules import (
    MAX_CATEGORIES,
    MISSING,
    OTHER,
    FeatureKind,
    FeatureRule,
    bucket,
    category_counts,
    encode_columns,
    feature_values,
    present_labels,
)
from ml8s.threads import COLUMN_THREADS, in_order

__all__ = [
    "MAX_CATEGORIES",
    "MISSING",
    "OTHER",
    "IntArray",
    "Prepared",
    "encode",
    "fit_rules",
    "hidden_categories",
    "mean_and_variance",
    "prepare",
]

IntArray = npt.NDArray[np.int64]


class Prepared(BaseModel):
    """Rows kept for training, their class indices and split, and the feature columns to encode."""

    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True)

    target_column: str
    classes: tuple[str, ...]
    target: IntArray
    split: IntArray
    columns: tuple[Column, ...]
    dropped: dict[str, str]
    rows_read: int
    rows_missing_target: int
    rows_per_file: dict[str, int]
    warnings: tuple[DataWarning, ...] = ()

    @property
    def train_rows(self) -> int:
        return int((self.split == 0).sum())

    @property
    def test_rows(self) -> int:
        return int((self.split == 1).sum())

    def row_counts(self) -> dict[str, int]:
        return {
            "read": self.rows_read,
            "missing_target_dropped": self.rows_missing_target,
            "kept": len(self.target),
            "train": self.train_rows,
            "test": self.test_rows,
        }


def prepare(data: Dataset, params: RunParams, *, consume: bool = False) -> Prepared:
    """Validate columns, drop rows without a target, sample SAMPLE_ROWS and split TEST_SIZE, all seeded.

    With ``consume`` the kept rows are moved to the front of ``data``'s own arrays instead of copied (``data``
    must not be used afterwards): the rows are then held once, not twice, while they are prepared.
    """
    target_name = resolve_target(data.names, params.target_column)
    excluded = resolve_excluded(data.names, params.exclude_columns)
    if target_name in excluded:
        raise DataError(f"EXCLUDE_COLUMNS contains the target {target_name!r}; expected feature columns only")
    target_col = data.column(target_name)
    keep = ~target_col.missing()
    labels, classes = _encode_target(target_col, keep)
    rows = np.flatnonzero(keep)
    if params.sample_rows is not None and params.sample_rows < len(rows):
        chosen = np.random.default_rng(params.random_seed).permutation(len(rows))[: params.sample_rows]
        rows = rows[np.sort(chosen)]
    if len(rows) < 2:
        raise DataError(
            f"TARGET_COLUMN={params.target_column!r} has a value in only {len(rows)} row(s); expected at least 2"
        )
    target = labels[rows].astype(np.int64, copy=False)
    del labels  # int64 arrays of every row (160 MiB each at 20M rows): none is held longer than it is needed
    if np.count_nonzero(np.bincount(target)) < 2:  # class indices, >= 0 (was a Python list of every row's)
        raise DataError(f"TARGET_COLUMN={params.target_column!r} has one class in the rows kept; expected 2 or more")
    dropped: dict[str, str] = dict.fromkeys(excluded, "EXCLUDE_COLUMNS")
    candidates = [c for c in data.columns if c.name != target_name and c.name not in dropped]

    split = _split(len(rows), params.test_size, params.random_seed)
    keep_rows = partial(_keep_rows, rows=rows, consume=consume)
    results = in_order(keep_rows, candidates, threads=COLUMN_THREADS, name="keep")
    del keep_rows, rows  # before the features' names are made: the row indices are a column's worth of int64
    columns: list[Column] = []
    for candidate, kept in zip(candidates, results, strict=True):
        if isinstance(kept, str):
            dropped[candidate.name] = kept
        else:
            columns.append(kept)
    del results
    if not columns:
        raise DataError("no feature columns are left after EXCLUDE_COLUMNS and empty columns; expected at least one")
    names = in_order(feature_names, columns, threads=COLUMN_THREADS, name="names")
    check_feature_names(name for made in names for name in made)
    return Prepared(
        target_column=target_name,
        classes=classes,
        target=target,
        split=split,
        columns=tuple(columns),
        dropped=dropped,
        rows_read=data.rows,
        rows_missing_target=int((~keep).sum()),
        rows_per_file=data.rows_per_file,
        warnings=tuple(w for w in data.warnings if w.column not in excluded),
    )


def _keep_rows(column: Column, rows: IntArray, consume: bool) -> Column | str:
    """``column`` at the kept ``rows``, or why it is dropped."""
    kept = column.compact(rows) if consume else column.take(rows)
    if kept.missing().all():
        return "all values missing"
    if kept.kind == "categorical" and len(rows) > MAX_CATEGORIES and len(kept.counts()) == len(rows):
        return "identifier: every value distinct"
    return kept


def encode(prepared: Prepared, params: RunParams) -> tuple[FloatArray, list[dict[str, object]]]:
    """Encode every column, select MAX_FEATURES by training variance, standardize; columns sorted by name.

    The matrix is built by :func:`~ml8s.inference.rules.encode_columns` from the rules it records, the
    function that predicting on raw rows applies.
    """
    rules, kept = fit_rules(prepared, params)
    columns = {column.name: column for column in prepared.columns}
    matrix = encode_columns(rules, columns, kept, len(prepared.target))
    return matrix, [rule.record() for rule in rules]


def fit_rules(prepared: Prepared, params: RunParams) -> tuple[list[FeatureRule], dict[str, list[str]]]:
    """The feature rules (sorted by name) and each categorical column's kept categories.

    One candidate feature's float64 values exist at a time per column being fitted, and only its training rows':
    its training variance (and, for a numeric one, mean and standard deviation) are taken from them before the
    next is made, so fitting needs memory for a column's training rows per thread, not for the matrix.

    Columns are fitted two at a time (:func:`ml8s.threads.in_order`); the rules, and the error of the first column
    that fails, are those of fitting one column after the other.
    """
    train = prepared.split == 0
    results = in_order(partial(_fit_statistics, train=train), prepared.columns, threads=COLUMN_THREADS, name="fit")
    fitted: list[_Fitted] = []
    kept: dict[str, list[str]] = {}
    for features, categories in results:
        fitted.extend(features)
        kept.update(categories)
    if params.max_features is not None and params.max_features < len(fitted):
        fitted = sorted(fitted, key=lambda f: (-f[1], f[0].name))[: params.max_features]
    fitted.sort(key=lambda f: f[0].name)
    rules: list[FeatureRule] = []
    for rule, variance, mean, std, peak in fitted:
        rule = rule.model_copy(update={"train_variance": variance})
        if params.standardize and rule.kind == "numeric":
            std = std if std > 0 and math.isfinite(std) else 1.0
            rule = rule.model_copy(update={"scale_mean": mean, "scale_std": std})
        elif peak > FLOAT32_MAX:  # standardized values are bounded by the row count; raw ones are not
            raise _too_large(rule.source, peak, "the float32 feature matrix cannot hold them unscaled", "3.4e38")
        rules.append(rule)
    return rules, kept


_Fitted = tuple[FeatureRule, float, float, float, float]  # rule, training variance, mean, std, largest magnitude


def _fit_statistics(column: Column, train: npt.NDArray[np.bool_]) -> tuple[list[_Fitted], dict[str, list[str]]]:
    """Every candidate feature of ``column`` with its training statistics, and its kept categories if it has
    any (``{column: kept}``)."""
    kept: dict[str, list[str]] = {}
    fitted: list[_Fitted] = []
    for rule, observed, peak in _fit_column(column, train, kept):
        mean, variance = mean_and_variance(observed)  # consumes ``observed``: its own copy of the training rows
        del observed
        # numpy's std is the square root of its var, correctly rounded as math.sqrt is: one pass fewer
        mean, std = (mean, math.sqrt(variance)) if rule.kind == "numeric" else (0.0, 0.0)
        if not (math.isfinite(variance) and math.isfinite(mean)):
            raise _too_large(rule.source, peak, "its training variance overflows a float64", "1e154")
        fitted.append((rule, variance, mean, std, peak))
    return fitted, kept


FLOAT32_MAX = float(np.finfo(np.float32).max)


def _too_large(source: str, peak: float, why: str, limit: str) -> DataError:
    """A column whose values no feature can hold: refused while fitting, before the matrix is written (as an
    infinity it made the schema unwritable, or the training loss NaN)."""
    return DataError(
        f"column {source!r} has values too large to be a feature (largest magnitude {peak:.6g}): {why}; expected "
        f"magnitudes below {limit} (rescale the column, set STANDARDIZE=true, or list it in EXCLUDE_COLUMNS)"
    )


def hidden_categories(features: list[dict[str, object]], prepared: Prepared) -> dict[str, list[str]]:
    """The kept categories of each column whose ``__other__`` feature survived MAX_FEATURES while some kept
    categories' features did not: serving must know them to bucket a value as itself (no feature) rather
    than as ``__other__``. Empty in every other case (the features alone then say it)."""
    onehots: dict[str, set[str]] = {}
    for feature in features:
        if feature["kind"] == "onehot":
            onehots.setdefault(str(feature["source"]), set()).add(str(feature["category"]))
    hidden: dict[str, list[str]] = {}
    for column in prepared.columns:
        named = onehots.get(column.name)
        if column.kind != "categorical" or named is None or OTHER not in named:
            continue
        kept = _kept_categories(column)
        if set(kept) - named:
            hidden[column.name] = kept
    return dict(sorted(hidden.items()))


def _encode_target(column: Column, keep: npt.NDArray[np.bool_]) -> tuple[IntArray, tuple[str, ...]]:
    """Classes in sorted order: numerically for numbers, by code point for text."""
    if column.kind == "categorical":
        codes = np.asarray(column.values, dtype=np.int64)
        occurs = np.bincount(codes[keep & (codes >= 0)], minlength=len(column.categories)) > 0
        categories = column.category_list()
        present = [categories[i] for i in np.flatnonzero(occurs)]  # the categories are sorted
        index = np.full(len(categories) + 1, -1, dtype=np.int64)  # the last slot: code -1, missing
        index[np.flatnonzero(occurs)] = np.arange(len(present))
        return index[codes], tuple(present)
    values = column.values.astype(np.float64)
    uniques = np.unique(values[keep])
    if len(uniques) == 0:  # no row has a target: prepare() reports it
        return np.full(len(values), -1, dtype=np.int64), ()
    names = tuple(_number_label(float(u), column.kind) for u in uniques)
    positions = np.searchsorted(uniques, np.where(keep, values, uniques[0]))
    return np.where(keep, positions, -1).astype(np.int64), names


def _number_label(value: float, kind: str) -> str:
    if kind == "boolean":
        return "true" if value else "false"
    return str(int(value)) if value.is_integer() else repr(value)


def _split(n: int, test_size: float, seed: int) -> IntArray:
    n_test = min(max(round(n * test_size), 1), n - 1)
    order = np.random.default_rng([seed, 1]).permutation(n)
    split = np.zeros(n, dtype=np.int64)
    split[order[:n_test]] = 1
    return split


def feature_names(column: Column) -> list[tuple[str, str, str]]:
    """``(feature name, source column, how it is made)`` of every feature :func:`encode` makes of ``column``."""
    if column.kind == "categorical":
        categories = present_labels(column, _kept_categories(column))
        return [(f"{column.name}={c}", column.name, f"one-hot of its value {c!r}") for c in categories]
    made = [(column.name, column.name, "its values")]
    if column.missing().any():
        made.append((f"{column.name}__missing", column.name, "missing-value indicator"))
    return made


def mean_and_variance(values: FloatArray) -> tuple[float, float]:
    """``(values.mean(), values.var())``, bit for bit, computed in ``values`` itself, which it overwrites.

    numpy's ``var`` subtracts the mean into a new array as large as ``values`` (128 MiB for a feature's training
    rows at 20M rows, per fitting thread). These are its own steps, in its own order, on the same kernels: the
    mean (pairwise sum, divided by the count), the deviations, their squares, their pairwise sum divided by the
    count (tests/test_scale_memory.py holds the two to the same bits).
    """
    if not len(values):
        return float(values.mean()), float(values.var())  # NaN and numpy's warnings, as before
    mean = np.add.reduce(values) / len(values)
    np.subtract(values, mean, out=values)
    np.square(values, out=values)
    return float(mean), float(np.add.reduce(values) / len(values))


def _kept_categories(column: Column) -> list[str]:
    """The MAX_CATEGORIES most frequent values (ties by text), sorted: the rest share ``__other__``."""
    counts = category_counts(column)
    return sorted(sorted(counts, key=lambda c: (-counts[c], c))[:MAX_CATEGORIES])


def _fit_column(
    column: Column, train: npt.NDArray[np.bool_], kept: dict[str, list[str]]
) -> Iterator[tuple[FeatureRule, FloatArray, float]]:
    """The candidate features of one column, one at a time: its rule, its (unscaled) values on the training rows
    (the rules applied to the column's training rows alone: a float64 column of every row less at the step's
    peak, 160 MiB at 20M rows) and its largest magnitude over every row (a numeric feature's; the other kinds'
    values are 0 or 1). Records a categorical's kept set."""
    if column.kind == "categorical":
        kept[column.name] = _kept_categories(column)
        present = present_labels(column, kept[column.name])  # a category of any row makes a feature
        in_train = bucket(column.take(train), kept[column.name])  # the same labels: the column's categories
        for category in present:
            rule = FeatureRule(name=f"{column.name}={category}", source=column.name, kind="onehot", category=category)
            yield rule, in_train.onehot(category), 1.0
        return
    missing = column.missing()
    values = column.values.astype(np.float64, copy=False)  # float64 already: no copy
    observed = values[train & ~missing]
    fill = float(observed.mean()) if len(observed) else 0.0
    del observed  # not held while the features are fitted: a column's worth at 20M rows
    kind: FeatureKind = "boolean" if column.kind == "boolean" else "numeric"
    rule = FeatureRule(name=column.name, source=column.name, kind=kind, impute=fill)
    peak = _largest(values, fill if missing.any() else None) if kind == "numeric" else 1.0
    # ``feature_values`` of the column's training rows (the test holds them equal), imputed in the copy the
    # training rows are taken into: one array of them per thread at a time, not that copy and a second one
    imputed = values[train]
    np.copyto(imputed, fill, where=np.isnan(imputed))
    yield rule, imputed, peak
    del imputed
    if missing.any():
        indicator = FeatureRule(name=f"{column.name}__missing", source=column.name, kind="indicator")
        yield indicator, feature_values(indicator, column.take(train)), 1.0


def _largest(values: FloatArray, fill: float | None) -> float:
    """The largest magnitude of ``values`` (NaN = missing) with the missing ones ``fill``, 0 included: the
    ``max(v.max(initial=0), -v.min(initial=0))`` of the imputed column, without making it (fmax and fmin skip
    NaN; max and min are exact, so the float is the same)."""
    high = float(np.fmax.reduce(values, initial=0.0))
    low = float(np.fmin.reduce(values, initial=0.0))
    if fill is not None:
        high, low = max(high, fill), min(low, fill)
    return max(high, -low)
