"""Step 2, data load and snapshot: validate the data completely, then record what was read.

The whole dataset is parsed and checked against the configuration (target present, classes, excluded
columns) *before* the first write, so a bad input never leaves anything under ARTIFACT_ROOT. The
device is checked where training runs: by ``run_pipeline`` before this step (one machine does it all),
and on a cluster by the GPU training task, which is scheduled on a GPU node.
"""

from __future__ import annotations

from ml8s.contract import layout
from ml8s.data.dataset import load_dataset
from ml8s.data.fingerprint import Fingerprint
from ml8s.identity.hashing import canonical_bytes
from ml8s.pipeline.context import RunContext
from ml8s.pipeline.feature_rules import prepare


def snapshot(ctx: RunContext) -> None:
    """Validate DATA_ROOT against the config, then write ``data_fingerprint.json`` and ``config_snapshot.json``."""
    prepared = prepare(load_dataset(ctx.fingerprint), ctx.params)
    writer = ctx.writer()
    writer.write_bytes(
        layout.DATA_FINGERPRINT, canonical_bytes(fingerprint_record(ctx.fingerprint)), "data_fingerprint"
    )
    writer.write_bytes(layout.CONFIG_SNAPSHOT, ctx.identity.config_snapshot_bytes(), "config_snapshot")
    ctx.log("snapshot", f"{prepared.rows_read} rows in {len(ctx.fingerprint.entries)} file(s) validated and recorded")


def fingerprint_record(fingerprint: Fingerprint) -> dict[str, object]:
    """``data_fingerprint.json``: the fingerprint and every token it was computed from."""
    local = fingerprint.data_root.startswith("file://")
    return {
        "algorithm": "sha256('|'.join(sorted(f'{relative_path}:{checksum}:{size}')))",
        "checksum": "sha256 of the file bytes" if local else "ETag without quotes",
        "data_root": fingerprint.data_root,
        "fingerprint": fingerprint.fingerprint,
        "files": [e.model_dump() for e in fingerprint.entries],
    }
