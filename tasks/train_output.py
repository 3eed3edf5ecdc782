"""What every training task returns, single-rank or in ranks: its own module, so ``tasks.train`` (which picks a
task) and ``tasks.train_ranks`` (the rank tasks it may pick) both use it without importing each other."""

from __future__ import annotations

from typing import NamedTuple

from flytekit.types.directory import FlyteDirectory

from ml8s.training.summary import TrainSummary


class TrainOutput(NamedTuple):
    model: FlyteDirectory
    summary: TrainSummary
