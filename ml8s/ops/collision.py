"""``ml8s resolve-collision RUN_ID --quarantine``: move a colliding run aside, after audit (seed 001).

Refused unless the gate recorded a ``RUN_ID_HASH_COLLISION`` for RUN_ID under ``ml8s_incidents/`` whose
stored FULL_CONFIG_HASH is the one ARTIFACT_ROOT holds now (the thing audited is the thing moved).
Every object under ARTIFACT_ROOT is copied to ``ml8s_quarantine/{RUN_ID}/{stored_full_hash}/`` (atomic,
sha256-checked writes), and only then deleted: the marker first (the run stops counting as complete),
the snapshot last (until it goes, the gate keeps refusing the new config, so a half-moved run is never
overwritten). Re-running after a crash finishes the move; re-running after success changes nothing.
The resolution is appended to the incident log as ``ml8s_incidents/{RUN_ID}/resolution-{hash}.json``
(create-only). Then ARTIFACT_ROOT is free and the new configuration runs.
"""

from __future__ import annotations

import datetime
import os
import socket

from pydantic import BaseModel, ConfigDict

from ml8s.contract import Invalid, MovedFile, Resolution, layout, parse
from ml8s.errors import (
    IntegrityError,
    NotFoundError,
    ObjectTooLargeError,
    ResolutionRefusedError,
    UnsafeObjectError,
)
from ml8s.identity.hashing import json_loads
from ml8s.identity.settings import worker_id
from ml8s.ops.tmp_keys import QUARANTINE_DIR
from ml8s.store import Store
from ml8s.tempdirs import owned_tempdir

COLLISION = "RUN_ID_HASH_COLLISION"


