"""Step 4 as tasks: deterministic training in the training image, on a CPU or a GPU node.

TRAIN_DEVICE is a run-time value (a workflow input or the environment, resolved by bootstrap), but
resources are part of a task's static definition. So there are two tasks with one body: ``train_cpu``
and ``train_gpu`` (which requests one GPU), both registered with their resources, and ``train_model``,
a ``@dynamic`` that launches one of them on the spec's TRAIN_DEVICE.

Why not a ``conditional`` in the workflow: the training workflow already sits in the gate's
conditional branch, and flytekit 1.16 runs *both* branches of a conditional nested that way in local
executions, then loses the output (flyteorg/flyte#6426), so ``make run`` would break. Why not one task
with ``with_overrides(requests=...)`` inside the dynamic: the GPU request would then exist only in the
graph compiled at run time, not in the registered task, where the package test and a reviewer see it.

TRAIN_WORLD_SIZE > 1 trains on Flyte's PyTorch plugin: a task with ``Elastic(nproc_per_node=N)`` starts N
worker processes (torch elastic; real processes, also in a local ``pyflyte run``), each calling
``ml8s.training.ranks.train_rank``. ``nproc_per_node`` is fixed when the task is declared, and a workflow
input cannot change it, so there is one registered task per supported world size and device
(``tasks.inputs.FLYTE_WORLD_SIZES``: ``train_cpu_ranks_2`` ... ``train_gpu_ranks_8``, in ``tasks/train_ranks.py``,
which ``train_model`` imports only when it needs one: the plugin imports torch), and ``train_model`` picks the
one of the spec's TRAIN_WORLD_SIZE like it picks CPU or GPU. A world size outside that list is refused at
bootstrap (``tasks.bootstrap``), before anything is written; ``ml8s run`` trains any size from 1 to 64.
Each such task requests one core (or one GPU) per rank, on one node: the ranks share its file system.
"""

from __future__ import annotations

from flytekit import Resources, dynamic, task
from flytekit.types.directory import FlyteDirectory

from ml8s import log
from ml8s.context.run import RunSpec
from tasks._util import COMPUTE_CACHE, output_dir
from tasks.inputs import check_flyte_world_size
from tasks.train_output import TrainOutput


def _train(spec: RunSpec, features: FlyteDirectory) -> TrainOutput:
    log.configure()
    # Imported here, not at module level: importing torch would slow the early-exit path.
    from ml8s.pipeline import train

    out = output_dir("model")
    summary = train.train(spec, features.download(), out)
    return TrainOutput(model=FlyteDirectory(path=out), summary=summary)


# CPU training runs on one thread (determinism), so one core is all it uses.
@task(container_image="{{.image.train}}", cache=COMPUTE_CACHE, requests=Resources(cpu="1", mem="4Gi"))
def train_cpu(spec: RunSpec, features: FlyteDirectory) -> TrainOutput:
    """Train on the CPU (TRAIN_DEVICE=cpu); writes nothing to the store.

    Returns:
        A directory with model_native.safetensors and metrics.json, and the train summary.
    """
    return _train(spec, features)


@task(
    container_image="{{.image.train}}",
    cache=COMPUTE_CACHE,
    requests=Resources(cpu="2", mem="8Gi", gpu="1"),
    limits=Resources(gpu="1"),
)
def train_gpu(spec: RunSpec, features: FlyteDirectory) -> TrainOutput:
    """Train on one GPU (TRAIN_DEVICE=cuda); writes nothing to the store.

    Returns:
        A directory with model_native.safetensors and metrics.json, and the train summary.
    """
    return _train(spec, features)


# Never cached: it only chooses; the task it launches is cached (a dynamic node costs one light pod).
@dynamic(cache=False)
def train_model(spec: RunSpec, features: FlyteDirectory) -> TrainOutput:
    """Train on a GPU node when TRAIN_DEVICE=cuda, on a CPU node otherwise; in TRAIN_WORLD_SIZE ranks when > 1.

    Returns:
        The chosen task's directory (model_native.safetensors, metrics.json) and train summary.
    """
    world = spec.params.train_world_size
    if world > 1:
        check_flyte_world_size(world)
        device = "gpu" if spec.params.train_device == "cuda" else "cpu"
        # Imported here: Flyte's PyTorch plugin imports torch, which the early-exit path must not load.
        from tasks.train_ranks import RANK_TASKS

        return RANK_TASKS[(world, device)](spec=spec, features=features)
    if spec.params.train_device == "cuda":
        return train_gpu(spec=spec, features=features)
    return train_cpu(spec=spec, features=features)
