"""One epoch of optimizer steps over a shuffled order of training rows, without waiting on the device.

The epoch's losses are summed on the device, in float64 and in step order (the float a host-side sum of
``loss.item()`` gives, bit for bit), and the caller reads the sum once per epoch: a step never blocks on a
device-to-host copy, so a GPU runs ahead of the Python loop. Batches are gathered on the device that holds the
rows (``x[batch]``), never through the host.

On CUDA, the built-in step (:func:`~ml8s.modeling.registry.cross_entropy_step`) with an optimizer made
``capturable`` is captured once as a CUDA graph over static buffers (the batch's row indices, the loss sum)
and replayed for every full batch: one launch per step instead of dozens of small kernels. The first
:data:`WARMUP` full batches run eagerly, on the side stream the capture then uses (CUDA graphs need the
optimizer's state and the libraries' per-stream workspaces to exist before capture); the last, smaller batch
of an epoch runs eagerly (a second shape would need a second graph; padding would change the loss's
arithmetic). The eager and the captured step run the same kernels on the same shapes. A plug-in's step, the
CPU, and a non-capturable optimizer take the eager loop, which is the same code minus the graph.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ml8s.modeling.family import TrainStep
from ml8s.modeling.registry import cross_entropy_step

EpochStepper = Callable[[torch.Tensor], tuple[torch.Tensor, int]]
WARMUP = 3
# torch.cuda.Stream's constructor is untyped; this names the one signature used.
_new_stream: Callable[[torch.device], torch.cuda.Stream] = torch.cuda.Stream


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
    if x.device.type == "cuda" and step is cross_entropy_step and capturable(optimizer):
        return Graphed(model, optimizer, x, y, batch_size, capture=True).run_epoch

    def run_epoch(order: torch.Tensor) -> tuple[torch.Tensor, int]:
        total = torch.zeros((), dtype=torch.float64, device=x.device)
        batches = 0
        for start in range(0, len(order), batch_size):
            batch = order[start : start + batch_size]
            add_loss(total, step(model, optimizer, x[batch], labels_of(y, batch)))
            batches += 1
        return total, batches

    return run_epoch


def capturable(optimizer: torch.optim.Optimizer) -> bool:
    """True when every parameter group keeps its step count on the device (``capturable=True``)."""
    return all(bool(group.get("capturable", False)) for group in optimizer.param_groups)


def labels_of(y: torch.Tensor, batch: torch.Tensor) -> torch.Tensor:
    """A batch's class indices as int64 (what cross-entropy and a plug-in's step take) from labels kept narrower."""
    return y[batch].long()


def add_loss(total: torch.Tensor, loss: torch.Tensor) -> None:
    """``total += loss`` in float64 on ``total``'s device, for a loss of any one-element shape."""
    total += loss.detach().reshape(()).to(dtype=torch.float64, device=total.device)


class Graphed:
    """Full batches replayed from one CUDA graph of the fixed-shape step; see the module's docstring.

    With ``capture`` off (on a CPU) every full batch runs the eager step over the same static buffers: the
    bookkeeping of the graphed loop, checked against the plain loop where no GPU is at hand.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        x: torch.Tensor,
        y: torch.Tensor,
        size: int,
        *,
        capture: bool,
    ) -> None:
        self.model, self.optimizer, self.x, self.y, self.size = model, optimizer, x, y, size
        self.index = torch.zeros(size, dtype=torch.int64, device=x.device)
        self.total = torch.zeros((), dtype=torch.float64, device=x.device)
        self.graph: torch.cuda.CUDAGraph | None = None
        self.warm = 0
        # Warm-up and capture share one side stream (torch's recipe for capturing a whole step): the libraries'
        # per-stream handles and workspaces (cuBLAS) are made while warming up, never in the middle of a capture.
        self.stream = _new_stream(x.device) if capture else None

    def _step(self) -> None:
        add_loss(
            self.total,
            cross_entropy_step(self.model, self.optimizer, self.x[self.index], labels_of(self.y, self.index)),
        )

    def _full_batch(self) -> None:
        if self.stream is None:  # no capture: the eager step over the same buffers
            self._step()
        elif self.graph is not None:
            self.graph.replay()
        elif self.warm < WARMUP:
            self._on_side_stream(self.stream, self._step)
            self.warm += 1
        else:
            torch.cuda.synchronize()  # once per run: the warm-up steps are done before capture begins
            # Gradients set to None here are made by the captured backward, in the graph's own memory.
            self.optimizer.zero_grad(set_to_none=True)
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph, stream=self.stream):  # records, runs nothing
                self._step()
            self.graph.replay()

    @staticmethod
    def _on_side_stream(stream: torch.cuda.Stream, work: Callable[[], None]) -> None:
        """``work`` on ``stream``, ordered after everything queued before it and before everything after it."""
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            work()
        torch.cuda.current_stream().wait_stream(stream)

    def run_epoch(self, order: torch.Tensor) -> tuple[torch.Tensor, int]:
        self.total.zero_()
        full = len(order) // self.size
        for i in range(full):
            self.index.copy_(order[i * self.size : (i + 1) * self.size])
            self._full_batch()
        if len(order) > full * self.size:
            batch = order[full * self.size :]
            add_loss(
                self.total, cross_entropy_step(self.model, self.optimizer, self.x[batch], labels_of(self.y, batch))
            )
        return self.total, full + (1 if len(order) > full * self.size else 0)
