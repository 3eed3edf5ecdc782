"""The pure feature-engineering transform (no I/O): fitting each feature's rule on the training rows, selection
(MAX_FEATURES) and encoding. The rows come prepared (:mod:`ml8s.features.prepared`).

Kept apart from the pipeline step so it can be tested on tiny in-memory datasets.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial

import numpy as np
import numpy.typing as npt

from ml8s.data import slices
from ml8s.data.dataset import Column, FloatArray
from ml8s.data.slices import Picked, masked_into, picked_into
from ml8s.errors import DataError
from ml8s.features.candidates import kept_categories
from ml8s.features.prepared import Prepared
from ml8s.identity.params import RunParams
from ml8s.inference.rules import (
    OTHER,
    Buckets,
    FeatureKind,
    FeatureRule,
    bucket,
    encode_columns,
    present_labels,
)
from ml8s.threads import COLUMN_THREADS, ThreadArrays, in_order

__all__ = ["encode", "fit_rules", "hidden_categories", "mean_and_variance"]


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
    train = Picked(prepared.split == 0)  # taken from every column: its rows' indices made once
    work = _Work(len(train.mask), train.count)
    fit = partial(_fit_statistics, train=train, work=work)
    results = in_order(fit, prepared.columns, threads=COLUMN_THREADS, name="fit")
    del fit, work  # each thread's arrays
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


def _fit_statistics(column: Column, train: Picked, work: _Work) -> tuple[list[_Fitted], dict[str, list[str]]]:
    """Every candidate feature of ``column`` with its training statistics, and its kept categories if it has
    any (``{column: kept}``)."""
    kept: dict[str, list[str]] = {}
    # values near float64's limit sum to inf (and inf - inf is NaN): refused by name below, not a RuntimeWarning
    # on stderr before the one-line error
    with np.errstate(over="ignore", invalid="ignore"):
        features = list(_fit_column_stats(column, train, kept, work))
    return features, kept


def _fit_column_stats(column: Column, train: Picked, kept: dict[str, list[str]], work: _Work) -> Iterator[_Fitted]:
    for rule, observed, peak in _fit_column(column, train, kept, work):
        if isinstance(observed, Flags):  # a feature of 0s and 1s
            mean, variance = flag_mean_and_variance(observed.flags, work.floats(len(observed.flags)))
        else:
            mean, variance = mean_and_variance(observed)  # consumes ``observed``: its own copy of the training rows
        del observed
        # numpy's std is the square root of its var, correctly rounded as math.sqrt is: one pass fewer
        mean, std = (mean, math.sqrt(variance)) if rule.kind == "numeric" else (0.0, 0.0)
        if not (math.isfinite(variance) and math.isfinite(mean)):
            raise _too_large(rule.source, peak, "its training variance overflows a float64", "1e154")
        yield rule, variance, mean, std, peak


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
        kept = kept_categories(column)
        if set(kept) - named:
            hidden[column.name] = kept
    return dict(sorted(hidden.items()))


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


@dataclass(frozen=True)
class Flags:
    """A feature's values on the training rows that are 0 or 1 (one-hot, missing indicator), as booleans."""

    flags: npt.NDArray[np.bool_]


def flag_mean_and_variance(flags: npt.NDArray[np.bool_], work: FloatArray) -> tuple[float, float]:
    """:func:`mean_and_variance` of ``flags.astype(np.float64)``, bit for bit, in two passes instead of five.

    A sum of 0s and 1s is exact in any order (an integer below 2**53 at every step), so the mean is the count of
    1s over the rows, the same float numpy's pairwise sum divided. The squared deviations take two values, each
    the same float numpy's elementwise subtract and square make; they are laid out in ``work`` (as long as
    ``flags``) and summed by the same pairwise sum over the same sequence (tests/test_scale_memory.py).
    """
    rows = len(flags)
    if not rows:
        return mean_and_variance(flags.astype(np.float64))
    mean = np.float64(np.count_nonzero(flags)) / rows
    low, high = np.square(np.subtract(np.float64(0.0), mean)), np.square(np.subtract(np.float64(1.0), mean))
    squares = np.array([low, high])
    for start in range(0, rows, slices.CODE_SLICE):  # a slice's intp copy of the flags is a small temporary
        np.take(
            squares,
            flags[start : start + slices.CODE_SLICE].view(np.uint8),
            out=work[start : start + slices.CODE_SLICE],
            mode="wrap",
        )
    return float(mean), float(np.add.reduce(work) / rows)


