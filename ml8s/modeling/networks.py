"""The model families as plain torch modules, rebuilt identically by training, export and any consumer
from the numbers in ``TrainSummary``: each layer of ``families.layers(spec)`` becomes its torch module."""

from __future__ import annotations

import torch

from ml8s.contract.training_metadata import ModelSpec
from ml8s.modeling.families import Layer, Linear, layers


def build_model(spec: ModelSpec) -> torch.nn.Sequential:
    """The family's layers as torch modules, created in the family's order so a seeded RNG gives the
    same initial weights."""
    return torch.nn.Sequential(*(_module(layer) for layer in layers(spec)))


def parameter_count(model: torch.nn.Module) -> int:
    """Parameters the torch module actually holds (what the run records; the verifier recomputes it)."""
    return sum(int(p.numel()) for p in model.parameters())


def _module(layer: Layer) -> torch.nn.Module:
    if isinstance(layer, Linear):
        return torch.nn.Linear(layer.in_features, layer.out_features)
    return torch.nn.ReLU()
