"""The multi-rank training tasks (``tasks/train_ranks.py``), registered with the workflows package.

``tasks.train.train_model`` launches them from its dynamic body, importing them only then: Flyte's PyTorch
plugin imports torch, and ``workflows/training.py`` (imported by every run, the early exit included) must
not. ``pyflyte --pkgs workflows package`` / ``register`` load every module of this package, so importing
them here puts them in the package beside the workflows.
"""

from __future__ import annotations

from tasks.train_ranks import RANK_TASKS

__all__ = ["RANK_TASKS"]