def _fit_column(
    column: Column, train: Picked, kept: dict[str, list[str]], work: _Work
) -> Iterator[tuple[FeatureRule, FloatArray | Flags, float]]:
    """The candidate features of one column, one at a time: its rule, its (unscaled) values on the training rows
    (the rules applied to the column's training rows alone: a float64 column of every row less at the step's
    peak, 160 MiB at 20M rows) and its largest magnitude over every row (a numeric feature's; the other kinds'
    values are 0 or 1). Records a categorical's kept set.

    Each feature's values are made in ``work``'s arrays, which the caller consumes before asking for the next:
    the same values as numpy's own ``values[train]``, ``astype``, ``==`` (each step numpy's), without an array of
    fresh memory per feature."""
    rows = work.train_rows
    if column.kind == "categorical":
        kept[column.name] = kept_categories(column)
        present = present_labels(column, kept[column.name])  # a category of any row makes a feature
        codes = picked_into(np.asarray(column.values, dtype=np.int32), train, work.codes())  # int32 already: no copy
        coded = Column(name=column.name, kind=column.kind, values=codes, categories=column.categories)
        in_train = bucket(coded, kept[column.name], out=codes)  # bucketed in place
        for category in present:
            rule = FeatureRule(name=f"{column.name}={category}", source=column.name, kind="onehot", category=category)
            yield rule, _onehot(in_train, category, work), 1.0
        return
    values = column.values.astype(np.float64, copy=False)  # float64 already: no copy
    missing = np.isnan(values, out=work.every(0))
    any_missing = bool(missing.any())
    # ``feature_values`` of the column's training rows (the test holds them equal), imputed where they are taken
    missing_in_train = picked_into(missing, train, work.in_train())
    if missing_in_train.any():
        seen = np.logical_and(train.mask, np.logical_not(missing, out=work.every(1)), out=work.every(1))
        observed = masked_into(values, seen, work.floats(rows))
        fill = float(observed.mean()) if len(observed) else 0.0
        imputed = picked_into(values, train, work.floats(rows))
        np.copyto(imputed, fill, where=missing_in_train)
    else:  # the training rows observed are the training rows: their mean, taken once
        imputed = picked_into(values, train, work.floats(rows))
        fill = float(imputed.mean())
    kind: FeatureKind = "boolean" if column.kind == "boolean" else "numeric"
    rule = FeatureRule(name=column.name, source=column.name, kind=kind, impute=fill)
    peak = _largest(values, fill if any_missing else None) if kind == "numeric" else 1.0
    yield rule, imputed, peak
    if any_missing:
        indicator = FeatureRule(name=f"{column.name}__missing", source=column.name, kind="indicator")
        yield indicator, Flags(missing_in_train), 1.0


def _onehot(buckets: Buckets, category: str, work: _Work) -> Flags:
    """``buckets.onehot(category)`` as :class:`Flags`, made in ``work``."""
    flags = work.in_train()
    if category not in buckets.labels:
        flags.fill(False)
        return Flags(flags)
    return Flags(np.equal(buckets.rows, buckets.labels.index(category), out=flags))


class _Work:
    """The arrays one fitting thread makes a column's features in, made once per thread and reused for every
    feature: at 20M rows each feature's values were 128 MiB of fresh memory, faulted in and zeroed by the kernel
    (about 2 CPU s of the features step)."""

    def __init__(self, rows: int, train_rows: int) -> None:
        self.rows, self.train_rows = rows, train_rows
        self._arrays = ThreadArrays()

    def floats(self, rows: int) -> FloatArray:
        """The first ``rows`` of this thread's float64 array of the training rows."""
        return self._arrays.get("floats", self.train_rows, np.float64)[:rows]

    def codes(self) -> npt.NDArray[np.int32]:
        """This thread's int32 array of the training rows."""
        return self._arrays.get("codes", self.train_rows, np.int32)

    def in_train(self) -> npt.NDArray[np.bool_]:
        """This thread's bool array of the training rows."""
        return self._arrays.get("in_train", self.train_rows, np.bool_)

    def every(self, which: int) -> npt.NDArray[np.bool_]:
        """This thread's bool array ``which`` (0 or 1) of every row."""
        return self._arrays.get(f"every{which}", self.rows, np.bool_)


def _largest(values: FloatArray, fill: float | None) -> float:
    """The largest magnitude of ``values`` (NaN = missing) with the missing ones ``fill``, 0 included: the
    ``max(v.max(initial=0), -v.min(initial=0))`` of the imputed column, without making it (fmax and fmin skip
    NaN; max and min are exact, so the float is the same)."""
    high = float(np.fmax.reduce(values, initial=0.0))
    low = float(np.fmin.reduce(values, initial=0.0))
    if fill is not None:
        high, low = max(high, fill), min(low, fill)
    return max(high, -low)
