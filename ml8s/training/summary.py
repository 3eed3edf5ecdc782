"""What training hands to export, importable without torch: a Flyte task interface names this type.

The training task returns it and the export task takes it (both cached), so it is part of the export
task's cache key: every field is a plain value, a tuple or a contract model, serialized in field order.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from ml8s.contract import ModelSpec


class TrainSummary(BaseModel):
    """What training produced, passed to export (and recorded in training_metadata.json)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    spec: ModelSpec
    architecture: str
    parameter_count: int
    classes: tuple[str, ...]
    feature_names: tuple[str, ...]
    epoch_losses: tuple[float, ...]
    train_rows: int
    test_rows: int
