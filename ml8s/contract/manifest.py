"""``manifest.json``: what a completed run returns to its caller, byte for byte on every re-run.

Finalization writes it just before the marker; the idempotence gate returns those bytes unchanged, so
an early exit needs neither MLflow nor torch.
"""

from __future__ import annotations

from ml8s.contract._base import ContractFile, ContractModel
from ml8s.contract.artifact import ArtifactRef


class RerunAudit(ContractModel):
    """FORCE_RERUN's free determinism audit: did the regenerated artifacts equal the old ones?

    ``recomputed`` names the steps that ran again with no cached result; ``changed`` the artifacts whose
    sha256 differs from ``previous_sha256`` (what training_metadata.json recorded before the re-run);
    every other artifact was reproduced byte for byte.
    """

    reproduced: bool
    changed: tuple[str, ...]
    previous_sha256: dict[str, str]
    recomputed: tuple[str, ...] = ()


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

    def chain_payload(self) -> bytes:
        """The manifest as the model chain holds it: without the FORCE_RERUN audit.

        A run is committed to its chain once, by its first completion; a forced re-run rewrites
        ``manifest.json`` with its audit, and what it must still agree with is the rest (identity,
        artifacts and their sha256, MLflow). For a run never forced these are the file's bytes exactly.
        """
        return self.model_copy(update={"force_rerun": None}).to_bytes()
