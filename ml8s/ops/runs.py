"""``ml8s runs list``: every run under a pipeline root with its status and model version.

Status: ``complete`` (success.marker present), ``incomplete`` (no marker: running, crashed, or being
resolved), ``collided`` (the gate recorded a RUN_ID_HASH_COLLISION against the run stored there now,
not yet resolved), ``quarantined`` (moved aside by ``ml8s resolve-collision``). The model version is
the one manifest.json records; the registry column says whether MLflow still holds that registration
(``confirmed``) or not (``UNCONFIRMED``: the database was deleted, recreated or replaced; the lines below
the table say why). MLflow is asked only when some run recorded a registration.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict

from ml8s.contract import layout
from ml8s.errors import NotFoundError, ObjectTooLargeError, UnsafeObjectError
from ml8s.identity.hashing import json_loads
from ml8s.ops.collision import collision_incidents
from ml8s.ops.tmp_keys import QUARANTINE_DIR
from ml8s.store import Store

_RUN_ID = re.compile(r"^[0-9a-f]{12}$")
_FULL_HASH = re.compile(r"^[0-9a-f]{64}$")


class RunEntry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    run_id: str
    status: str
    full_config_hash: str
    model_name: str
    model_version: str
    files: int
    location: str
    registration: str = ""  # "confirmed", "unconfirmed: <why>", "" when the run recorded no registration


class RunListing(BaseModel):
    """The runs under a root, and the entries where runs are kept that are no run (``not_runs``: a stray
    file, a folder whose name is no RUN_ID), listed apart rather than as runs or in silence."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    runs: tuple[RunEntry, ...]
    not_runs: tuple[str, ...]


def list_runs(store: Store, env: Mapping[str, str] | None = None) -> list[RunEntry]:
    """Runs under ``ml8s_training_runs/`` then quarantined ones, sorted by run id. With ``env`` (where
    MLFLOW_TRACKING_URI's credentials come from), each recorded registration is checked in MLflow."""
    return list(list_root(store, env).runs)


def list_root(store: Store, env: Mapping[str, str] | None = None) -> RunListing:
    """:func:`list_runs`, with the entries that are no run (:class:`RunListing`), as store URIs, sorted."""
    strays: set[str] = set()
    entries = _runs(store, strays)
    strays |= _irregular_entries(store)
    live = [e for e in entries if e.model_version and e.status != "quarantined"]
    refs = {e.run_id: _mlflow_ref(store, layout.run_prefix(e.run_id)) for e in live}
    if env is not None and refs:
        from ml8s.ops.registrations import registration_states

        states = registration_states(refs, env)
        entries = [e.model_copy(update={"registration": states.get(e.run_id, "")}) if e in live else e for e in entries]
    return RunListing(runs=tuple(entries), not_runs=tuple(sorted(store.uri(key) for key in strays)))


def _runs(store: Store, strays: set[str]) -> list[RunEntry]:
    entries: list[RunEntry] = []
    for (run_id,), keys in sorted(_keys_by(store, layout.RUNS_DIR, 1, strays).items()):
        prefix = layout.run_prefix(run_id)
        full_hash = str(_read_json(store, f"{prefix}/{layout.CONFIG_SNAPSHOT}").get("full_config_hash", ""))
        complete = f"{prefix}/{layout.SUCCESS_MARKER}" in keys
        collided = bool(full_hash) and full_hash in collision_incidents(store, run_id, skip_unsafe=True).values()
        status = "collided" if collided else "complete" if complete else "incomplete"
        entries.append(_entry(store, run_id, status, full_hash, prefix, len(keys)))
    for (run_id, full_hash), keys in sorted(_keys_by(store, QUARANTINE_DIR, 2, strays).items()):
        entries.append(
            _entry(store, run_id, "quarantined", full_hash, f"{QUARANTINE_DIR}/{run_id}/{full_hash}", len(keys))
        )
    return entries


