"""torch's Adam, the same kernels and the same bits, without loading TorchDynamo.

torch wraps an optimizer's ``add_param_group``, ``zero_grad`` and ``step`` so that ``torch.compile`` can trace
around them, and each wrapper imports ``torch._dynamo`` the first time it runs: 1.4 CPU seconds and about
60 MiB of peak RSS in every training process, for a compiler that ml8s never runs. This subclass calls the
functions those wrappers wrap, so nothing else changes: the arithmetic is torch's own ``Adam`` (a
``torch.optim.Adam``, which a plug-in's train step receives as before), and its hooks and profiler ranges
still run. torch is pinned; tests/test_training_imports.py fails if a torch upgrade moves the wrappers.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from typing import overload

import torch

# The undecorated functions behind torch's dynamo wrappers (functools.wraps keeps them as __wrapped__).
_ADD_PARAM_GROUP: Callable[[torch.optim.Optimizer, dict[str, object]], None] = inspect.unwrap(
    torch.optim.Optimizer.add_param_group
)
_ZERO_GRAD: Callable[[torch.optim.Optimizer, bool], None] = inspect.unwrap(torch.optim.Optimizer.zero_grad)
_ADAM_STEP: Callable[[torch.optim.Adam, Callable[[], float] | None], float | None] = inspect.unwrap(
    torch.optim.Adam.step
)


class Adam(torch.optim.Adam):
    """``torch.optim.Adam`` whose methods do not import the torch.compile stack on first use."""

    def add_param_group(self, param_group: dict[str, object]) -> None:
        _ADD_PARAM_GROUP(self, param_group)

    def zero_grad(self, set_to_none: bool = True) -> None:
        _ZERO_GRAD(self, set_to_none)

    @overload
    def step(self, closure: None = None) -> None: ...

    @overload
    def step(self, closure: Callable[[], float]) -> float: ...

    def step(self, closure: Callable[[], float] | None = None) -> float | None:
        # torch's wrapper turns gradients off for the update (defaults["differentiable"] is False) and
        # breaks a compiled graph around it; only the first matters outside torch.compile.
        with torch.no_grad():
            return _ADAM_STEP(self, closure)


def adam(params: Iterable[torch.nn.Parameter], learning_rate: float, capturable: bool = False) -> Adam:
    """The optimizer every built-in training path uses (cold, warm and per rank)."""
    return Adam(params, lr=learning_rate, capturable=capturable)
