"""The training workflow through `pyflyte run` (local execution), and what importing it costs."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from itertools import pairwise
from pathlib import Path

import pytest
from conftest import write_small_churn

from ml8s import layout
from ml8s.pipeline.bootstrap import bootstrap

REPO = Path(__file__).resolve().parent.parent
PYFLYTE = Path(sys.executable).parent / "pyflyte"
# Variables of the calling shell that would change the run; the tests set what they need.
_RUN_VARIABLES = (
    "DATA_ROOT TARGET_COLUMN MODEL_FORMAT MODEL_TYPE TEST_SIZE RANDOM_SEED SAMPLE_ROWS MAX_FEATURES "
    "EXCLUDE_COLUMNS STANDARDIZE HIDDEN_UNITS HIDDEN_LAYERS EPOCHS BATCH_SIZE LEARNING_RATE TRAIN_DEVICE "
    "PIPELINE_ROOT_URI FORCE_RERUN STRICT_DATA_IDENTITY MLFLOW_TRACKING_URI MLFLOW_EXPERIMENT_PREFIX "
    "MLFLOW_MODEL_NAME CHAIN_NAME FLYTECTL_CONFIG FLYTE_CONFIG"
).split()


def _env(home: Path, **variables: str) -> dict[str, str]:
    """The environment of one `pyflyte run`: its own HOME (flytekit's ~/.flyte) and no local cache."""
    env = {k: v for k, v in os.environ.items() if k not in _RUN_VARIABLES}
    home.mkdir(parents=True, exist_ok=True)
    env.update(HOME=str(home), FLYTE_LOCAL_CACHE_ENABLED="false", EPOCHS="2", **variables)
    return env


def _pyflyte_run(env: dict[str, str], *args: str) -> tuple[str, str]:
    """Run the training workflow locally; return the manifest text it prints, and its stderr."""
    cmd = [str(PYFLYTE), "run", "workflows/training.py", "training_pipeline", *args]
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"pyflyte run failed\nstdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    # Local runs echo the workflow output after a "Running Execution on local." banner.
    start = done.stdout.index("{")
    _, end = json.JSONDecoder().raw_decode(done.stdout, start)
    return done.stdout[start:end], done.stderr


def _listing(root: Path) -> dict[str, tuple[int, int, int]]:
    """Every file and folder under root with its inode, mtime and size: any rewrite changes it."""
    listing = {}
    for path in sorted(root.rglob("*")):
        stat = path.stat()
        listing[str(path.relative_to(root))] = (stat.st_ino, stat.st_mtime_ns, stat.st_size)
    return listing


@pytest.fixture(scope="module")
def first_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, str, str]:
    """One full run configured by workflow inputs: (data, root, run_id, manifest text)."""
    base = tmp_path_factory.mktemp("workflow")
    data = write_small_churn(base / "data")
    root = base / "root"
    env = _env(base / "home1")
    run_id = bootstrap({"DATA_ROOT": str(data), "TARGET_COLUMN": "churned", "EPOCHS": "2"}).run_id
    manifest, _ = _pyflyte_run(
        env, "--data_root", str(data), "--target_column", "churned", "--pipeline_root_uri", str(root)
    )
    return data, root, run_id, manifest


def test_pyflyte_run_completes_the_run(first_run: tuple[Path, Path, str, str]) -> None:
    _, root, run_id, manifest = first_run
    assert (root / layout.run_prefix(run_id) / layout.SUCCESS_MARKER).is_file()
    assert json.loads(manifest)["run_id"] == run_id


def test_same_config_from_environment_is_an_early_exit(first_run: tuple[Path, Path, str, str], tmp_path: Path) -> None:
    data, root, run_id, manifest = first_run
    before = _listing(root)
    env = _env(tmp_path / "home2", DATA_ROOT=str(data), TARGET_COLUMN="churned", PIPELINE_ROOT_URI=str(root))
    env["PYTHONPROFILEIMPORTTIME"] = "1"  # every import, on stderr: the early exit must load no heavy step
    again, imports = _pyflyte_run(env)
    assert again == manifest
    assert json.loads(again)["run_id"] == run_id
    assert _listing(root) == before, "the early exit rewrote something under PIPELINE_ROOT_URI"
    assert not re.search(r"\|\s+(torch|mlflow)$", imports, re.MULTILINE), "the early exit imported torch or mlflow"


def test_force_rerun_launch_plan_retrains_to_the_same_bytes(
    first_run: tuple[Path, Path, str, str], tmp_path: Path
) -> None:
    data, first_root, run_id, manifest = first_run
    root = tmp_path / "root"
    shutil.copytree(first_root, root)
    env = _env(tmp_path / "home3", DATA_ROOT=str(data), TARGET_COLUMN="churned", PIPELINE_ROOT_URI=str(root))
    # Called in Python, not with `pyflyte run`: flytekit 1.16's local `pyflyte run <lp>` passes the
    # workflow's default ("") for a fixed input, which overrides force_rerun="true".
    probe = "from workflows.launch_plans import training_force_rerun_lp as lp; print(lp())"
    done = subprocess.run([sys.executable, "-c", probe], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"force rerun failed\nstdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    rerun = json.loads(done.stdout[done.stdout.index("{") :])
    assert rerun["run_id"] == run_id
    assert rerun["force_rerun"]["reproduced"] is True
    first = json.loads(manifest)["artifacts"]
    assert {rel: a["sha256"] for rel, a in rerun["artifacts"].items()} == {rel: a["sha256"] for rel, a in first.items()}
    assert (root / layout.run_prefix(run_id) / layout.SUCCESS_MARKER).is_file()


_IMPORT_PROBE = """
import json, sys
import workflows.training as training
import workflows.launch_plans as lps
order = [node.metadata.name for node in training.train_and_register_wf.nodes]
edges = {n.metadata.name: [u.metadata.name for u in n.upstream_nodes] for n in training.train_and_register_wf.nodes}
plans = {}
for lp in (lps.training_nightly_lp, lps.training_force_rerun_lp):
    plans[lp.name] = {
        "cron": lp.schedule.cron_schedule.schedule if lp.schedule else None,
        "fixed": {k: v.scalar.primitive.string_value for k, v in lp.fixed_inputs.literals.items()},
        "required": sorted(k for k, p in lp.parameters.parameters.items() if p.required),
    }
heavy = sorted(m for m in ("torch", "mlflow", "onnx", "onnxruntime") if m in sys.modules)
print(json.dumps({"heavy": heavy, "order": order, "edges": edges, "plans": plans}))
"""


def test_import_is_light_and_launch_plans_are_wired() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _IMPORT_PROBE], cwd=REPO, capture_output=True, text=True, timeout=120, check=True
    )
    probe = json.loads(done.stdout.strip().splitlines()[-1])
    assert probe["heavy"] == []
    steps = ["snapshot_data", "build_features", "train_model", "export_model", "register_model", "finalize_run"]
    assert probe["order"] == steps
    assert all(probe["edges"][after] == [before] for before, after in pairwise(steps))
    assert probe["plans"] == {
        "training_nightly_lp": {"cron": "0 2 * * *", "fixed": {}, "required": []},
        "training_force_rerun_lp": {"cron": None, "fixed": {"force_rerun": "true"}, "required": []},
    }