def render_runs(entries: list[RunEntry]) -> str:
    """A plain table, one run per line."""
    if not entries:
        return "no runs\n"
    header = ("RUN_ID", "STATUS", "MODEL", "REGISTRY", "FULL_CONFIG_HASH", "FILES", "LOCATION")
    rows = [
        (
            e.run_id,
            e.status,
            f"{e.model_name} v{e.model_version}" if e.model_version else "-",
            e.registration.split(":")[0].replace("unconfirmed", "UNCONFIRMED") or "-",
            e.full_config_hash or "-",
            str(e.files),
            e.location,
        )
        for e in entries
    ]
    widths = [max(len(r[i]) for r in (header, *rows)) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in (header, *rows)]
    lines += [f"{e.run_id}: registration {e.registration}" for e in entries if e.registration.startswith("unconfirmed")]
    return "".join(line + "\n" for line in lines)


def _mlflow_ref(store: Store, prefix: str) -> dict[str, object]:
    """The ``mlflow`` object of the manifest under ``prefix`` ({} when none)."""
    mlflow = _read_json(store, f"{prefix}/{layout.MANIFEST}").get("mlflow")
    return {str(k): v for k, v in mlflow.items()} if isinstance(mlflow, dict) else {}


def _entry(store: Store, run_id: str, status: str, full_hash: str, prefix: str, files: int) -> RunEntry:
    ref = _mlflow_ref(store, prefix)
    return RunEntry(
        run_id=run_id,
        status=status,
        full_config_hash=full_hash,
        model_name=str(ref.get("model_name", "")),
        model_version=str(ref.get("model_version", "")),
        files=files,
        location=store.uri(prefix),
    )


def _keys_by(store: Store, top: str, depth: int, strays: set[str]) -> dict[tuple[str, ...], list[str]]:
    """Keys under ``top/`` grouped by their first ``depth`` path segments below it (``.tmp/`` left out): a RUN_ID,
    then (``depth`` 2) a FULL_CONFIG_HASH. A key that is not below such names adds its entry that is not (a
    file, or a folder of another name) to ``strays``."""
    groups: dict[tuple[str, ...], list[str]] = {}
    names = (_RUN_ID, _FULL_HASH)[:depth]
    for info in store.list(f"{top}/"):
        parts = info.key.split("/")
        if parts[1] == layout.TMP_DIR:
            continue
        # the first segment that is a file, or not the name it must be: where the stray entry ends
        bad = next(
            (n for n in range(1, depth + 1) if n == len(parts) - 1 or not names[n - 1].fullmatch(parts[n])), None
        )
        if bad is not None:
            strays.add("/".join(parts[: bad + 1]))
            continue
        groups.setdefault(tuple(parts[1 : depth + 1]), []).append(info.key)
    return groups


def _irregular_entries(store: Store) -> set[str]:
    """Where runs are kept, entries that are no folder or file (a RUN_ID folder replaced by a symbolic link, a FIFO):
    the listing leaves them out, so a run replaced by a link vanished from the table without a word. What is inside
    a run is ``ml8s verify``'s to report."""
    depth = {layout.RUNS_DIR: 2, QUARANTINE_DIR: 3}
    return {
        key
        for top, deepest in depth.items()
        for key in store.irregular(top)
        if 2 <= len(parts := key.split("/")) <= deepest and layout.TMP_DIR not in parts
    }


def _read_json(store: Store, key: str) -> dict[str, object]:
    """A JSON object from the store; {} when missing or unreadable: a damaged run is listed (``ml8s verify`` says
    what is wrong with it), never a reason to list none."""
    try:
        value: object = json_loads(store.get(key, max_bytes=layout.RECORD_MAX_BYTES))
    except (NotFoundError, UnsafeObjectError, ObjectTooLargeError, ValueError):
        return {}
    return {str(k): v for k, v in value.items()} if isinstance(value, dict) else {}
