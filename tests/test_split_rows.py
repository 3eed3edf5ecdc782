"""The hand-over rows (matrix_mapped.SplitRows): every row in its split's group, in the file's order within it.

The slices are grouped and transposed in kept arrays, a column and a tile at a time; these tests hold the bytes
written to a plain ``features.T`` grouped by split, across slice and tile edges and with one group per slice.
"""

from __future__ import annotations

import numpy as np
import pytest

from ml8s.features import matrix_mapped


def _expected(features: np.ndarray, split: np.ndarray) -> np.ndarray:
    rows = features.T
    return np.concatenate([rows[split == value] for value in np.unique(split)])


@pytest.mark.parametrize("features", [1, 3, 32, 4100])  # 4100: a tile of 31 rows, not a divisor of the slice
def test_rows_are_written_grouped_by_split_in_file_order(monkeypatch: pytest.MonkeyPatch, features: int) -> None:
    monkeypatch.setattr(matrix_mapped, "_ROWS_PER_WRITE", 1000)
    rng = np.random.default_rng(features)
    rows = 2_500  # two whole slices and a short one
    values = rng.standard_normal((features, rows)).astype(np.float32)
    split = (rng.random(rows) < 0.3).astype(np.int64)
    split[:1000] = 0  # the first slice holds training rows only: written without grouping
    split[1000:1003] = 1
    with matrix_mapped.scratch_file(values.nbytes) as handle:
        scratch = matrix_mapped.SplitRows(handle, split, features)
        # two row groups, as the matrix is encoded, the second starting inside a slice of the first's
        scratch.write(np.ascontiguousarray(values[:, :1700]), split[:1700])
        scratch.write(np.ascontiguousarray(values[:, 1700:]), split[1700:])
        mapped = scratch.mapped(np.arange(rows), [f"f{i}" for i in range(features)])
        assert mapped.features.tobytes() == _expected(values, split).tobytes()
        grouped = np.concatenate([np.flatnonzero(split == 0), np.flatnonzero(split == 1)])
        assert mapped.target.tolist() == grouped.tolist()
        del mapped


def test_three_split_values_keep_their_order(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any split values, not only 0 and 1: the groups follow the values' order."""
    monkeypatch.setattr(matrix_mapped, "_ROWS_PER_WRITE", 64)
    rng = np.random.default_rng(7)
    values = rng.standard_normal((5, 300)).astype(np.float32)
    split = rng.integers(0, 3, 300)
    with matrix_mapped.scratch_file(values.nbytes) as handle:
        scratch = matrix_mapped.SplitRows(handle, split, 5)
        scratch.write(values, split)
        mapped = scratch.mapped(np.zeros(300, dtype=np.int64), ["a", "b", "c", "d", "e"])
        assert mapped.features.tobytes() == _expected(values, split).tobytes()
        del mapped
