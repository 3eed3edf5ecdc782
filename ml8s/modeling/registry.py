"""Every model family a run can train, by MODEL_TYPE: the built-in ones and plug-ins, one interface.

``mlp`` and ``logreg`` are two :class:`~ml8s.modeling.family.ModelFamily` values built from their
layer lists (``families.py``), trained by :func:`cross_entropy_step`; a ``plugin:<module>:<attribute>``
is loaded by import path (``plugins.py``) after its code is checked against the code identity the run
recorded, so a model is never trained by code other than the code its RUN_ID names.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch

from ml8s.contract.training_metadata import ModelSpec
from ml8s.errors import ConfigError, Ml8sError, ModelCodeChangedError, TrainingError
from ml8s.identity.model_code import PluginRef, parse_model_type
from ml8s.identity.variables import JsonValue
from ml8s.modeling.families import MODEL_TYPES
from ml8s.modeling.family import Build, ModelFamily, TrainStep
from ml8s.modeling.networks import build_model
from ml8s.modeling.plugins import code_identity, import_target
from ml8s.text import quoted


def cross_entropy_step(
    model: torch.nn.Module, optimizer: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor
) -> torch.Tensor:
    """The built-in families' step: cross-entropy of the logits against the class indices, one Adam step."""
    optimizer.zero_grad(set_to_none=True)
    loss = torch.nn.functional.cross_entropy(model(x), y)
    torch.autograd.backward(loss)
    optimizer.step()
    return loss


BUILTIN_FAMILIES: dict[str, ModelFamily] = {name: ModelFamily(build=build_model) for name in MODEL_TYPES}


def family_for(model_type: str, model_code: JsonValue) -> ModelFamily:
    """The family that trains MODEL_TYPE, with a train step (the default one when the family has none).

    Args:
        model_type: MODEL_TYPE from the canonical config.
        model_code: the canonical config's ``model_code`` (``None`` for a built-in family).

    Raises:
        ModelCodeChangedError: the plug-in's code is not the code the run recorded at bootstrap.
        ConfigError: MODEL_TYPE is malformed or cannot be imported.
    """
    plugin = parse_model_type(model_type)
    if plugin is None:
        builtin = BUILTIN_FAMILIES.get(model_type)
        if builtin is None:
            raise ConfigError(
                f"MODEL_TYPE={quoted(model_type)} is not a model family; expected one of {list(MODEL_TYPES)}"
            )
        return ModelFamily(build=builtin.build, train_step=builtin.train_step or cross_entropy_step)
    now = code_identity(plugin)
    if now != model_code:
        raise ModelCodeChangedError(
            f"MODEL_TYPE={model_type!r}: the plug-in's code is {now}, but the run recorded {model_code} at "
            "bootstrap; expected the same code where the run trains (re-run to train under the new identity)"
        )
    target = import_target(plugin)
    family = target if isinstance(target, ModelFamily) else None
    build: Callable[[ModelSpec], object] = family.build if family else _as_build(target, plugin)
    own = family is not None and family.train_step is not None
    step = family.train_step if family and family.train_step else cross_entropy_step
    return ModelFamily(build=_checked_build(build, plugin), train_step=CheckedStep(step, plugin, own=own))


def _as_build(target: object, plugin: PluginRef) -> Callable[[ModelSpec], object]:
    if not callable(target):  # import_target checked it; this narrows the type
        raise ConfigError(f"MODEL_TYPE={quoted(plugin.model_type)} is neither a ModelFamily nor callable")

    def build(spec: ModelSpec) -> object:
        return target(spec)

    return build


def _checked_build(build: Callable[[ModelSpec], object], plugin: PluginRef) -> Build:
    def checked(spec: ModelSpec) -> torch.nn.Module:
        with _named(plugin, "build"):
            model = build(spec)
        if not isinstance(model, torch.nn.Module):
            raise TrainingError(
                f"MODEL_TYPE={plugin.model_type!r} built a {type(model).__name__}; expected a torch.nn.Module"
            )
        if next(iter(model.parameters()), None) is None:  # the optimizer refused it with a raw ValueError
            raise TrainingError(
                f"MODEL_TYPE={plugin.model_type!r} built a {type(model).__name__} without parameters; expected a "
                "module with weights to train"
            )
        return model

    return checked


class CheckedStep:
    """A plug-in's training step whose failures name MODEL_TYPE: its own ``train_step``, or ml8s's cross-entropy
    step on its module (``own`` False), which TRAIN_WORLD_SIZE>1 trains as it trains a built-in family."""

    def __init__(self, step: TrainStep, plugin: PluginRef, *, own: bool) -> None:
        self.step, self.plugin, self.own = step, plugin, own

    def __call__(
        self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor
    ) -> torch.Tensor:
        what = "train_step" if self.own else "module, trained by ml8s's cross-entropy step,"
        with _named(self.plugin, what):
            loss: object = self.step(model, optimizer, x, y)
        if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
            raise TrainingError(
                f"MODEL_TYPE={self.plugin.model_type!r}: train_step returned {type(loss).__name__}; "
                "expected the minibatch loss as a one-element tensor"
            )
        return loss


def brings_own_step(family: ModelFamily) -> bool:
    """Whether ``family`` trains with a step other than ml8s's cross-entropy step (a plug-in's ``train_step``).

    Every plug-in's step is a :class:`CheckedStep`, ml8s's own included: compared with ``cross_entropy_step``
    alone, a plug-in without a ``train_step`` was refused with TRAIN_WORLD_SIZE>1 as bringing its own."""
    step = family.train_step
    if step is None or step is cross_entropy_step:
        return False
    return not isinstance(step, CheckedStep) or step.own


@contextmanager
def _named(plugin: PluginRef, what: str) -> Iterator[None]:
    """Whatever the plug-in's own code raises becomes a TrainingError naming it (ml8s's errors pass through)."""
    try:
        yield
    except Ml8sError:
        raise
    except Exception as exc:
        raise TrainingError(
            f"MODEL_TYPE={plugin.model_type!r}: its {what} raised {type(exc).__name__}: {exc}; "
            "expected it to succeed (a non-deterministic kernel is refused: training runs deterministic)"
        ) from exc
