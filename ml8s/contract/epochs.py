"""``logs/epochs.json``: each epoch's train loss, held-out loss and accuracy, and the time it ended.

A log (wall-clock times inside), never checksummed nor hashed: ``ml8s.training.epochs`` writes it, registration
replays it into the MLflow run.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict

from ml8s.identity.hashing import json_loads


class EpochRecord(BaseModel):
    """One epoch: its number (from 1), mean train loss, held-out figures (None when not evaluated), end time."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    epoch: int
    train_loss: float
    held_out_log_loss: float | None = None
    held_out_accuracy: float | None = None
    time_ms: int | None = None


def epochs_bytes(started_ms: int | None, records: Sequence[EpochRecord]) -> bytes:
    """``logs/epochs.json``: ``{"started_ms": …, "epochs": [...]}``, keys sorted."""
    body = {"started_ms": started_ms, "epochs": [r.model_dump() for r in records]}
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode() + b"\n"


def read_epochs(data: bytes) -> tuple[int | None, list[EpochRecord]]:
    """The start time and records of ``logs/epochs.json`` (ValueError when malformed)."""
    body = json_loads(data)
    if not isinstance(body, dict) or not isinstance(body.get("epochs"), list):
        raise ValueError("expected a JSON object with an 'epochs' list")
    started = body.get("started_ms")
    if started is not None and not isinstance(started, int):
        raise ValueError("expected 'started_ms' to be an integer or null")
    return started, [EpochRecord.model_validate(item) for item in body["epochs"]]
