"""What an artifact hashes to: recorded by ``training_metadata.json`` and, with its URI, by ``manifest.json``."""

from __future__ import annotations

from ml8s.contract._base import ContractModel


class ArtifactDigest(ContractModel):
    """sha256 (lowercase hex) and size in bytes of one artifact."""

    sha256: str
    size: int


class ArtifactRef(ArtifactDigest):
    """One final artifact: where it is and what it must hash to."""

    uri: str
