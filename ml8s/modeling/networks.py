"""The two model families (MLP, logistic regression) as plain torch modules, rebuilt identically by
training, export and any consumer from the numbers in ``TrainSummary``."""

from __future__ import annotations

import torch
from pydantic import BaseModel, ConfigDict


class ModelSpec(BaseModel):
    """Everything needed to rebuild the network before loading its weights."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model_type: str
    n_features: int
    n_classes: int
    hidden_units: int
    hidden_layers: int


def build_model(spec: ModelSpec) -> torch.nn.Sequential:
    """``logreg``: one linear layer; ``mlp``: HIDDEN_LAYERS x (Linear, ReLU) then a linear head.

    Layers are created in a fixed order so a seeded RNG gives the same initial weights.
    """
    layers: list[torch.nn.Module] = []
    width = spec.n_features
    if spec.model_type == "mlp":
        for _ in range(spec.hidden_layers):
            layers += [torch.nn.Linear(width, spec.hidden_units), torch.nn.ReLU()]
            width = spec.hidden_units
    layers.append(torch.nn.Linear(width, spec.n_classes))
    return torch.nn.Sequential(*layers)


def parameter_count(model: torch.nn.Module) -> int:
    return sum(int(p.numel()) for p in model.parameters())


def architecture(spec: ModelSpec) -> str:
    """A readable, stable description, e.g. ``mlp:12-64-64-2``."""
    hidden = [spec.hidden_units] * spec.hidden_layers if spec.model_type == "mlp" else []
    return f"{spec.model_type}:" + "-".join(str(w) for w in [spec.n_features, *hidden, spec.n_classes])
