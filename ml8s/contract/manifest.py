"""``manifest.json``: what a completed run returns to its caller, byte for byte on every re-run.

Finalization writes it just before the marker; the idempotence gate returns those bytes unchanged, so
an early exit needs neither MLflow nor torch.
"""

from __future__ import annotations

from ml8s.contract._base import ContractFile, ContractModel
from ml8s.contract.artifact import ArtifactRef


class RerunAudit(ContractModel):
    """FORCE_RERUN's free determinism audit: did the regenerated artifacts equal the old ones?"""

    reproduced: bool
    changed: tuple[str, ...]
    previous_sha256: dict[str, str]


class Manifest(ContractFile):
    """The canonical run manifest of Step 7."""

    run_id: str
    full_config_hash: str
    data_fingerprint: str
    canonicalization_version: str
    artifact_root: str
    artifacts: dict[str, ArtifactRef]
    mlflow: dict[str, str]
    force_rerun: RerunAudit | None = None
