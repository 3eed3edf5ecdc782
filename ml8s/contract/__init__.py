"""The files a run writes (seed 001's artifact layout): where each lives and its schema.

One module per file, each holding the one pydantic model that the step writing the file constructs
and serializes (``to_bytes``), and that the verifier reading it validates (``parse``).
"""

from __future__ import annotations

from ml8s.contract._base import ContractFile, ContractModel
from ml8s.contract._parse import Invalid, Unavailable, checksum_lines, load, parse, parse_checksum_lines
from ml8s.contract.artifact import ArtifactDigest, ArtifactRef
from ml8s.contract.config_snapshot import ConfigSnapshot
from ml8s.contract.data_fingerprint import FingerprintRecord
from ml8s.contract.feature_schema import (
    Feature,
    FeatureSchema,
    IndicatorFeature,
    NumberFeature,
    OneHotFeature,
    RowCounts,
    SplitRecord,
    TargetRecord,
)
from ml8s.contract.incident import Incident, MovedFile, Resolution
from ml8s.contract.manifest import Manifest, RerunAudit
from ml8s.contract.metrics import Metrics
from ml8s.contract.training_metadata import (
    DeterminismRecord,
    ExportRecord,
    ModelRecord,
    ModelSpec,
    TrainingMetadata,
    TrainingRecord,
)

__all__ = [
    "ArtifactDigest",
    "ArtifactRef",
    "ConfigSnapshot",
    "ContractFile",
    "ContractModel",
    "DeterminismRecord",
    "ExportRecord",
    "Feature",
    "FeatureSchema",
    "FingerprintRecord",
    "Incident",
    "IndicatorFeature",
    "Invalid",
    "Manifest",
    "Metrics",
    "ModelRecord",
    "ModelSpec",
    "MovedFile",
    "NumberFeature",
    "OneHotFeature",
    "RerunAudit",
    "Resolution",
    "RowCounts",
    "SplitRecord",
    "TargetRecord",
    "TrainingMetadata",
    "TrainingRecord",
    "Unavailable",
    "checksum_lines",
    "load",
    "parse",
    "parse_checksum_lines",
]
