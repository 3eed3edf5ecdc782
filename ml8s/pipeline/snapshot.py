"""Step 2, data load and snapshot: validate the data completely, then record what was read.

The whole dataset is parsed and checked against the configuration (target present, classes, excluded
columns) *before* the first write, so a bad input never leaves anything under ARTIFACT_ROOT (a warm start's
data was checked by bootstrap against its lineage's features, docs/continuous.md). The
device is checked where training runs: by ``run_pipeline`` before this step (one machine does it all),
and on a cluster by the GPU training task, which is scheduled on a GPU node.
"""

from __future__ import annotations

from ml8s import log
from ml8s.context.run import RunContext
from ml8s.contract import ConfigSnapshot, FingerprintRecord, layout
from ml8s.features.loaded import load_prepared
from ml8s.store import Store


@log.timed("snapshot")
def snapshot(ctx: RunContext, store: Store) -> None:
    """Validate DATA_ROOT against the config, then write ``data_fingerprint.json`` and ``config_snapshot.json``."""
    files = len(ctx.fingerprint.entries)
    if ctx.spec.lineage is None:
        # Left for the features step of this process (ml8s run): the files are parsed once.
        shown = f"{load_prepared(ctx.fingerprint, ctx.params, keep=True).rows_read} rows in {files} file(s)"
    else:
        # Bootstrap checked a warm start's data file by file against its lineage's frozen features (a column
        # they do not know is ignored, docs/continuous.md); read as one dataset, every file must have the same
        # columns, which would refuse a new generation that gained one, after bootstrap let it through.
        shown = f"{files} file(s) of {len(ctx.spec.lineage.generations)} generation(s), checked at bootstrap,"
    writer = ctx.writer(store)
    writer.write_bytes(layout.DATA_FINGERPRINT, FingerprintRecord.of(ctx.fingerprint).to_bytes(), "data_fingerprint")
    writer.write_bytes(layout.CONFIG_SNAPSHOT, ConfigSnapshot.of(ctx.identity).to_bytes(), "config_snapshot")
    ctx.log("snapshot", f"{shown} validated and recorded")
