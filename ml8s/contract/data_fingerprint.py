"""``data_fingerprint.json``: the DATA_FINGERPRINT and every token it was computed from (SPEC §2)."""

from __future__ import annotations

from ml8s.contract._base import ContractFile
from ml8s.data.fingerprint import FileEntry, Fingerprint

ALGORITHM = "sha256('|'.join(sorted(f'{relative_path}:{checksum}:{size}')))"
LOCAL_CHECKSUM = "sha256 of the file bytes"
OBJECT_CHECKSUM = "ETag without quotes"


class FingerprintRecord(ContractFile):
    """How the fingerprint was computed, and from which files."""

    algorithm: str
    checksum: str
    data_root: str
    fingerprint: str
    files: list[FileEntry]

    @classmethod
    def of(cls, fingerprint: Fingerprint) -> FingerprintRecord:
        local = fingerprint.data_root.startswith("file://")
        return cls(
            algorithm=ALGORITHM,
            checksum=LOCAL_CHECKSUM if local else OBJECT_CHECKSUM,
            data_root=fingerprint.data_root,
            fingerprint=fingerprint.fingerprint,
            files=list(fingerprint.entries),
        )
