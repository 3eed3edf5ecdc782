"""The incident log ``ml8s_incidents/{RUN_ID}/{kind}-{FULL_CONFIG_HASH}.json`` (``layout.incident_key``).

The gate records an :class:`Incident` when a run halts on a collision or on drifted data; ``ml8s
resolve-collision`` records a :class:`Resolution`. Both are audit records, outside every ARTIFACT_ROOT:
they carry a host name and a time, and nothing hashes them.
"""

from __future__ import annotations

from pydantic import JsonValue

from ml8s.contract._base import ContractFile, ContractModel
from ml8s.contract.config_snapshot import ConfigSnapshot


class Incident(ContractFile):
    """Why the gate halted: what ARTIFACT_ROOT holds (``stored``, as read) against what this run computed."""

    kind: str
    run_id: str
    artifact_root: str
    stored: dict[str, JsonValue]  # the stored config_snapshot.json as found: possibly another writer's
    computed: ConfigSnapshot
    worker: dict[str, str]
    recorded_at: str


class MovedFile(ContractModel):
    """One file copied into the quarantine."""

    path: str
    sha256: str
    size: int


class Resolution(ContractFile):
    """A collision resolved: the colliding run moved aside, with the incidents it answers."""

    kind: str
    action: str
    run_id: str
    stored_full_config_hash: str
    artifact_root: str
    quarantine_uri: str
    incidents: tuple[str, ...]
    files: tuple[MovedFile, ...]
    reason: str
    worker: dict[str, str]
    resolved_at: str
