"""The one interface every model family implements, built-in or brought by a team (a plug-in).

A family is how a network is made and trained: ``build`` turns the model's numbers (a
:class:`~ml8s.contract.ModelSpec`: feature and class counts, HIDDEN_UNITS, HIDDEN_LAYERS, MODEL_TYPE)
into a fresh ``torch.nn.Module`` mapping ``features[batch, n_features]`` (float32) to
``logits[batch, n_classes]``; ``train_step`` runs one optimization step on one minibatch. Everything
else (seeding, deterministic kernels, batching, the Adam optimizer, metrics, export, the artifact layout)
stays ml8s's, so a plug-in run is verified like any other.

This module imports no torch at run time (the verifier and bootstrap import it): torch appears in the
annotations only. A dataclass, not a pydantic model: it holds functions, and is never serialized.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ml8s.contract.training_metadata import ModelSpec

if TYPE_CHECKING:
    import torch

Build = Callable[[ModelSpec], "torch.nn.Module"]
# (model, optimizer, x, y) -> the minibatch loss: zero the gradients, forward, backward, optimizer.step().
TrainStep = Callable[["torch.nn.Module", "torch.optim.Optimizer", "torch.Tensor", "torch.Tensor"], "torch.Tensor"]


@dataclass(frozen=True)
class ModelFamily:
    """A model family: how its network is built and, optionally, how one minibatch trains it.

    Attributes:
        build: a fresh module for the spec. Called once per training (after every RNG is seeded, so
            the initial weights are reproducible) and again by export to load the trained weights.
        train_step: one optimization step; ``None`` = ml8s's cross-entropy step
            (``ml8s.modeling.registry.cross_entropy_step``). It must be deterministic given the seeded RNGs.
    """

    build: Build
    train_step: TrainStep | None = None
