"""``manifest.json``: what a completed run returns to its caller, byte for byte on every re-run.

Finalization writes it just before the marker; the idempotence gate returns those bytes unchanged, so
an early exit needs neither MLflow nor torch.
"""

from __future__ import annotations

from ml8s.contract._base import ContractFile, ContractModel
from ml8s.contract.artifact import ArtifactDigest, ArtifactRef
from ml8s.contract.chain_manifest import ChainManifest


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

    def chain_manifest(self) -> ChainManifest:
        """The manifest as a chain version holds it (canonicalization 2.1.0 on): identity and digests only.

        Neither the FORCE_RERUN audit nor anything naming the pipeline root or MLflow: a forced re-run that
        reproduced every artifact still agrees with the block, and the same model has the same content hash
        wherever it was trained (``ml8s.contract.chain_manifest``).
        """
        return ChainManifest(
            run_id=self.run_id,
            full_config_hash=self.full_config_hash,
            data_fingerprint=self.data_fingerprint,
            canonicalization_version=self.canonicalization_version,
            artifacts={rel: ArtifactDigest(sha256=a.sha256, size=a.size) for rel, a in sorted(self.artifacts.items())},
        )

    def chain_payload(self) -> bytes:
        """The bytes of the ``manifest.json`` payload a version of this run holds: the chain manifest from
        canonicalization 2.1.0 on, the legacy form before (runs keep verifying against their blocks)."""
        if self.canonicalization_version in ("1.0.0", "1.1.0", "2.0.0"):
            return self.legacy_chain_payload()
        return self.chain_manifest().to_bytes()

    def legacy_chain_payload(self) -> bytes:
        """What versions committed before 2.1.0 hold: the run's manifest without its FORCE_RERUN audit (it
        still names the root and MLflow run)."""
        return self.model_copy(update={"force_rerun": None}).to_bytes()
