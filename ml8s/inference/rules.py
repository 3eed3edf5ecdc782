"""Feature rules: how one typed column becomes feature values. Training and serving run this same code.

Feature engineering fits a :class:`FeatureRule` per feature column (``features/feature_schema.json`` lists
them, sorted by name) and builds its matrix with :func:`encode_columns`; predicting on raw rows applies the
recorded rules with the same function, so the two cannot disagree. The rules:

- numeric and boolean columns: a missing value becomes ``impute`` (the training rows' mean); a numeric
  feature with ``scale_mean``/``scale_std`` is then standardized, ``(value - scale_mean) / scale_std``;
- ``indicator`` features (``{column}__missing``) are 1.0 where the value is missing, else 0.0;
- categorical columns: a missing value is the category ``__missing__``; a value outside the column's kept
  categories (the ``MAX_CATEGORIES`` most frequent) is ``__other__``; each ``onehot`` feature
  (``{column}={category}``) is 1.0 where the value is its category, else 0.0.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict

from ml8s.data.columns import Column, FloatArray
from ml8s.data.slices import mapped_codes
from ml8s.errors import InferenceError

MAX_CATEGORIES = 32  # one-hot width cap per column; rarer categories share "__other__"
OTHER = "__other__"
MISSING = "__missing__"
# The encoder's bucket names: a category spelled so would share its bucket's one-hot feature (refused as data).
BUCKETS = {
    MISSING: "the one-hot bucket of missing values",
    OTHER: f"the one-hot bucket of the categories beyond a column's {MAX_CATEGORIES} most frequent",
}

FeatureKind = Literal["numeric", "boolean", "indicator", "onehot"]


class FeatureRule(BaseModel):
    """One feature column: its name, source column, kind and fitted statistics (an entry of the schema)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    source: str
    kind: FeatureKind
    category: str | None = None
    impute: float | None = None
    scale_mean: float | None = None
    scale_std: float | None = None
    train_variance: float | None = None

    def record(self) -> dict[str, object]:
        """The entry ``feature_schema.json`` lists: set fields only, keys sorted."""
        return dict(sorted(self.model_dump(exclude_none=True).items()))


@dataclass(frozen=True)
class Buckets:
    """A categorical column's rows by bucket: ``rows[i]`` indexes ``labels`` (a kept category, ``__missing__``
    or ``__other__``). Array operations on the codes, never a Python object per cell."""

    labels: tuple[str, ...]
    rows: npt.NDArray[np.int32]

    def onehot(self, category: str | None) -> FloatArray:
        if category not in self.labels:
            return np.zeros(len(self.rows), dtype=np.float64)
        return np.asarray(self.rows == self.labels.index(category), dtype=np.float64)


def category_counts(column: Column) -> dict[str, int]:
    """How many rows hold each category as text (``__missing__`` where missing), categories that occur only."""
    counts: dict[str, int] = {}
    for value, count in column.counts().items():
        text = MISSING if value is None else value
        counts[text] = counts.get(text, 0) + count
    return counts


def bucket(column: Column, kept: Collection[str], *, out: npt.NDArray[np.int32] | None = None) -> Buckets:
    """Each value itself if it is a kept category, else ``__other__``; a missing value is ``__missing__``. The
    rows' buckets are made in ``out`` when given (the column's own codes may be: each slice is read first)."""
    per_code = _labels_per_code(column, kept)
    labels = tuple(sorted(set(per_code)))
    lut = np.array([labels.index(label) for label in per_code], dtype=np.int32)
    return Buckets(labels=labels, rows=mapped_codes(lut, column.values, out=out))


def present_labels(column: Column, kept: Collection[str]) -> list[str]:
    """The labels of :func:`bucket` that some row has, sorted, from the column's code counts: a label is some
    row's when a code that becomes it occurs, so the rows need not be bucketed (one counting pass over the codes
    instead of a mapping pass and a counting pass)."""
    per_code = _labels_per_code(column, kept)  # the last entry: code -1, missing
    counts = column.code_counts()  # code -1's count first
    return sorted({per_code[i - 1] for i in np.flatnonzero(counts).tolist()})


def _labels_per_code(column: Column, kept: Collection[str]) -> list[str]:
    return [c if c in kept else OTHER for c in (*column.category_list(), MISSING)]


