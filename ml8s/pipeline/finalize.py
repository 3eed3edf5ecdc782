"""Step 7, finalization: check every artifact against ``training_metadata.json``, write the manifest,
then the marker, last."""

from __future__ import annotations

import hashlib

from ml8s import log
from ml8s.context.run import RunContext
from ml8s.contract import (
    ArtifactRef,
    ConfigSnapshot,
    FingerprintRecord,
    Manifest,
    RerunAudit,
    TrainingMetadata,
    layout,
    load,
)
from ml8s.errors import IntegrityError, NotFoundError, ObjectTooLargeError
from ml8s.pipeline.gate import GateDecision
from ml8s.registry.registration import MlflowRef
from ml8s.store import Store

RECOMPUTED_STEPS = ("snapshot", "features", "train", "export")
"""What a forced re-run recomputes (with the registration check and this step): every artifact's writer."""


@log.timed("finalize")
def finalize(ctx: RunContext, store: Store, mlflow: MlflowRef, decision: GateDecision) -> str:
    """Verify, write ``manifest.json`` and create ``success.marker`` (create-if-absent). Returns the manifest."""
    metadata = load(
        ctx.uri(layout.TRAINING_METADATA), ctx.read_record(store, layout.TRAINING_METADATA), TrainingMetadata
    )
    recorded = metadata.artifacts
    expected = set(
        layout.checksummed_artifacts(
            ctx.params.model_format, ctx.identity.canonicalization_version, ctx.params.train_world_size
        )
    )
    if set(recorded) != expected:
        raise IntegrityError(
            f"{ctx.uri(layout.TRAINING_METADATA)} records {sorted(recorded)}; expected exactly {sorted(expected)}"
        )
    artifacts: dict[str, ArtifactRef] = {}
    for rel in sorted(recorded):
        try:
            found = store.digest(ctx.key(rel))  # streamed: the feature matrix alone can be gigabytes
        except NotFoundError as exc:
            raise IntegrityError(
                f"{ctx.uri(rel)} is missing at finalization; expected it written by Steps 2-5"
            ) from exc
        if found.sha256 != recorded[rel].sha256 or found.size != recorded[rel].size:
            raise IntegrityError(
                f"{ctx.uri(rel)} has sha256 {found.sha256} ({found.size} bytes); expected {recorded[rel].sha256} "
                f"({recorded[rel].size} bytes) as recorded in training_metadata.json"
            )
        artifacts[rel] = ArtifactRef(uri=ctx.uri(rel), sha256=found.sha256, size=found.size)
    expected_identity = {
        layout.CONFIG_SNAPSHOT: ConfigSnapshot.of(ctx.identity).to_bytes(),
        layout.DATA_FINGERPRINT: FingerprintRecord.of(ctx.fingerprint).to_bytes(),
    }
    for rel, want in sorted(expected_identity.items()):
        try:
            # never more than this run's own bytes: a larger object differs, and is not read into memory
            data = ctx.read_record(store, rel, max_bytes=len(want))
        except NotFoundError as exc:
            raise IntegrityError(f"{ctx.uri(rel)} is missing at finalization; expected it written by Step 2") from exc
        except ObjectTooLargeError as exc:
            raise IntegrityError(f"{exc.message}: differs from this run's identity; expected identical bytes") from exc
        if data != want:
            raise IntegrityError(f"{ctx.uri(rel)} differs from this run's identity; expected identical bytes")
        artifacts[rel] = ArtifactRef(uri=ctx.uri(rel), sha256=hashlib.sha256(data).hexdigest(), size=len(data))
    artifacts = dict(sorted(artifacts.items()))
    manifest = Manifest(
        run_id=ctx.run_id,
        full_config_hash=ctx.identity.full_config_hash,
        data_fingerprint=ctx.identity.data_fingerprint,
        canonicalization_version=ctx.identity.canonicalization_version,
        artifact_root=ctx.artifact_root,
        artifacts=artifacts,
        mlflow=mlflow.model_dump(),
        force_rerun=_rerun_audit(decision, artifacts, ctx) if decision.force_rerun else None,
    )
    data = manifest.to_bytes()
    writer = ctx.writer(store)
    writer.write_bytes(layout.MANIFEST, data, "manifest")
    if store.put_if_absent(ctx.key(layout.SUCCESS_MARKER), b""):
        ctx.log("finalize", f"success.marker created: run complete at {ctx.artifact_root}")
    else:
        ctx.log("finalize", "success.marker already present (an identical run finished first): bytes are identical")
    return data.decode("utf-8")


def _rerun_audit(decision: GateDecision, artifacts: dict[str, ArtifactRef], ctx: RunContext) -> RerunAudit:
    """Compare what training_metadata.json recorded before the rerun with what it records now.

    A forced run carries a recompute token in its spec (a context without one cannot be built), so no
    cache answered for the compute steps: every step that writes an artifact ran again.
    """
    previous = decision.previous_sha256
    compared = set(previous) | set(
        layout.checksummed_artifacts(
            ctx.params.model_format, ctx.identity.canonicalization_version, ctx.params.train_world_size
        )
    )
    changed = sorted(rel for rel in compared if previous.get(rel) != _sha(artifacts, rel))
    return RerunAudit(
        reproduced=bool(previous) and not changed,
        changed=tuple(changed),
        previous_sha256=previous,
        recomputed=RECOMPUTED_STEPS,
    )


def _sha(artifacts: dict[str, ArtifactRef], rel: str) -> str | None:
    ref = artifacts.get(rel)
    return ref.sha256 if ref else None
