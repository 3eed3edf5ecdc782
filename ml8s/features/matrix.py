"""The feature matrix file (``features/feature_matrix.parquet``): written and read with fixed options."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.parquet as pq

from ml8s.data.dataset import FloatArray
from ml8s.features.column_names import SPLIT, TARGET

IntArray = npt.NDArray[np.int64]


def write_matrix_arrays(
    path: str, matrix: npt.NDArray[np.floating], names: list[str], target: IntArray, split: npt.NDArray[np.integer]
) -> None:
    """Parquet with fixed writer options: same values, same bytes (pyarrow is pinned)."""
    columns = {name: pa.array(matrix[:, i].astype(np.float32)) for i, name in enumerate(names)}
    columns[TARGET] = pa.array(target.astype(np.int32))
    columns[SPLIT] = pa.array(split.astype(np.int8))
    table = pa.table(columns)
    pq.write_table(table, path, compression="zstd", compression_level=3, use_dictionary=False, write_statistics=True)


def read_matrix(path: str) -> tuple[FloatArray, IntArray, IntArray, list[str]]:
    """(features as float64, class indices, split, feature names) from a feature matrix file."""
    table = pq.read_table(path)
    names = [n for n in table.column_names if n not in (TARGET, SPLIT)]
    features = np.column_stack([table.column(n).to_numpy().astype(np.float64) for n in names])
    target = table.column(TARGET).to_numpy().astype(np.int64)
    split = table.column(SPLIT).to_numpy().astype(np.int64)
    return features, target, split, names
