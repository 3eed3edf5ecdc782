"""Step 4, training: the step the run and the Flyte tasks call; the fit itself lives in ``ml8s.training``.

torch is imported inside each function, so importing the step costs nothing on the early-exit path.
"""

from __future__ import annotations

from ml8s import log
from ml8s.context.run import RunSpec
from ml8s.training.summary import TrainSummary


@log.timed("train")
def train(spec: RunSpec, features_dir: str, out_dir: str) -> TrainSummary:
    """Train in this process, as one rank (the Flyte ``train_cpu``/``train_gpu`` tasks)."""
    from ml8s.training import fit

    return fit.train(spec, features_dir, out_dir)


@log.timed("train")
def train_all_ranks(spec: RunSpec, features_dir: str, out_dir: str) -> TrainSummary:
    """Train in TRAIN_WORLD_SIZE local rank processes, or in this one when it is 1 (``ml8s run``, reproduce)."""
    from ml8s.training.launch import train_ranks_or_one

    return train_ranks_or_one(spec, features_dir, out_dir)
