"""Step one of feature engineering (no I/O): the rows kept for training, their classes and split.

:func:`prepare` checks the columns against the configuration, drops rows without a target, samples
SAMPLE_ROWS and draws the TEST_SIZE split (both seeded), and keeps each feature column's rows; the features
step then fits and encodes them (:mod:`ml8s.features.rules`).
"""

from __future__ import annotations

import contextlib
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from types import TracebackType

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict

from ml8s.data.dataset import Column, Dataset
from ml8s.data.missing import DataWarning
from ml8s.data.slices import CODE_SLICE, mapped_codes, slot_counts, taken_into
from ml8s.errors import DataError
from ml8s.features import column_names
from ml8s.features.candidates import feature_names
from ml8s.features.column_names import check_feature_names, resolve_excluded, resolve_target
from ml8s.identity.params import RunParams
from ml8s.inference.rules import MAX_CATEGORIES
from ml8s.threads import COLUMN_THREADS, in_order

__all__ = ["ClassArray", "IntArray", "Prepared", "SplitAhead", "SplitArray", "prepare"]

IntArray = npt.NDArray[np.int64]
# Each kept row's class index and split: int32 and int8 (at 20M rows, 80 and 20 MiB of fresh pages, not 160 each)
ClassArray = npt.NDArray[np.int32]
SplitArray = npt.NDArray[np.int8]
MIN_TRAIN_ROWS = 2  # _check_split


class Prepared(BaseModel):
    """Rows kept for training, their class indices and split, and the feature columns to encode."""

    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True)

    target_column: str
    classes: tuple[str, ...]
    target: ClassArray
    split: SplitArray
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


class SplitAhead:
    """The TEST_SIZE split, drawn on a thread of its own: by :func:`prepare` beside keeping the columns' rows, and,
    as a :class:`~ml8s.data.dataset.Lead` of :func:`~ml8s.data.dataset.load_dataset`, while the dataset's other
    columns are still typed.

    The split depends only on how many rows are kept (and TEST_SIZE and the seed), which the target column alone
    tells; its shuffle runs on one core (3 s at 20M rows), and drawn after every column was typed it was the
    longest part of preparing the rows. A split is drawn once for a number of rows, TEST_SIZE and seed: where
    :func:`prepare` asks for another (it cannot: the count is the one it makes), that one is drawn then. A context
    manager: leaving it waits for a split being drawn, so no thread outlives it.
    """

    def __init__(self, params: RunParams) -> None:
        self._params = params
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="ml8s-split")
        self._drawn: tuple[tuple[int, float, int], Future[SplitArray]] | None = None

    def __enter__(self) -> SplitAhead:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)

    def pick(self, names: tuple[str, ...]) -> str | None:
        """The target column (None where TARGET_COLUMN names none: :func:`prepare` says so)."""
        try:
            return resolve_target(names, self._params.target_column)
        except DataError:
            return None

    def take(self, column: Column) -> None:
        """Start drawing the split of the rows :func:`prepare` will keep: those with a target, SAMPLE_ROWS of them."""
        kept = _rows_kept(len(column.values) - int(np.count_nonzero(column.missing())), self._params)
        if kept >= 2:  # fewer: prepare() refuses the rows
            self.draw(kept, self._params.test_size, self._params.random_seed)

    def draw(self, rows: int, test_size: float, seed: int) -> Future[SplitArray]:
        """The split of ``rows`` kept rows: the one being drawn when it is for these, else drawn now."""
        key = (rows, test_size, seed)
        if self._drawn is None or self._drawn[0] != key:
            self._drawn = (key, self._pool.submit(_split, rows, test_size, seed))
        return self._drawn[1]


