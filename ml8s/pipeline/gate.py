"""Step 1, the idempotence gate: a completed run returns its manifest; a mismatch halts.

Reads only the store (no torch, no MLflow): a re-run of a completed run must cost about as much as
starting the workflow.
"""

from __future__ import annotations

import datetime
import logging
import os
import socket
import sqlite3
from urllib.parse import quote

from pydantic import BaseModel, ConfigDict, JsonValue, ValidationError

from ml8s import log
from ml8s.context.run import RunContext
from ml8s.contract import ConfigSnapshot, Incident, Manifest, layout
from ml8s.errors import (
    DataDriftError,
    Ml8sError,
    NotFoundError,
    RecordedElsewhereError,
    RunIdHashCollisionError,
    StoreError,
    UnsafeObjectError,
)
from ml8s.identity.hashing import json_object
from ml8s.identity.settings import worker_id
from ml8s.identity.uri import same_local_folder, sqlite_path
from ml8s.store import Store


class GateDecision(BaseModel):
    """What the gate found. ``manifest`` is the stored manifest text when ``completed``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    completed: bool
    manifest: str = ""
    force_rerun: bool = False
    previous_sha256: dict[str, str] = {}


@log.timed("gate")
def gate(ctx: RunContext, store: Store) -> GateDecision:
    """Decide whether the run must (re)execute Steps 2-7, reading (and under FORCE_RERUN clearing) ``store``.

    Raises:
        RunIdHashCollisionError: ARTIFACT_ROOT holds a snapshot of another FULL_CONFIG_HASH (complete or not).
        DataDriftError: non-strict identity, the completed run was made from other data.
    """
    completed = store.exists(ctx.key(layout.SUCCESS_MARKER))
    _check_snapshot(ctx, store, completed=completed)
    if ctx.settings.force_rerun:
        previous = _recorded_sha256(ctx, store)
        clear_run(ctx, store)
        ctx.log(
            "gate", f"FORCE_RERUN: cleared {ctx.artifact_root} ({len(previous)} recorded checksums kept to compare)"
        )
        return GateDecision(completed=False, force_rerun=True, previous_sha256=previous)
    if completed:
        try:
            manifest = ctx.read_record(store, layout.MANIFEST).decode("utf-8")
        except NotFoundError as exc:
            raise StoreError(
                f"{ctx.uri(layout.SUCCESS_MARKER)} exists but {ctx.uri(layout.MANIFEST)} does not; "
                "the run was finalized by an incompatible writer or tampered with (run `ml8s verify`)"
            ) from exc
        except UnicodeDecodeError as exc:
            raise StoreError(
                f"{ctx.uri(layout.MANIFEST)} is not UTF-8 ({exc.reason} at byte {exc.start}); expected the manifest "
                "JSON ml8s wrote: the run was tampered with (run `ml8s verify`)"
            ) from exc
        recorded = _parse_manifest(ctx, manifest)
        _check_artifacts_present(ctx, store, recorded)
        _check_recorded_here(ctx, recorded)
        ctx.log("gate", "success.marker found and snapshot matches: returning the stored manifest")
        _warn_if_registry_gone(ctx, recorded)
        return GateDecision(completed=True, manifest=manifest)
    _check_marker_absent(ctx, store)
    ctx.log("gate", "no success.marker: running Steps 2-7")
    return GateDecision(completed=False)


def _check_marker_absent(ctx: RunContext, store: Store) -> None:
    """Nothing but a file may stand where the marker goes: a directory, FIFO or dangling link there is no marker
    (the run must train), yet it made finalization's create-if-absent fail, which it took for an identical run
    that had finished first. Every such run trained, said it was done, and left the run unmarked."""
    try:
        ctx.read_record(store, layout.SUCCESS_MARKER)
    except NotFoundError:
        return
    except UnsafeObjectError as exc:
        raise UnsafeObjectError(
            f"{ctx.uri(layout.SUCCESS_MARKER)} is no regular file (a directory, FIFO or symbolic link); expected "
            "none, or the empty file ml8s writes: remove it and run again (nothing was trained or written)"
        ) from exc


def _parse_manifest(ctx: RunContext, manifest: str) -> Manifest:
    try:
        return Manifest.model_validate_json(manifest)
    except ValidationError as exc:
        raise StoreError(
            f"{ctx.uri(layout.MANIFEST)} is not a valid manifest ({exc.errors()[0]['msg']}); the run was tampered "
            "with (run `ml8s verify`)"
        ) from exc


def _check_recorded_here(ctx: RunContext, manifest: Manifest) -> None:
    """The stored manifest names this ARTIFACT_ROOT. A root copied or moved (cp -a, a bucket sync) keeps records
    that name the root they were written at: returned from here, the run's result pointed into the old root (files
    gone after a move) and `ml8s verify` failed it. Those records are hashed and immutable: they are never
    rewritten to name this root, the run is refused instead."""
    recorded = manifest.artifact_root
    if recorded == ctx.artifact_root or same_local_folder(recorded, ctx.artifact_root):
        return
    other = layout.other_root(recorded, ctx.artifact_root, ctx.run_id)
    if not other:
        raise StoreError(
            f"{ctx.uri(layout.MANIFEST)} names artifact_root {recorded}; expected {ctx.artifact_root} or this "
            "RUN_ID's folder under another pipeline root: the run was tampered with (run `ml8s verify`)"
        )
    raise RecordedElsewhereError(
        f"run {ctx.run_id} at {ctx.artifact_root} is complete but was recorded at {recorded}: the pipeline root was "
        f"copied or moved from {other}, which its manifest, MLflow version and chain block name. Set "
        f"PIPELINE_ROOT_URI={other} to use the run there, or FORCE_RERUN=true to train it again and write a manifest "
        "naming this root (the records made there are kept as they are; nothing was written)"
    )


def _check_artifacts_present(ctx: RunContext, store: Store, parsed: Manifest) -> None:
    """Every artifact the stored manifest names is there with its recorded size: one listing, no reads.

    The gate returns that manifest as the run's result; a caller must not get paths to files deleted or cut
    short since (checksums are ``ml8s verify``'s, which reads every byte).
    """
    prefix = ctx.key("")
    found = {info.key[len(prefix) :]: info.size for info in store.list(prefix)}
    for rel, artifact in sorted(parsed.artifacts.items()):
        size = found.get(rel)
        if size != artifact.size:
            what = "is missing" if size is None else f"has {size} bytes"
            raise StoreError(
                f"run {ctx.run_id} is marked complete but {ctx.uri(rel)} {what}; manifest.json records "
                f"{artifact.size} bytes (run `ml8s verify`; FORCE_RERUN=true trains the run again)"
            )


def _warn_if_registry_gone(ctx: RunContext, manifest: Manifest) -> None:
    """Say so when the local MLflow database the manifest names no longer exists, or no longer holds the model
    version the returned manifest names (deleted in MLflow). A warning, not a refusal: the run's artifacts are
    intact and the registry is outside the run (``ml8s verify`` fails its mlflow check). Only a ``sqlite:///``
    file is checked: anything else would load MLflow, which a gate hit never does."""
    uri = manifest.mlflow.get("tracking_uri", "")
    path = sqlite_path(uri)
    name, version = manifest.mlflow.get("model_name", "?"), manifest.mlflow.get("model_version", "?")
    if path and os.path.exists(path):
        if _registered(path, name, version) is False:
            logging.getLogger("ml8s").warning(
                "REGISTRY_VERSION_GONE: model version %s of %r, which manifest.json names, is deleted from the MLflow "
                "database %s (`ml8s verify` fails its mlflow check; FORCE_RERUN=true trains and registers the run "
                "again)",
                version,
                name,
                path,
                extra={"step": "gate"},
            )
        return
    if path:
        # at WARNING (the other gate lines are INFO): ML8S_LOG_LEVEL=WARNING still shows it
        logging.getLogger("ml8s").warning(
            "REGISTRY_GONE: the MLflow database %s that manifest.json names (%s) does not exist: model version %s of "
            "%r is no longer registered (`ml8s verify` fails its mlflow check; FORCE_RERUN=true trains and registers "
            "the run again)",
            path,
            uri,
            version,
            name,
            extra={"step": "gate"},
        )


def _registered(path: str, name: str, version: str) -> bool | None:
    """Whether the MLflow sqlite database at ``path`` holds model version ``version`` of ``name``, not deleted
    (MLflow deletes a version by marking its stage); None where it cannot tell (locked, another schema, damaged):
    the gate says nothing then. Read-only and without MLflow, as a gate hit stays cheap."""
    try:
        connection = sqlite3.connect(f"file:{quote(os.path.abspath(path))}?mode=ro", uri=True, timeout=0)
        try:
            rows = connection.execute(
                "SELECT current_stage FROM model_versions WHERE name = ? AND version = ?", (name, int(version))
            ).fetchall()
        finally:
            connection.close()
    except (sqlite3.Error, ValueError):
        return None
    return any(stage != "Deleted_Internal" for (stage,) in rows)


def clear_run(ctx: RunContext, store: Store) -> None:
    """FORCE_RERUN order: the marker first (the run stops counting as complete), then the artifacts."""
    store.delete(ctx.key(layout.SUCCESS_MARKER))
    world = ctx.params.train_world_size
    for rel in sorted(
        {*layout.final_artifacts("onnx", world_size=world), *layout.final_artifacts("safetensors", world_size=world)}
    ):
        store.delete(ctx.key(rel))


def _check_snapshot(ctx: RunContext, store: Store, *, completed: bool) -> None:
    try:
        stored = json_object(ctx.read_record(store, layout.CONFIG_SNAPSHOT))
    except NotFoundError:
        if completed:
            raise StoreError(
                f"{ctx.uri(layout.SUCCESS_MARKER)} exists but {ctx.uri(layout.CONFIG_SNAPSHOT)} does not; "
                "the run is inconsistent (run `ml8s verify`)"
            ) from None
        return
    except ValueError as exc:
        raise StoreError(f"{ctx.uri(layout.CONFIG_SNAPSHOT)} is not a valid JSON object: {exc}") from exc
    computed = ctx.identity
    stored_hash = str(stored.get("full_config_hash", ""))
    if stored_hash != computed.full_config_hash:
        _incident(ctx, store, "RUN_ID_HASH_COLLISION", stored)
        raise RunIdHashCollisionError(
            f"RUN_ID {ctx.run_id} at {ctx.artifact_root} belongs to FULL_CONFIG_HASH {stored_hash}, "
            f"but this run computed {computed.full_config_hash}; nothing was overwritten "
            f"(incident recorded under {ctx.settings.pipeline_root_uri}/{layout.INCIDENTS_DIR}/{ctx.run_id}/)"
        )
    if not completed or ctx.settings.force_rerun:
        return
    recorded = _recorded_fingerprint(ctx, store, stored)
    if recorded != computed.data_fingerprint:
        if ctx.settings.strict_data_identity:
            _incident(ctx, store, "RUN_ID_HASH_COLLISION", stored)
            raise RunIdHashCollisionError(
                f"RUN_ID {ctx.run_id}: FULL_CONFIG_HASH {computed.full_config_hash} matches but the recorded "
                f"DATA_FINGERPRINT {recorded} differs from the computed {computed.data_fingerprint}"
            )
        _incident(ctx, store, "DATA_DRIFT", stored)
        raise DataDriftError(
            f"run {ctx.run_id} was made from DATA_FINGERPRINT {recorded} but {ctx.params.data_root} now "
            f"fingerprints to {computed.data_fingerprint} (STRICT_DATA_IDENTITY=false); set FORCE_RERUN=true "
            "to retrain on the new data, or use strict identity to give it a new RUN_ID"
        )


def _recorded_fingerprint(ctx: RunContext, store: Store, snapshot: dict[str, JsonValue]) -> str:
    """The fingerprint of data_fingerprint.json, which must agree with the snapshot's."""
    try:
        recorded = str(json_object(ctx.read_record(store, layout.DATA_FINGERPRINT)).get("fingerprint", ""))
    except (NotFoundError, ValueError) as exc:
        raise StoreError(f"{ctx.uri(layout.DATA_FINGERPRINT)} is missing or unreadable: {exc}") from exc
    if recorded != snapshot.get("data_fingerprint"):
        raise StoreError(
            f"{ctx.uri(layout.DATA_FINGERPRINT)} records {recorded} but {ctx.uri(layout.CONFIG_SNAPSHOT)} records "
            f"{snapshot.get('data_fingerprint')}; the run was tampered with (run `ml8s verify`)"
        )
    return recorded


def _recorded_sha256(ctx: RunContext, store: Store) -> dict[str, str]:
    try:
        artifacts = json_object(ctx.read_record(store, layout.TRAINING_METADATA)).get("artifacts")
    except (NotFoundError, ValueError):
        return {}
    if not isinstance(artifacts, dict):  # only compared after the re-run: a damaged record compares nothing
        return {}
    return {
        str(rel): str(entry["sha256"])
        for rel, entry in sorted(artifacts.items())
        if isinstance(entry, dict) and "sha256" in entry
    }


def _incident(ctx: RunContext, store: Store, kind: str, stored: dict[str, JsonValue]) -> None:
    """An audit record outside ARTIFACT_ROOT; failing to write it must not hide the original error."""
    record = Incident(
        kind=kind,
        run_id=ctx.run_id,
        artifact_root=ctx.artifact_root,
        stored=stored,
        computed=ConfigSnapshot.of(ctx.identity),
        worker={"worker_id": worker_id(), "hostname": socket.gethostname()},
        recorded_at=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    )
    key = layout.incident_key(ctx.run_id, kind, ctx.identity.full_config_hash)
    tmp = f"{layout.INCIDENTS_DIR}/{layout.TMP_DIR}/incident-{worker_id()}.json"
    try:
        store.put_atomic(key, record.to_bytes(), tmp_key=tmp)
    except Ml8sError as exc:
        ctx.log("gate", f"could not record the {kind} incident at {store.uri(key)}: {exc}")
