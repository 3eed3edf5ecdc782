"""The data-parallel fit of TRAIN_WORLD_SIZE > 1: every rank draws the same global batches, each trains its slice.

Every rank seeds the same RNGs (RANDOM_SEED), so every rank builds the same initial network and draws the
global batch order one process would draw: a seeded ``randperm`` of the training rows per epoch, cut into
BATCH_SIZE batches. Rank ``r`` of ``W`` takes the contiguous slice ``[r*n//W, (r+1)*n//W)`` of each batch of
``n`` rows. Its loss is the *sum* of its rows' cross-entropy scaled by ``W / n``; DDP averages the gradients
over the ranks (divides by ``W``), so every rank applies the gradient of the global batch's mean loss: the
gradient one process computes, summed in another order (rank by rank, then across ranks by the all-reduce).
Unequal slices (``n`` not a multiple of ``W``) are weighted by their rows, never by the rank.

The per-epoch loss is gathered once per epoch (every batch's loss sum from every rank, summed in rank
order in float64), so it is the same number on every rank and the logs never wait on a per-batch reduction.
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Mapping

import torch
import torch.distributed as dist
from pydantic import BaseModel, ConfigDict, Field
from torch.nn.parallel import DistributedDataParallel

from ml8s.context.run import RunSpec
from ml8s.errors import RankError, TrainingError
from ml8s.text import is_digits
from ml8s.training.loop import labels_of

# A rank that waits longer than this on the others (a dead peer the launcher has not noticed yet) fails.
COLLECTIVE_TIMEOUT = datetime.timedelta(minutes=30)
_ENV_KEYS = ("RANK", "WORLD_SIZE", "LOCAL_RANK")


class RankEnv(BaseModel):
    """Who this process is in the training: its rank, the world size, its rank on this node (its GPU)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    rank: int = Field(ge=0)
    world_size: int = Field(ge=1)
    local_rank: int = Field(ge=0)

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> RankEnv:
        """RANK, WORLD_SIZE and LOCAL_RANK as torchrun, Flyte's PyTorch plugin and ``launch_ranks`` set them."""
        values: dict[str, int] = {}
        for key in _ENV_KEYS:
            text = env.get(key, "")
            if not is_digits(text):
                raise RankError(
                    f"environment variable {key}={text!r}; expected a non-negative integer set by the launcher "
                    "(ml8s run, torchrun or the Flyte PyTorch task)"
                )
            values[key.lower()] = int(text)
        world = cls.model_validate(values)
        if world.rank >= world.world_size:
            raise RankError(f"RANK={world.rank} with WORLD_SIZE={world.world_size}; expected RANK < WORLD_SIZE")
        return world


def micro_batch(batch: torch.Tensor, rank: int, world_size: int) -> torch.Tensor:
    """Rank ``rank``'s contiguous slice of a global batch (empty when the batch has fewer rows than ranks)."""
    rows = len(batch)
    return batch[rank * rows // world_size : (rank + 1) * rows // world_size]


def open_group(world: RankEnv, device: torch.device) -> None:
    """Join the process group: gloo on the CPU, NCCL on CUDA (MASTER_ADDR and MASTER_PORT from the env)."""
    backend = "nccl" if device.type == "cuda" else "gloo"
    try:
        dist.init_process_group(
            backend, rank=world.rank, world_size=world.world_size, timeout=COLLECTIVE_TIMEOUT, init_method="env://"
        )
    except (RuntimeError, ValueError) as exc:
        raise RankError(
            f"rank {world.rank} of {world.world_size} could not join the {backend} process group: {exc}"
        ) from exc


def close_group() -> None:
    """Leave the process group, when this process joined one."""
    if dist.is_initialized():
        dist.destroy_process_group()


def ddp_fit(
    spec: RunSpec,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    x: torch.Tensor,
    y: torch.Tensor,
    train_idx: torch.Tensor,
    world: RankEnv,
) -> tuple[list[float], int]:
    """EPOCHS passes of the global batches (module docstring); the loss per epoch and the optimizer steps."""
    params = spec.params
    cuda = x.device.type == "cuda"
    model.train()  # before wrapping: DDP's wrapper starts in training mode itself
    ddp = DistributedDataParallel(model, device_ids=[x.device.index] if cuda else None)
    generator = torch.Generator().manual_seed(params.random_seed)
    losses: list[float] = []
    steps = 0
    for epoch in range(params.epochs):
        order = train_idx[torch.randperm(len(train_idx), generator=generator).to(train_idx.device)]
        sizes: list[int] = []
        sums: list[torch.Tensor] = []
        for start in range(0, len(order), params.batch_size):
            batch = order[start : start + params.batch_size]
            mine = micro_batch(batch, world.rank, world.world_size)
            optimizer.zero_grad(set_to_none=True)
            loss_sum = torch.nn.functional.cross_entropy(ddp(x[mine]), labels_of(y, mine), reduction="sum")
            torch.autograd.backward(loss_sum * (world.world_size / len(batch)))
            optimizer.step()
            sizes.append(len(batch))
            sums.append(loss_sum.detach().to(torch.float64))
            steps += 1
        mean = _epoch_loss(sums, sizes, world, x.device)
        if not math.isfinite(mean):
            raise TrainingError(
                f"training loss is {mean} at epoch {epoch + 1}; expected a finite loss (lower LEARNING_RATE?)"
            )
        losses.append(mean)
        if world.rank == 0:
            spec.log("train", f"epoch {epoch + 1}/{params.epochs} loss {mean:.6f} ({world.world_size} ranks)")
    return losses, steps


def _epoch_loss(sums: list[torch.Tensor], sizes: list[int], world: RankEnv, device: torch.device) -> float:
    """The mean over the epoch's batches of each global batch's mean loss, the same on every rank."""
    mine = torch.stack(sums).to(device) if sums else torch.zeros(0, dtype=torch.float64, device=device)
    gathered = [torch.zeros_like(mine) for _ in range(world.world_size)]
    dist.all_gather(gathered, mine)
    per_batch = [0.0] * len(sizes)
    for rank_sums in gathered:  # rank order: the same float sums on every rank
        for i, value in enumerate(rank_sums.to("cpu").tolist()):
            per_batch[i] += value
    total = 0.0
    for value, size in zip(per_batch, sizes, strict=True):
        total += value / size
    return total / max(len(sizes), 1)