def prepare(data: Dataset, params: RunParams, *, consume: bool = False, ahead: SplitAhead | None = None) -> Prepared:
    """Validate columns, drop rows without a target, sample SAMPLE_ROWS and split TEST_SIZE, all seeded.

    With ``consume`` the kept rows are moved to the front of ``data``'s own arrays instead of copied (``data``
    must not be used afterwards): the rows are then held once, not twice, while they are prepared. ``ahead``: the
    split drawn while ``data`` was typed, if it was.
    """
    target_name = resolve_target(data.names, params.target_column)
    excluded = resolve_excluded(data.names, params.exclude_columns)
    if target_name in excluded:
        raise DataError(f"EXCLUDE_COLUMNS contains the target {target_name!r}; expected feature columns only")
    data.refuse_unread(excluded, (target_name,))  # a Parquet type predicting cannot read alike, as the target
    target_col = data.column(target_name)
    keep = ~target_col.missing()
    labels, classes = _encode_target(target_col, keep)
    count = int(np.count_nonzero(keep))
    # None: every row is kept (the common case), which needs no index of every row and moves no row
    rows: IntArray | None = None if count == len(keep) else np.flatnonzero(keep)
    present = count  # the rows with a target, before SAMPLE_ROWS
    if _rows_kept(count, params) < count:  # SAMPLE_ROWS of them, seeded
        chosen = np.sort(np.random.default_rng(params.random_seed).permutation(count)[: params.sample_rows])
        rows = chosen if rows is None else rows[chosen]
        count = len(rows)
    sampled = f"SAMPLE_ROWS={params.sample_rows} of the {present} rows with a target" if count < present else ""
    if count < 2:
        raise DataError(
            f"{sampled} keeps {count} row(s); expected at least 2 (a larger SAMPLE_ROWS)"
            if sampled
            else f"TARGET_COLUMN={params.target_column!r} has a value in only {count} row(s); expected at least 2"
        )
    # every kept row's class, as int32 (``labels`` already is, when every row is kept)
    target = labels if rows is None else taken_into(labels, rows, np.empty(count, dtype=np.int32))
    del labels  # a column of every row (80 MiB at 20M rows): not held longer than it is needed
    # class indices, >= 0, counted a slice at a time: np.bincount of every row made an int64 copy of it (0.28 s at
    # 20M rows, with nothing beside it)
    per_class = slot_counts(target, len(classes))
    present = int(np.count_nonzero(per_class))
    if present < 2:
        raise DataError(f"TARGET_COLUMN={params.target_column!r} has one class in the rows kept; expected 2 or more")
    _check_classes(params.target_column, present, count, classes)
    dropped: dict[str, str] = dict.fromkeys(excluded, "EXCLUDE_COLUMNS")
    candidates = [c for c in data.columns if c.name != target_name and c.name not in dropped]
    reserved = column_names.reserved_values(candidates, data.rows_per_file)  # in every row, before they move

    _check_split(count, params.test_size, "a larger SAMPLE_ROWS" if sampled else "more rows")
    keep_rows = partial(_keep_rows, rows=rows, consume=consume)
    # The split's permutation runs on one core (2 s at 20M rows) and releases the GIL: drawn while the columns'
    # rows are kept, on the cores their threads leave it (or before, while the columns were typed: ``ahead``).
    with contextlib.ExitStack() as stack:
        splits = ahead if ahead is not None else stack.enter_context(SplitAhead(params))
        drawn = splits.draw(count, params.test_size, params.random_seed)
        results = in_order(keep_rows, candidates, threads=COLUMN_THREADS, name="keep")
        split = drawn.result()
        _check_trained_classes(params, classes, per_class, target, split)
    del keep_rows, rows  # before the features' names are made: the row indices are a column's worth of int64
    columns: list[Column] = []
    for candidate, kept in zip(candidates, results, strict=True):
        if isinstance(kept, str):
            dropped[candidate.name] = kept
        else:
            column_names.refuse_reserved(reserved, kept)
            columns.append(kept)
    del results
    data.refuse_unread(excluded, tuple(column.name for column in columns))  # ... or as a feature
    if not columns:
        raise _nothing_left(dropped)
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
        rows_missing_target=len(keep) - int(np.count_nonzero(keep)),
        rows_per_file=data.rows_per_file,
        warnings=tuple(w for w in data.warnings if w.column not in excluded),
    )


def _check_classes(target: str, present: int, rows: int, classes: tuple[str, ...]) -> None:
    """Refuse a target with more classes than half the rows kept (and more than MAX_CATEGORIES): a number to
    predict (regression data), or an identifier, given to a classifier. It trained a class per value, most of
    them held by one row, so the held-out rows' classes were never seen in training (accuracy 0, reported as a
    success), and its logits took held-out rows x classes float64 (16 GiB at 100k distinct values)."""
    if present <= MAX_CATEGORIES or 2 * present <= rows:
        return
    examples = ", ".join(classes[:3])
    raise DataError(
        f"TARGET_COLUMN={target!r} has {present} distinct values in the {rows} rows kept ({examples}, ...); expected "
        "class labels each held by two rows or more on average: ml8s trains classifiers, and a number to predict "
        "(regression) or an identifier is not one (bin the values into classes, or choose another TARGET_COLUMN)"
    )


def _check_trained_classes(
    params: RunParams, classes: tuple[str, ...], per_class: IntArray, target: ClassArray, split: SplitArray
) -> None:
    """Refuse a class the rows kept hold but the training rows do not (all held out by TEST_SIZE, or left out by
    SAMPLE_ROWS): the model got an output for it that no row trained, and the run succeeded."""
    trained = np.zeros(len(classes), dtype=np.int64)
    for start in range(0, len(target), CODE_SLICE):  # a slice at a time: no mask or copy of every kept row
        part = target[start : start + CODE_SLICE][split[start : start + CODE_SLICE] == 0]
        trained += np.bincount(part, minlength=len(classes))
    absent = [f"{classes[i]!r} ({per_class[i]} row(s) kept)" for i in np.flatnonzero(trained == 0).tolist()]
    if absent:
        more = f" and {len(absent) - 10} more" if len(absent) > 10 else ""
        raise DataError(
            f"TARGET_COLUMN={params.target_column!r}: class(es) {', '.join(absent[:10])}{more} have no row in the "
            f"training split (TEST_SIZE={params.test_size:g}, RANDOM_SEED={params.random_seed}); expected every "
            "class in the training rows: a smaller TEST_SIZE, more rows of that class (or a larger SAMPLE_ROWS), or "
            "drop its rows"
        )


