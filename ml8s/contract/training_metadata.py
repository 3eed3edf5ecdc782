"""``training_metadata.json``: how the model was made and what every checksummed artifact hashes to.

No timestamps, hosts, paths, nor the run's identity (``config_snapshot.json`` holds that, and names
DATA_ROOT): the file is byte-identical for the same data bytes and settings, read from a disk or from
a bucket. Every field is typed strictly: an unknown, renamed or retyped field FAILs verification.
"""

from __future__ import annotations

from ml8s.contract._base import ContractFile, ContractModel
from ml8s.contract.artifact import ArtifactDigest
from ml8s.contract.drift import DriftReport
from ml8s.identity.hashing import canonical_bytes


class ModelSpec(ContractModel):
    """Everything needed to rebuild the network before loading its weights."""

    model_type: str
    n_features: int
    n_classes: int
    hidden_units: int
    hidden_layers: int


class ModelRecord(ContractModel):
    architecture: str
    classes: list[str]
    feature_names: list[str]
    parameter_count: int
    spec: ModelSpec


class TrainingRecord(ContractModel):
    batch_size: int
    epoch_losses: list[float]
    epochs: int
    learning_rate: float
    optimizer: str
    random_seed: int
    test_rows: int
    train_rows: int


class ExportRecord(ContractModel):
    """The export's validation against the torch model on the held-out rows."""

    format: str
    held_out_rows: int
    max_abs_diff: float
    onnx_opset: int | None
    tolerance: float


class DeterminismRecord(ContractModel):
    """The switches set for bit-reproducible training (``ml8s.modeling.families.determinism_flags``)."""

    cublas_workspace_config: str
    cudnn_benchmark: bool
    cudnn_deterministic: bool
    device: str
    torch_num_threads: int | None
    use_deterministic_algorithms: bool


class TrainingMetadata(ContractFile):
    """The whole file; ``artifacts`` maps each checksummed artifact (``layout.checksummed_artifacts``)."""

    artifacts: dict[str, ArtifactDigest]
    canonicalization_version: str
    determinism: DeterminismRecord
    export: ExportRecord
    model: ModelRecord
    training: TrainingRecord
    versions: dict[str, str]
    # A warm start's drift report (ml8s.contract.drift); absent from the file of a cold start, never null, so
    # a cold start's file is byte for byte what it was before drift reports.
    drift: DriftReport | None = None

    def to_bytes(self) -> bytes:
        record = self.model_dump(mode="json")
        if record["drift"] is None:
            del record["drift"]
        return canonical_bytes(record)