class Outcome(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    record_uri: str
    already_resolved: bool
    resolution: Resolution


def quarantine_prefix(run_id: str, full_hash: str) -> str:
    return f"{QUARANTINE_DIR}/{run_id}/{full_hash}"


def collision_incidents(store: Store, run_id: str, *, skip_unsafe: bool = False) -> dict[str, str]:
    """Recorded collisions of ``run_id``: incident key -> the stored FULL_CONFIG_HASH it names. A malformed record
    is no collision; one that cannot be read safely (a link, a FIFO, over the record bound) raises its error, or,
    with ``skip_unsafe`` (``runs list``, which lists a damaged root rather than nothing), is skipped as malformed."""
    found: dict[str, str] = {}
    prefix = f"{layout.INCIDENTS_DIR}/{run_id}/"
    skipped = (UnsafeObjectError, ObjectTooLargeError) if skip_unsafe else ()
    for info in store.list(prefix):
        if not info.key.rpartition("/")[2].startswith(COLLISION.lower() + "-"):
            continue
        try:
            record = json_loads(store.get(info.key, max_bytes=layout.RECORD_MAX_BYTES))
            stored = str(record["stored"]["full_config_hash"]) if isinstance(record, dict) else ""
        except (NotFoundError, ValueError, KeyError, TypeError, *skipped):
            continue
        if isinstance(record, dict) and record.get("kind") == COLLISION and len(stored) == 64:
            found[info.key] = stored
    return found


def resolve_collision(store: Store, run_id: str, *, reason: str = "") -> Outcome:
    """Quarantine the colliding run at ``run_id`` and record the resolution (idempotent)."""
    incidents = collision_incidents(store, run_id)
    root = f"{store.uri(layout.run_prefix(run_id))}"
    if not incidents:
        raise ResolutionRefusedError(
            f"no {COLLISION} is recorded for run {run_id} under {store.uri(layout.INCIDENTS_DIR)}/{run_id}/; "
            "a collision is resolved only after the gate recorded it and it was audited (nothing was moved)"
        )
    stored = sorted(set(incidents.values()))
    current = _current_hash(store, run_id)
    if current in stored:
        return _record(
            store,
            run_id,
            current,
            incidents,
            _quarantined(store, run_id, current, _move(store, run_id, current)),
            reason,
        )
    for full_hash in stored:
        if files := _quarantined(store, run_id, full_hash, ()):
            return _record(store, run_id, full_hash, incidents, files, reason)
    raise ResolutionRefusedError(
        f"{root} holds FULL_CONFIG_HASH {current or '(no snapshot)'}, not the colliding run recorded in the incident "
        f"log ({', '.join(stored)}), and nothing was quarantined before; audit it again (nothing was moved)"
    )


def _current_hash(store: Store, run_id: str) -> str | None:
    try:
        snapshot = json_loads(
            store.get(f"{layout.run_prefix(run_id)}/{layout.CONFIG_SNAPSHOT}", max_bytes=layout.RECORD_MAX_BYTES)
        )
    except NotFoundError:
        return None
    except ValueError:
        return ""
    return str(snapshot.get("full_config_hash", "")) if isinstance(snapshot, dict) else ""


def _move(store: Store, run_id: str, full_hash: str) -> tuple[MovedFile, ...]:
    """Copy every object (verified), then delete the originals: marker first, snapshot last."""
    source, target = layout.run_prefix(run_id), quarantine_prefix(run_id, full_hash)
    if odd := store.irregular(source):  # a link's target (a file outside the root) would be copied into the store
        raise ResolutionRefusedError(
            f"{', '.join(store.uri(key) for key in odd[:5])} is no regular file or directory (a symbolic link, FIFO "
            f"or device); expected only the files of run {run_id}: remove it by hand, then resolve again (nothing "
            "was moved)"
        )
    tmp_key = f"{QUARANTINE_DIR}/{layout.TMP_DIR}/quarantine-{worker_id()}.bin"
    moved: list[MovedFile] = []
    infos = [i for i in store.list(source + "/") if i.key.startswith(source + "/")]
    with owned_tempdir("ml8s-quarantine-") as tmp:
        local = os.path.join(tmp, "object")
        for info in infos:
            rel = info.key[len(source) + 1 :]
            read = store.download(info.key, local)
            written = store.put_file_atomic(f"{target}/{rel}", local, tmp_key=tmp_key)
            if (written.sha256, written.size) != (read.sha256, read.size):
                raise IntegrityError(f"copy of {store.uri(info.key)} to {store.uri(f'{target}/{rel}')} differs")
            moved.append(MovedFile(path=rel, sha256=read.sha256, size=read.size))
    last = f"{source}/{layout.CONFIG_SNAPSHOT}"
    order = sorted(infos, key=lambda i: (i.key != f"{source}/{layout.SUCCESS_MARKER}", i.key == last, i.key))
    for info in order:
        store.delete(info.key)
    return tuple(moved)


def _quarantined(store: Store, run_id: str, full_hash: str, moved: tuple[MovedFile, ...]) -> tuple[MovedFile, ...]:
    """Every file in the quarantine: those just moved, and those an interrupted earlier attempt moved."""
    prefix = quarantine_prefix(run_id, full_hash)
    known = {f.path: f for f in moved}
    with owned_tempdir("ml8s-quarantine-") as tmp:
        for info in store.list(prefix + "/"):
            rel = info.key[len(prefix) + 1 :]
            if rel not in known:
                read = store.download(info.key, os.path.join(tmp, "object"))
                known[rel] = MovedFile(path=rel, sha256=read.sha256, size=read.size)
    return tuple(known[rel] for rel in sorted(known))


def _record(
    store: Store, run_id: str, full_hash: str, incidents: dict[str, str], files: tuple[MovedFile, ...], reason: str
) -> Outcome:
    """Append the resolution to the incident log, once: an existing record is returned unchanged."""
    key = layout.incident_key(run_id, "RESOLUTION", full_hash)
    resolution = Resolution(
        kind="RESOLUTION",
        action="quarantine",
        run_id=run_id,
        stored_full_config_hash=full_hash,
        artifact_root=store.uri(layout.run_prefix(run_id)),
        quarantine_uri=store.uri(quarantine_prefix(run_id, full_hash)),
        incidents=tuple(sorted(k for k, v in incidents.items() if v == full_hash)),
        files=tuple(sorted(files, key=lambda f: f.path)),
        reason=reason,
        worker={"worker_id": worker_id(), "hostname": socket.gethostname()},
        resolved_at=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    )
    if store.put_if_absent(key, resolution.to_bytes()):
        return Outcome(record_uri=store.uri(key), already_resolved=False, resolution=resolution)
    try:
        existing = parse(store.uri(key), store.get(key, max_bytes=layout.RECORD_MAX_BYTES), Resolution)
    except Invalid as exc:  # was an INTERNAL_ERROR (pydantic's ValidationError) of resolve-collision
        raise IntegrityError(
            f"{exc}; expected the resolution ml8s wrote when it quarantined run {run_id} to "
            f"{resolution.quarantine_uri}: the incident log was damaged since (the record is kept as it is)"
        ) from exc
    return Outcome(record_uri=store.uri(key), already_resolved=True, resolution=existing)