def _nothing_left(dropped: dict[str, str], shown: int = 10) -> DataError:
    """No feature column is left: each dropped column is named with why, an identifier's too (it was said to be
    dropped by EXCLUDE_COLUMNS or for being empty, which it was not)."""
    listed = [f"{name!r} ({why})" for name, why in sorted(dropped.items())]
    more = f" and {len(listed) - shown} more" if len(listed) > shown else ""
    return DataError(
        f"no feature columns are left after EXCLUDE_COLUMNS and dropped columns: {', '.join(listed[:shown])}{more}; "
        "expected at least one (a categorical column whose every value is distinct is an identifier, never a feature)"
    )


def _keep_rows(column: Column, rows: IntArray | None, consume: bool) -> Column | str:
    """``column`` at the kept ``rows`` (None: all of them), or why it is dropped."""
    if rows is None:  # every row: the column itself, or a copy of its values (no index of every row)
        kept = column
        if not consume:
            kept = Column(name=column.name, kind=column.kind, values=column.values.copy(), categories=column.categories)
    else:
        kept = column.compact(rows) if consume else column.take(rows)
    count = len(kept.values)
    if kept.all_missing():
        return "all values missing"
    if kept.kind == "categorical" and count > MAX_CATEGORIES and len(kept.counts()) == count:
        return "identifier: every value distinct"
    return kept


def _encode_target(column: Column, keep: npt.NDArray[np.bool_]) -> tuple[ClassArray, tuple[str, ...]]:
    """Every row's class index (-1 where the target is missing) and the classes in sorted order: numerically for
    numbers, by code point for text. ``keep``: the rows whose target is present (``~column.missing()``)."""
    if column.kind == "categorical":
        # a category is a class when some row holds it: the rows kept are those whose code is one (``keep``)
        occurs = column.code_counts()[1:] > 0
        categories = column.category_list()
        present = [categories[i] for i in np.flatnonzero(occurs)]  # the categories are sorted
        index = np.full(len(categories) + 1, -1, dtype=np.int32)  # the last slot: code -1, missing
        index[np.flatnonzero(occurs)] = np.arange(len(present))
        return mapped_codes(index, column.values), tuple(present)  # int32, a slice at a time: no int64 copies
    values = column.values.astype(np.float64)
    uniques = np.unique(values[keep])
    if len(uniques) == 0:  # no row has a target: prepare() reports it
        return np.full(len(values), -1, dtype=np.int32), ()
    names = tuple(_number_label(float(u), column.kind) for u in uniques)
    positions = np.searchsorted(uniques, np.where(keep, values, uniques[0]))
    return np.where(keep, positions, -1).astype(np.int32), names


def _rows_kept(present: int, params: RunParams) -> int:
    """How many rows preparing keeps of ``present`` rows with a target: SAMPLE_ROWS of them where it is fewer."""
    return present if params.sample_rows is None else min(present, params.sample_rows)


def _number_label(value: float, kind: str) -> str:
    if kind == "boolean":
        return "true" if value else "false"
    return str(int(value)) if value.is_integer() else repr(value)


def _test_rows(n: int, test_size: float) -> int:
    """Rows held out: TEST_SIZE of ``n``, rounded, at least 1 and at most ``n - 1``."""
    return min(max(round(n * test_size), 1), n - 1)


def _check_split(n: int, test_size: float, more: str = "more rows") -> None:
    """Refuse a split whose training side would hold one row (TEST_SIZE=0.999, or 2 rows kept): the held-out side
    is never empty (at least 1 row), but a model trained on a single row learnt nothing, silently."""
    held_out = _test_rows(n, test_size)
    if n - held_out < MIN_TRAIN_ROWS:
        fix = more if n <= MIN_TRAIN_ROWS else f"a smaller TEST_SIZE, or {more}"
        raise DataError(
            f"TEST_SIZE={test_size:g} of the {n} rows kept holds out {held_out}, leaving {n - held_out} to train on; "
            f"expected at least {MIN_TRAIN_ROWS} training rows and 1 held-out row ({fix})"
        )


def _split(n: int, test_size: float, seed: int) -> SplitArray:
    n_test = _test_rows(n, test_size)
    # ``default_rng([seed, 1]).permutation(n)``, shuffled as int32 where the rows' indices fit: the shuffle draws
    # the same swaps whatever the item size (tests/test_scale_memory.py), and half the bytes miss the caches
    # half as often (20M rows: 2.0 s against 2.6 s, on the step's critical path)
    order = np.arange(n, dtype=np.int32 if n <= np.iinfo(np.int32).max else np.int64)
    np.random.default_rng([seed, 1]).shuffle(order)
    split = np.zeros(n, dtype=np.int8)
    split[order[:n_test]] = 1
    return split
