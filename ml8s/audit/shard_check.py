"""The ``shards`` check of ``ml8s verify``: a run trained by TRAIN_WORLD_SIZE > 1 ranks keeps verified shards.

The shards verifier (:func:`ml8s.shards.verify_checkpoint`) runs over the run's ``model/model`` checkpoint
and each of its findings is one problem, named (``shard_missing``, ``stray_shard``, ``shard_checksum`` ...,
listed in docs/distributed.md). Beyond the shards' own consistency, the checkpoint must be this run's: its
world size is the run's TRAIN_WORLD_SIZE and its checkpoint id the sha256 of ``model_native.safetensors``
(the ranks name their shards after the weights rank 0 writes). A run of one rank has no shards: PASS.

``ml8s.shards`` imports torch; it is imported only for a sharded run, so verifying one-rank runs stays
torch-free.
"""

from __future__ import annotations

from ml8s.audit.report import CheckResult, passed, verdict
from ml8s.audit.run_checks import use
from ml8s.audit.state import RunState
from ml8s.contract import layout
from ml8s.identity.versions import world_size_of


def check_shards(state: RunState) -> CheckResult:
    """Every shard of a sharded run present and intact, its metadata consistent and naming this run's weights."""
    snapshot = use(state.snapshot, "config_snapshot")
    world = world_size_of(snapshot.canonical_config)
    if world == 1:
        return passed("shards", "one rank trained this run: no shards to verify")
    from ml8s.shards import verify_checkpoint  # torch: only for a sharded run

    base = f"{state.prefix}/"
    report = verify_checkpoint(state.store, base + layout.MODEL_SHARD_PREFIX)
    problems = [f"{f.check}: {f.file.removeprefix(base)}: {f.reason}" for f in report.findings]
    if report.world_size is not None and report.world_size != world:
        problems.append(
            f"world_size: {layout.MODEL_SHARD_METADATA} lists {report.world_size} ranks; "
            f"the run has TRAIN_WORLD_SIZE={world}"
        )
    # a missing native file is the artifacts check's FAIL
    native = state.digest(layout.MODEL_NATIVE)[0] if layout.MODEL_NATIVE in state.listing() else None
    if report.checkpoint_id is not None and native is not None and report.checkpoint_id != native:
        problems.append(
            f"checkpoint_id: {layout.MODEL_SHARD_METADATA} names checkpoint {report.checkpoint_id}; expected the "
            f"sha256 of {layout.MODEL_NATIVE}, {native} (shards of other weights)"
        )
    ok = (
        f"{world} shards and {layout.MODEL_SHARD_METADATA} verify (present, sizes, sha256, headers, block hashes, "
        "no stray shard); the checkpoint is the one of model_native.safetensors"
    )
    return verdict("shards", problems, ok)
