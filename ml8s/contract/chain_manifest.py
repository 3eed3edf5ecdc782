"""The ``manifest.json`` a chain version holds (canonicalization 2.1.0 on): the run's identity and the
sha256 of every artifact, and nothing that depends on where the run was written or registered.

The run's own ``manifest.json`` names its pipeline root (artifact URIs, ARTIFACT_ROOT) and its MLflow run;
a chain payload holding those would hash differently for the same model trained in two places. This
projection makes a version's content hash a function of (config, data, code) alone: two trainers that
warm-start from one parent on the same data commit byte-identical payloads, and ``ml8s chain reproduce``
can compare content hashes. Versions committed earlier hold the run's manifest without its FORCE_RERUN
audit (``Manifest.legacy_chain_payload``); verification accepts either form.
"""

from __future__ import annotations

from ml8s.contract._base import ContractFile
from ml8s.contract.artifact import ArtifactDigest


class ChainManifest(ContractFile):
    """Identity plus artifact digests: what a version's manifest.json payload is."""

    run_id: str
    full_config_hash: str
    data_fingerprint: str
    canonicalization_version: str
    artifacts: dict[str, ArtifactDigest]
