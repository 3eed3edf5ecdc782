"""One epoch of optimizer steps over a shuffled order of training rows, without waiting on the device.

The epoch's losses are summed on the device, in float64 and in step order (the float a host-side sum of
``loss.item()`` gives, bit for bit), and the caller reads the sum once per epoch: a step never blocks on a
device-to-host copy, so a GPU runs ahead of the Python loop. Batches are gathered on the device that holds the
rows (``x[batch]``), never through the host.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ml8s.modeling.family import TrainStep

EpochStepper = Callable[[torch.Tensor], tuple[torch.Tensor, int]]


def epoch_stepper(
    step: TrainStep,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    x: torch.Tensor,
    y: torch.Tensor,
    batch_size: int,
) -> EpochStepper:
    """A function of an epoch's row order (a tensor on ``x``'s device) that takes one optimizer step per
    ``batch_size`` rows of it and returns (the sum of the steps' losses as a float64 device scalar, steps)."""

    def run_epoch(order: torch.Tensor) -> tuple[torch.Tensor, int]:
        total = torch.zeros((), dtype=torch.float64, device=x.device)
        batches = 0
        for start in range(0, len(order), batch_size):
            batch = order[start : start + batch_size]
            loss = step(model, optimizer, x[batch], y[batch])
            total += loss.detach().reshape(()).to(dtype=torch.float64, device=total.device)
            batches += 1
        return total, batches

    return run_epoch
