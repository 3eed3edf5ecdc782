"""``config_snapshot.json``: the run's identity (SPEC §2), written by the snapshot step."""

from __future__ import annotations

from ml8s.contract._base import ContractFile
from ml8s.identity.hashing import RunIdentity
from ml8s.identity.variables import JsonValue


class ConfigSnapshot(ContractFile):
    """The canonical config and everything derived from it that names the run."""

    canonical_config: dict[str, JsonValue]
    canonicalization_version: str
    data_fingerprint: str
    full_config_hash: str
    run_id: str

    @classmethod
    def of(cls, identity: RunIdentity) -> ConfigSnapshot:
        return cls(
            canonical_config=identity.canonical_config,
            canonicalization_version=identity.canonicalization_version,
            data_fingerprint=identity.data_fingerprint,
            full_config_hash=identity.full_config_hash,
            run_id=identity.run_id,
        )
