"""Step 4 in TRAIN_WORLD_SIZE ranks: one Flyte PyTorch (``Elastic``) task per supported size and device.

Kept apart from ``tasks.train``: Flyte's PyTorch plugin imports torch, and importing the training workflow
(which every run does, the early exit included) must not. ``tasks.train.train_model`` imports this module
only when a run trains in ranks; registration imports every module of ``tasks/``.
"""

from __future__ import annotations

from typing import Any

from flytekit import Resources, task
from flytekit.types.directory import FlyteDirectory
from flytekitplugins.kfpytorch import Elastic

from ml8s import log
from ml8s.context.run import RunSpec
from tasks._util import COMPUTE_CACHE, output_dir
from tasks.train_output import TrainOutput


def _train_ranks(spec: RunSpec, features: FlyteDirectory) -> TrainOutput:
    """One rank (torch elastic set RANK, WORLD_SIZE, MASTER_ADDR ...); every rank returns rank 0's output."""
    log.configure()
    from ml8s.training.ranks import train_rank

    trained = train_rank(spec, features.download(), output_dir("model"))
    return TrainOutput(model=FlyteDirectory(path=trained.out_dir), summary=trained.summary)


def _ranks(world: int, gpu: bool) -> dict[str, Any]:
    """The task settings of a ``world``-rank training: torch elastic on one node, a core (and a GPU) per rank."""
    gpus = {"gpu": str(world)} if gpu else {}
    return dict(
        # NCCL between the GPUs of one pod uses /dev/shm; gloo on CPUs does not need it. The agent sleeps
        # monitor_interval between looks at its ranks: flytekit's 5 s kept each run up to 5 s after they ended.
        task_config=Elastic(nnodes=1, nproc_per_node=world, increase_shared_mem=False, monitor_interval=1),
        shared_memory=gpu,
        container_image="{{.image.train}}",
        cache=COMPUTE_CACHE,
        requests=Resources(cpu=str(world), mem=f"{4 * world}Gi", **gpus),
        limits=Resources(**gpus) if gpu else None,
    )


@task(**_ranks(2, gpu=False))
def train_cpu_ranks_2(spec: RunSpec, features: FlyteDirectory) -> TrainOutput:
    """TRAIN_WORLD_SIZE=2 on CPUs: two rank processes, each writing its shard; returns rank 0's output."""
    return _train_ranks(spec, features)


@task(**_ranks(4, gpu=False))
def train_cpu_ranks_4(spec: RunSpec, features: FlyteDirectory) -> TrainOutput:
    """TRAIN_WORLD_SIZE=4 on CPUs: four rank processes, each writing its shard; returns rank 0's output."""
    return _train_ranks(spec, features)


@task(**_ranks(8, gpu=False))
def train_cpu_ranks_8(spec: RunSpec, features: FlyteDirectory) -> TrainOutput:
    """TRAIN_WORLD_SIZE=8 on CPUs: eight rank processes, each writing its shard; returns rank 0's output."""
    return _train_ranks(spec, features)


@task(**_ranks(2, gpu=True))
def train_gpu_ranks_2(spec: RunSpec, features: FlyteDirectory) -> TrainOutput:
    """TRAIN_WORLD_SIZE=2 on GPUs (NCCL, one GPU per rank), each rank writing its shard."""
    return _train_ranks(spec, features)


@task(**_ranks(4, gpu=True))
def train_gpu_ranks_4(spec: RunSpec, features: FlyteDirectory) -> TrainOutput:
    """TRAIN_WORLD_SIZE=4 on GPUs (NCCL, one GPU per rank), each rank writing its shard."""
    return _train_ranks(spec, features)


@task(**_ranks(8, gpu=True))
def train_gpu_ranks_8(spec: RunSpec, features: FlyteDirectory) -> TrainOutput:
    """TRAIN_WORLD_SIZE=8 on GPUs (NCCL, one GPU per rank), each rank writing its shard."""
    return _train_ranks(spec, features)


RANK_TASKS = {
    (2, "cpu"): train_cpu_ranks_2,
    (4, "cpu"): train_cpu_ranks_4,
    (8, "cpu"): train_cpu_ranks_8,
    (2, "gpu"): train_gpu_ranks_2,
    (4, "gpu"): train_gpu_ranks_4,
    (8, "gpu"): train_gpu_ranks_8,
}
