"""The per-epoch record of a training: train loss, held-out loss and accuracy, and when each epoch ended.

Training is a pure, cached step that never talks to MLflow. It records each epoch here instead and writes
the record to ``logs/epochs.json`` (a log, like the TensorBoard events: wall-clock times inside, never
checksummed nor hashed); registration replays it into the MLflow run with each point's step and recorded
time, and opens the MLflow run at the recorded start of training (docs/architecture.md).

The held-out evaluation after each epoch changes nothing training computes: the model runs in eval mode
under ``torch.no_grad`` (no gradient, no batch-norm statistic updated), no random number is drawn, and
training mode is restored. The weights' bytes are those of a training without it.
"""

from __future__ import annotations

import time

import numpy as np
import torch

from ml8s.context.publish import local_path
from ml8s.contract.epochs import EpochRecord, epochs_bytes
from ml8s.contract.layout import EPOCH_LOG
from ml8s.training.metrics import Labels


class EpochRecorder:
    """Collects :class:`EpochRecord` s; ``held_out`` is None where no held-out evaluation is made per epoch."""

    def __init__(self, held_out: tuple[torch.Tensor, Labels] | None) -> None:
        self.started_ms: int | None = int(time.time() * 1000)
        self.records: list[EpochRecord] = []
        self._held_out = held_out

    def end_epoch(self, model: torch.nn.Module, train_loss: float) -> EpochRecord:
        """Record the epoch just trained (evaluating ``model`` on the held-out rows, see the module docstring)."""
        log_loss = accuracy = None
        if self._held_out is not None and len(self._held_out[1]):
            log_loss, accuracy = held_out_figures(model, *self._held_out)
        record = EpochRecord(
            epoch=len(self.records) + 1,
            train_loss=train_loss,
            held_out_log_loss=log_loss,
            held_out_accuracy=accuracy,
            time_ms=int(time.time() * 1000),
        )
        self.records.append(record)
        return record


def held_out_figures(model: torch.nn.Module, x: torch.Tensor, labels: Labels) -> tuple[float, float]:
    """(log-loss, accuracy) of ``model`` on ``x``, computed in float64 like the final held-out metrics."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            logits = model(x).to("cpu").numpy().astype(np.float64)
    finally:
        model.train(was_training)
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    picked = np.maximum(log_probs[np.arange(len(labels)), labels], np.log(1e-15))
    return float(-picked.mean()), float((logits.argmax(axis=1) == labels).mean())


def write_epoch_log(out_dir: str, recorder: EpochRecorder) -> None:
    """Write ``logs/epochs.json`` of ``recorder`` into the training's output directory."""
    path = local_path(out_dir, EPOCH_LOG)
    with open(path, "wb") as handle:
        handle.write(epochs_bytes(recorder.started_ms, recorder.records))
