"""The run manifest: what a completed run returns to its caller, byte for byte on every re-run.

Finalization writes it (``manifest.json``) just before the marker; the idempotence gate returns those
bytes unchanged, so an early exit needs neither MLflow nor torch.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from ml8s.identity.hashing import canonical_bytes


class ArtifactRef(BaseModel):
    """One final artifact: where it is and what it must hash to."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    uri: str
    sha256: str
    size: int


class RerunAudit(BaseModel):
    """FORCE_RERUN's free determinism audit: did the regenerated artifacts equal the old ones?"""

    model_config = ConfigDict(extra="forbid", frozen=True)

    reproduced: bool
    changed: tuple[str, ...]
    previous_sha256: dict[str, str]


class Manifest(BaseModel):
    """The canonical run manifest of Step 7."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    run_id: str
    full_config_hash: str
    data_fingerprint: str
    canonicalization_version: str
    artifact_root: str
    artifacts: dict[str, ArtifactRef]
    mlflow: dict[str, str]
    force_rerun: RerunAudit | None = None

    def to_bytes(self) -> bytes:
        return canonical_bytes(self.model_dump(mode="json"))
