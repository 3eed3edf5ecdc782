"""Step 3, feature engineering: the rules of seed 001 and SPEC §4, all decisions deterministic.

Columns are sorted by name before anything else; categories are encoded in sorted order; statistics
(imputation, variance, standardization) are fitted on the training rows only; MAX_FEATURES keeps the
top-N by variance with ties broken by name. Output: ``features/feature_matrix.parquet`` (float32
features sorted by name, ``__target__`` class index, ``__split__`` 0 = train / 1 = test) and
``features/feature_schema.json`` (everything needed to reproduce the transform at inference).
"""

from __future__ import annotations

import os
import tempfile

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ml8s import layout
from ml8s.context import RunContext
from ml8s.dataset import FloatArray, load_dataset
from ml8s.features_core import IntArray, Prepared, encode, prepare
from ml8s.identity import canonical_bytes

SCHEMA_VERSION = 1
TARGET = "__target__"
SPLIT = "__split__"


def build_features(ctx: RunContext) -> None:
    """Load the data (re-verified), engineer features and write both feature artifacts atomically."""
    prepared = prepare(load_dataset(ctx.fingerprint), ctx.params)
    matrix, features = encode(prepared, ctx.params)
    writer = ctx.writer()
    with tempfile.TemporaryDirectory(prefix="ml8s-fe-") as tmp:
        path = os.path.join(tmp, "feature_matrix.parquet")
        write_matrix(path, matrix, [str(f["name"]) for f in features], prepared)
        writer.write_file(layout.FEATURE_MATRIX, path, "features")
    schema = feature_schema(prepared, features)
    writer.write_bytes(layout.FEATURE_SCHEMA, canonical_bytes(schema), "feature_schema")
    ctx.log(
        "features",
        f"{matrix.shape[1]} features x {matrix.shape[0]} rows ({prepared.train_rows} train, {prepared.test_rows} test)",
    )


def write_matrix(path: str, matrix: FloatArray, names: list[str], prepared: Prepared) -> None:
    """Parquet with fixed writer options: same values, same bytes (pyarrow is pinned)."""
    columns = {name: pa.array(matrix[:, i].astype(np.float32)) for i, name in enumerate(names)}
    columns[TARGET] = pa.array(prepared.target.astype(np.int32))
    columns[SPLIT] = pa.array(prepared.split.astype(np.int8))
    table = pa.table(columns)
    pq.write_table(table, path, compression="zstd", compression_level=3, use_dictionary=False, write_statistics=True)


def feature_schema(prepared: Prepared, features: list[dict[str, object]]) -> dict[str, object]:
    return {
        "schema_version": SCHEMA_VERSION,
        "features": features,
        "target": {"column": prepared.target_column, "classes": list(prepared.classes), "encoded_as": TARGET},
        "split": {"column": SPLIT, "train": 0, "test": 1},
        "dropped_columns": dict(sorted(prepared.dropped.items())),
        "rows": prepared.row_counts(),
        "rows_per_file": dict(sorted(prepared.rows_per_file.items())),
    }


def read_matrix(path: str) -> tuple[FloatArray, IntArray, IntArray, list[str]]:
    """(features as float64, class indices, split, feature names) from a feature matrix file."""
    table = pq.read_table(path)
    names = [n for n in table.column_names if n not in (TARGET, SPLIT)]
    features = np.column_stack([table.column(n).to_numpy().astype(np.float64) for n in names])
    target = table.column(TARGET).to_numpy().astype(np.int64)
    split = table.column(SPLIT).to_numpy().astype(np.int64)
    return features, target, split, names


def fetch_matrix(ctx: RunContext, directory: str) -> tuple[FloatArray, IntArray, IntArray, list[str]]:
    """Download the run's feature matrix into ``directory`` and read it."""
    path = os.path.join(directory, "feature_matrix.parquet")
    ctx.store().download(ctx.key(layout.FEATURE_MATRIX), path)
    return read_matrix(path)
