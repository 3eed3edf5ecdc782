"""`make package`: the workflows serialized for a cluster, offline, as the protobuf specs Flyte registers.

Checks what only shows on a cluster: each task's image, its resources (a GPU only for GPU training),
its cache settings (exactly the compute tasks, versioned by IMAGE_VERSION) and the launch plans.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
from collections.abc import Iterable
from pathlib import Path

import pytest
from flyteidl.admin import launch_plan_pb2, task_pb2
from flyteidl.core import tasks_pb2

REPO = Path(__file__).resolve().parent.parent
PYFLYTE = Path(sys.executable).parent / "pyflyte"
DEFAULT_IMAGE = "registry.example/ml8s-default:t1"
FE_IMAGE = "registry.example/ml8s-fe:t1"
TRAIN_IMAGE = "registry.example/ml8s-train:t1"
IMAGE_VERSION = "t1"

# Every task of the package and the image it must run in: feature engineering in the fe image; training,
# export and MLflow registration (the only tasks that import torch, ONNX or MLflow) in the train image;
# the light tasks in the default image.
IMAGES = {
    "tasks.bootstrap.bootstrap_run": DEFAULT_IMAGE,
    "tasks.gate.check_gate": DEFAULT_IMAGE,
    "tasks.gate.reuse_manifest": DEFAULT_IMAGE,
    "tasks.snapshot.snapshot_data": DEFAULT_IMAGE,
    "tasks.features.compute_features": FE_IMAGE,
    "tasks.features.publish_features": DEFAULT_IMAGE,
    "tasks.train.train_model": DEFAULT_IMAGE,
    "tasks.train.train_cpu": TRAIN_IMAGE,
    "tasks.train.train_gpu": TRAIN_IMAGE,
    **{f"tasks.train_ranks.train_{device}_ranks_{n}": TRAIN_IMAGE for device in ("cpu", "gpu") for n in (2, 4, 8)},
    "tasks.export.export_model": TRAIN_IMAGE,
    "tasks.export.publish_model": DEFAULT_IMAGE,
    "tasks.register.register_model": TRAIN_IMAGE,
    "tasks.finalize.finalize_run": DEFAULT_IMAGE,
    "tasks.chain.commit_to_chain": DEFAULT_IMAGE,
    "tasks.verify.verify_run_task": TRAIN_IMAGE,  # imports MLflow
    "tasks.maintenance.cleanup_tmp_task": DEFAULT_IMAGE,
}
# Pure tasks, whose inputs (the RunSpec and the directories computed from it) fully determine their output.
CACHED = {
    "tasks.features.compute_features",
    "tasks.train.train_cpu",
    "tasks.train.train_gpu",
    *(f"tasks.train_ranks.train_{device}_ranks_{n}" for device in ("cpu", "gpu") for n in (2, 4, 8)),
    "tasks.export.export_model",
}
GPU = tasks_pb2.Resources.ResourceName.GPU
CPU = tasks_pb2.Resources.ResourceName.CPU


@pytest.fixture(scope="module")
def package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`make package`'s command, with explicit images, unpacked into a folder."""
    base = tmp_path_factory.mktemp("package")
    output = base / "ml8s-flyte-package.tgz"
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLYTE")}
    env.update(HOME=str(base), IMAGE_VERSION=IMAGE_VERSION)
    cmd = [str(PYFLYTE), "--pkgs", "workflows", "package", "--image", DEFAULT_IMAGE, "--image", f"fe={FE_IMAGE}"]
    cmd += ["--image", f"train={TRAIN_IMAGE}", "--output", str(output), "--force"]
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"pyflyte package failed\nstdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    unpacked = base / "unpacked"
    with tarfile.open(output) as archive:
        archive.extractall(unpacked, filter="data")
    return unpacked


def _tasks(package: Path) -> dict[str, tasks_pb2.TaskTemplate]:
    """Every serialized task template (``*_1.pb`` holds a flyteidl.admin.TaskSpec), by task name."""
    templates = {}
    for path in sorted(package.glob("*_1.pb")):
        spec = task_pb2.TaskSpec()
        spec.ParseFromString(path.read_bytes())
        templates[spec.template.id.name] = spec.template
    return templates


def _launch_plans(package: Path) -> dict[str, launch_plan_pb2.LaunchPlan]:
    plans = {}
    for path in sorted(package.glob("*_3.pb")):
        plan = launch_plan_pb2.LaunchPlan()
        plan.ParseFromString(path.read_bytes())
        plans[plan.id.name] = plan
    return plans


def test_every_task_runs_in_its_image(package: Path) -> None:
    templates = _tasks(package)
    assert set(templates) == set(IMAGES), "a task was added or removed: give it an image in IMAGES"
    assert {name: t.container.image for name, t in templates.items()} == IMAGES


def _amount(entries: Iterable[tasks_pb2.Resources.ResourceEntry], name: int) -> str | None:
    return next((entry.value for entry in entries if entry.name == name), None)


def test_only_gpu_training_requests_a_gpu(package: Path) -> None:
    templates = _tasks(package)
    for name, template in templates.items():
        resources = template.container.resources
        gpus = (_amount(resources.requests, GPU), _amount(resources.limits, GPU))
        ranks = name.rsplit("_", 1)[-1] if name.startswith("tasks.train_ranks.train_gpu_ranks_") else "1"
        wants_gpu = name == "tasks.train.train_gpu" or name.startswith("tasks.train_ranks.train_gpu_ranks_")
        assert gpus == ((ranks, ranks) if wants_gpu else (None, None)), name
    # CPU training runs on one thread (determinism): one core requested, one per rank for several ranks.
    assert _amount(templates["tasks.train.train_cpu"].container.resources.requests, CPU) == "1"
    for n in (2, 4, 8):
        assert _amount(templates[f"tasks.train_ranks.train_cpu_ranks_{n}"].container.resources.requests, CPU) == str(n)


def test_cache_is_on_exactly_the_compute_tasks_versioned_by_image(package: Path) -> None:
    templates = _tasks(package)
    cached = {name for name, t in templates.items() if t.metadata.discoverable}
    assert cached == CACHED
    for name in CACHED:
        metadata = templates[name].metadata
        assert metadata.discovery_version == IMAGE_VERSION, name
        assert metadata.cache_serializable, name
        assert list(metadata.cache_ignore_input_vars) == [], name
    assert not templates["tasks.bootstrap.bootstrap_run"].metadata.discoverable


def test_force_rerun_plan_forces_without_a_cache_setting(package: Path) -> None:
    """The plan fixes force_rerun; bootstrap then gives the run's spec a fresh recompute token, so the compute
    tasks' cache key matches nothing cached (no overwrite_cache needed, and none anywhere)."""
    plans = _launch_plans(package)  # the two named plans and each workflow's default plan
    assert {name for name, plan in plans.items() if plan.spec.overwrite_cache} == set()
    force, nightly = plans["training_force_rerun_lp"].spec, plans["training_nightly_lp"].spec
    assert force.fixed_inputs.literals["force_rerun"].scalar.union.value.scalar.primitive.boolean is True
    assert nightly.entity_metadata.schedule.cron_schedule.schedule == "0 2 * * *"
