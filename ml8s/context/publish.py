"""Publishing: the only way the compute steps' files reach ARTIFACT_ROOT.

Feature engineering, training and export are pure: a :class:`~ml8s.context.run.RunSpec` and local input
directories in, files in a local output directory out, nothing written to the store. That makes them
cacheable (a cache hit returns the same files). Publishing copies those files into ARTIFACT_ROOT, each
with an atomic write, and is never cached: after FORCE_RERUN cleared the run, or for a run under
another PIPELINE_ROOT_URI, the files must be written again even though the computation is reused.

In an output directory each artifact is stored under its file name alone (``feature_matrix.parquet``
for ``features/feature_matrix.parquet``); :func:`local_path` is the one place that says so.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Iterable, Mapping

from ml8s.context.run import RunContext
from ml8s.contract import layout
from ml8s.errors import IntegrityError
from ml8s.store import Store

FEATURES = (layout.FEATURE_MATRIX, layout.FEATURE_SCHEMA)
"""What feature engineering produces."""
TRAINED = (layout.METRICS, layout.MODEL_NATIVE, layout.MODEL_TRAINING_STATE)
"""What training produces (and export checksums), under the current canonicalization version."""
TRAINING_LOGS = (layout.EPOCH_LOG, layout.TENSORBOARD_EVENTS)
"""What training also produces: logs, published beside the artifacts but never checksummed."""


def trained(canonicalization_version: str, world_size: int = 1) -> tuple[str, ...]:
    """What training produces for a run of this version (the training state from 2.1.0 on) and world size
    (each rank's shard and the shards' metadata when it is above 1)."""
    produced = (*TRAINED, *layout.sharded_artifacts(world_size))
    checksummed = layout.checksummed_artifacts("onnx", canonicalization_version, world_size)
    return tuple(sorted(rel for rel in produced if rel in checksummed))


def exported(model_format: str) -> tuple[str, ...]:
    """What export produces: the exported model and ``training_metadata.json``."""
    return (layout.model_export(model_format), layout.TRAINING_METADATA)


def local_path(directory: str, rel: str) -> str:
    """Where a compute step keeps artifact ``rel`` (a layout key) in its output directory."""
    return os.path.join(directory, posixpath.basename(rel))


def local_files(directory: str, rels: Iterable[str]) -> dict[str, str]:
    """``{layout key: local path}`` of the artifacts ``rels`` in ``directory``, ready for :func:`publish`."""
    return {rel: local_path(directory, rel) for rel in rels}


def publish(ctx: RunContext, store: Store, files: Mapping[str, str]) -> None:
    """Write each local file to its layout key under ARTIFACT_ROOT, atomically, in sorted key order.

    Args:
        ctx: the run whose ARTIFACT_ROOT receives the files.
        store: the pipeline root's store, opened once by the caller.
        files: layout key (``features/feature_matrix.parquet``) -> local path.

    Raises:
        IntegrityError: a local file is missing (nothing of this call is written then).
    """
    missing = sorted(rel for rel, path in files.items() if not os.path.isfile(path))
    if missing:
        raise IntegrityError(
            f"cannot publish {', '.join(missing)} to {ctx.artifact_root}: "
            f"expected local files at {', '.join(files[rel] for rel in missing)}"
        )
    writer = ctx.writer(store)
    for rel in sorted(files):
        writer.write_file(rel, files[rel], posixpath.splitext(posixpath.basename(rel))[0])
