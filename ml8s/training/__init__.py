"""Deterministic training: the fit loop, its state, warm starts and multi-rank training.

- ``fit``: one process trains the model family of the spec (``train``), writes the native weights, metrics
  and training state.
- ``summary``: :class:`TrainSummary`, what training hands to export (no torch).
- ``state``: the training state file (optimizer moments, RNG states, lineage counters).
- ``warm``: a warm start: the parent's weights, optimizer and RNG restored, batches from the record history.
- ``ddp``, ``ranks``, ``launch``: TRAIN_WORLD_SIZE > 1: DDP set-up, one rank's work, local rank processes.
- ``metrics``, ``tensorboard``: held-out metrics and the per-epoch event log.

The step that runs them is ``ml8s.pipeline.train``. Only ``summary`` is re-exported here: the other modules
import torch, which the early-exit path must not load.
"""

from ml8s.training.summary import TrainSummary

__all__ = ["TrainSummary"]
