"""The feature matrix's row groups, encoded into float32 buffers used again from one group to the next.

A row group's float32 features are a (features x rows) array, a feature's rows contiguous: the Parquet writer
takes a feature's rows without a copy and the scratch rows (:class:`~ml8s.features.matrix_mapped.SplitRows`) are
its transpose. Each feature is computed in a float64 work array and a mask reused too
(:func:`~ml8s.inference.rules.feature_into`). Made once, not per feature and group, the arrays' pages are
touched once: at 20M rows and 32 features the per-feature arrays were 1.2M page faults and 8 s of system time.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

import numpy as np
import numpy.typing as npt

from ml8s.data.columns import Column
from ml8s.errors import DataError
from ml8s.inference.rules import FeatureRule, feature_into, sources

Float32Array = npt.NDArray[np.float32]


class GroupBuffers:
    """Buffers for row groups of at most ``rows`` rows and ``features`` features. With ``alternate``, two group
    buffers are used in turn, so that a group can be written (by another thread) while the next is encoded; the
    caller waits for a group's write before it asks for the group after next."""

    def __init__(self, features: int, rows: int, *, alternate: bool) -> None:
        self.features, self.rows = features, rows
        self._groups: list[Float32Array] = []
        self._count = 2 if alternate else 1
        self._turn = 0
        self.work = np.empty(rows, dtype=np.float64)
        self.mask = np.empty(rows, dtype=np.bool_)

    def release(self) -> None:
        """Free the buffers (a later :meth:`take` makes them again)."""
        self._groups.clear()
        self.work, self.mask = np.empty(0, dtype=np.float64), np.empty(0, dtype=np.bool_)

    def take(self, rows: int) -> Float32Array:
        """The next group buffer, as a (features x ``rows``) view."""
        if len(self._groups) < self._count:
            self._groups.append(np.empty((self.features, self.rows), dtype=np.float32))
        group = self._groups[self._turn % len(self._groups)]
        self._turn = (self._turn + 1) % self._count
        return group[:, :rows]


def encode_group(
    rules: Sequence[FeatureRule],
    columns: Mapping[str, Column],
    kept: Mapping[str, Collection[str]],
    out: Float32Array,
    buffers: GroupBuffers,
) -> None:
    """One row group's features (``columns`` are its rows) into ``out`` (features x rows), in ``rules`` order.

    Raises:
        DataError: a feature's value is beyond float32's range (:func:`check_float32`).
    """
    rows = out.shape[1]
    work, mask = buffers.work[:rows], buffers.mask[:rows]
    for index, (rule, column, categories) in enumerate(sources(rules, columns, kept)):
        feature_into(rule, column, categories, out[index], work, mask)
        if rule.kind in ("numeric", "boolean"):  # one-hot and indicator features are 0 or 1
            check_float32(rule.name, out[index], work, mask)


def fill_group(
    names: Sequence[str], values: npt.NDArray[np.floating], out: Float32Array, buffers: GroupBuffers
) -> None:
    """A row group of a matrix held in memory (rows x features) into ``out`` (features x rows), as float32.

    Raises:
        DataError: a value is beyond float32's range (:func:`check_float32`).
    """
    rows = out.shape[1]
    for index, name in enumerate(names):
        with np.errstate(over="ignore"):  # beyond float32: refused by name just below, no RuntimeWarning on stderr
            np.copyto(out[index], values[:, index], casting="same_kind")
        check_float32(name, out[index], values[:, index], buffers.mask[:rows])


def check_float32(name: str, narrow: Float32Array, wide: npt.NDArray[np.floating], mask: npt.NDArray[np.bool_]) -> None:
    """Refuse a feature whose float32 values (``narrow``, cast from ``wide``) are not all finite: the rules were
    fitted on other rows (a warm start's parent, or the training split), so a value of these rows may be beyond
    float32's range."""
    if np.isfinite(narrow, out=mask).all():
        return
    peak = max(float(np.nanmax(wide)), -float(np.nanmin(wide)))
    raise DataError(
        f"feature {name!r} has a value too large for the float32 feature matrix (magnitude {peak:.6g}, "
        f"under the rules fitted on the training rows); expected magnitudes below 3.4e38 (rescale its column, "
        "or list it in EXCLUDE_COLUMNS)"
    )