def feature_values(rule: FeatureRule, column: Column, categories: Buckets | None = None) -> FloatArray:
    """The feature ``rule`` of ``column``; ``categories`` is the bucketed categorical column."""
    if rule.kind == "onehot":
        if categories is None:
            raise InferenceError(f"feature {rule.name!r} is one-hot; expected its column's bucketed categories")
        return categories.onehot(rule.category)
    missing = column.missing()
    if rule.kind == "indicator":
        return missing.astype(np.float64)
    if rule.impute is None:
        raise InferenceError(f"feature {rule.name!r} is a {rule.kind} value; expected its impute value")
    values = np.where(missing, rule.impute, column.values.astype(np.float64, copy=False))
    if rule.scale_mean is not None and rule.scale_std is not None:
        values = (values - rule.scale_mean) / rule.scale_std
    return np.asarray(values, dtype=np.float64)


Float32Array = npt.NDArray[np.float32]
BoolArray = npt.NDArray[np.bool_]


def feature_into(
    rule: FeatureRule,
    column: Column,
    categories: Buckets | None,
    out: Float32Array,
    work: FloatArray,
    mask: BoolArray,
) -> None:
    """:func:`feature_values` of the rule, cast to float32 into ``out``: the same values (each step numpy's, in
    the same order, in place), made in ``work`` (float64) and ``mask``, each as long as ``out``, which a caller
    reuses from one feature to the next: no array is made per feature (at 20M rows, 640 features' arrays of a
    row group each, and as many page faults on fresh memory)."""
    if rule.kind == "onehot":
        if categories is None:
            raise InferenceError(f"feature {rule.name!r} is one-hot; expected its column's bucketed categories")
        if rule.category not in categories.labels:
            out.fill(0.0)
            return
        np.equal(categories.rows, categories.labels.index(rule.category), out=mask)
        np.copyto(out, mask)
        return
    if column.kind == "categorical":
        np.less(column.values, 0, out=mask)
    else:
        np.isnan(column.values, out=mask)
    if rule.kind == "indicator":
        np.copyto(out, mask)
        return
    if rule.impute is None:
        raise InferenceError(f"feature {rule.name!r} is a {rule.kind} value; expected its impute value")
    np.copyto(work, column.values)
    np.copyto(work, rule.impute, where=mask)
    if rule.scale_mean is not None and rule.scale_std is not None:
        np.subtract(work, rule.scale_mean, out=work)
        np.divide(work, rule.scale_std, out=work)
    with np.errstate(over="ignore"):  # beyond float32: found in the matrix and refused by name, no RuntimeWarning
        np.copyto(out, work, casting="same_kind")


def encode_columns(
    rules: Sequence[FeatureRule], columns: Mapping[str, Column], kept: Mapping[str, Collection[str]], rows: int
) -> FloatArray:
    """The feature matrix (``rows`` x ``len(rules)``, float64) in the order of ``rules``.

    Args:
        rules: the features, in matrix column order.
        columns: typed columns by name; every rule's source must be among them.
        kept: the kept categories of each categorical source column.
        rows: the number of rows (every column has that many values).
    """
    matrix = np.empty((rows, len(rules)), dtype=np.float64)
    for i, values in enumerate(encode_each(rules, columns, kept)):
        matrix[:, i] = values
    return matrix


def encode_each(
    rules: Sequence[FeatureRule], columns: Mapping[str, Column], kept: Mapping[str, Collection[str]]
) -> Iterator[FloatArray]:
    """The matrix's columns one at a time (float64), in the order of ``rules``: what :func:`encode_columns`
    fills its matrix with, for writers that need one column at a time."""
    for rule, column, categories in sources(rules, columns, kept):
        yield feature_values(rule, column, categories)


def sources(
    rules: Sequence[FeatureRule], columns: Mapping[str, Column], kept: Mapping[str, Collection[str]]
) -> Iterator[tuple[FeatureRule, Column, Buckets | None]]:
    """Each rule with its source column and, for a one-hot feature, the column's bucketed rows (bucketed once per
    column)."""
    buckets: dict[str, Buckets] = {}
    for rule in rules:
        column = columns[rule.source]
        categories = None
        if rule.kind == "onehot":
            if rule.source not in buckets:
                buckets[rule.source] = bucket(column, kept[rule.source])
            categories = buckets[rule.source]
        yield rule, column, categories
