"""Reading the feature matrix file back, a row group and a column at a time: the float32 matrix whole
(:func:`read_matrix32`), or only the rows of one split (:func:`read_split32`). The writers, and the mapped
hand-over that training uses, are in :mod:`ml8s.features.matrix`."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pyarrow.parquet as pq

from ml8s.data.dataset import FloatArray
from ml8s.features.column_names import SPLIT, TARGET
from ml8s.memory import give_back

IntArray = npt.NDArray[np.int64]
Float32Array = npt.NDArray[np.float32]


def feature_names(file: pq.ParquetFile) -> list[str]:
    """The file's feature columns, in matrix order (every column but the target and the split)."""
    return [n for n in file.schema_arrow.names if n not in (TARGET, SPLIT)]


def read_matrix(path: str) -> tuple[FloatArray, IntArray, IntArray, list[str]]:
    """(features as float64, class indices, split, feature names) from a feature matrix file."""
    features, target, split, names = read_matrix32(path)
    return features.astype(np.float64), target, split, names


def read_matrix32(path: str) -> tuple[Float32Array, IntArray, IntArray, list[str]]:
    """(features as one C-ordered float32 array, class indices, split, feature names), read a row group at a
    time: the peak is the float32 matrix plus one row group."""
    file = pq.ParquetFile(path)
    names = feature_names(file)
    rows = file.metadata.num_rows
    features = np.empty((rows, len(names)), dtype=np.float32)
    target = np.empty(rows, dtype=np.int64)
    split = np.empty(rows, dtype=np.int64)
    start = 0
    for group in range(file.num_row_groups):
        end = start + file.metadata.row_group(group).num_rows
        for i, name in enumerate(names):
            features[start:end, i] = read_column(file, group, name)
        target[start:end] = read_column(file, group, TARGET)
        split[start:end] = read_column(file, group, SPLIT)
        start = end
    give_back()
    return features, target, split, names


def read_column(file: pq.ParquetFile, group: int, name: str) -> npt.NDArray[np.generic]:
    """One column of one row group: reading a whole row group would keep it (Arrow's buffers) in memory beside
    the float32 matrix it is copied into."""
    return np.asarray(file.read_row_group(group, columns=[name], use_threads=False).column(0).to_numpy())


def read_split32(path: str, split: int) -> Float32Array:
    """The float32 features of the rows whose ``__split__`` is ``split``, in file order, read a row group at a
    time (held-out rows for export validation without the training rows)."""
    file = pq.ParquetFile(path)
    names = feature_names(file)
    parts: list[Float32Array] = []
    for group in range(file.num_row_groups):
        chosen = np.flatnonzero(read_column(file, group, SPLIT) == split)
        part = np.empty((len(chosen), len(names)), dtype=np.float32)
        for i, name in enumerate(names):
            part[:, i] = read_column(file, group, name)[chosen]
        parts.append(part)
    give_back()
    if not parts:
        return np.empty((0, len(names)), dtype=np.float32)
    return np.concatenate(parts) if len(parts) > 1 else parts[0]
