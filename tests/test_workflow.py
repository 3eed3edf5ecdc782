"""The training workflow through `pyflyte run` (local execution), its cache, and what importing it costs."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from conftest import SEED_LAYOUT, write_small_churn
from forked_cli import forked_ml8s, forked_pyflyte

from ml8s.contract import layout
from ml8s.pipeline.bootstrap import bootstrap

REPO = Path(__file__).resolve().parent.parent
# Variables of the calling shell that would change the run; the tests set what they need.
_RUN_VARIABLES = (
    "DATA_ROOT TARGET_COLUMN MODEL_FORMAT MODEL_TYPE TEST_SIZE RANDOM_SEED SAMPLE_ROWS MAX_FEATURES "
    "EXCLUDE_COLUMNS STANDARDIZE HIDDEN_UNITS HIDDEN_LAYERS EPOCHS BATCH_SIZE LEARNING_RATE TRAIN_DEVICE "
    "PIPELINE_ROOT_URI FORCE_RERUN STRICT_DATA_IDENTITY MLFLOW_TRACKING_URI MLFLOW_EXPERIMENT_PREFIX "
    "MLFLOW_MODEL_NAME CHAIN_NAME FLYTECTL_CONFIG FLYTE_CONFIG"
).split()
_CACHE_VARIABLES = ("FLYTE_LOCAL_CACHE_ENABLED", "FLYTE_LOCAL_CACHE_OVERWRITE")


# What the compute tasks (features, train, export) log when they run, and never on a cache hit.
_COMPUTED = re.compile(r"^\S+Z \+[0-9.]+s INFO +\[(features|train|export)\] ", re.MULTILINE)


def _env(home: Path, **variables: str) -> dict[str, str]:
    """The environment of one `pyflyte run`: its own HOME, so its own Flyte local cache (~/.flyte/local-cache),
    and its own TMPDIR, where flytekit keeps the task outputs that cache entries point to."""
    env = {k: v for k, v in os.environ.items() if k not in (*_RUN_VARIABLES, *_CACHE_VARIABLES)}
    (home / "tmp").mkdir(parents=True, exist_ok=True)
    env.update(HOME=str(home), TMPDIR=str(home / "tmp"), EPOCHS="2", **variables)
    return env


def _pyflyte_run(env: dict[str, str], *args: str, fresh: bool = False) -> tuple[str, str]:
    """Run the training workflow locally; return the result it prints (JSON), and its stderr. In a fork of the
    warm server (tests/forked_cli.py) unless ``fresh``: the first run, which the others compare their bytes with,
    and the run whose imports are counted."""
    done = forked_pyflyte(["run", "workflows/training.py", "training_pipeline", *args], env, cwd=REPO, fresh=fresh)
    assert done.returncode == 0, f"pyflyte run failed\nstdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    # stdout is the workflow's output alone (pyflyte's banner and the tasks' prints go to stderr).
    json.loads(done.stdout)
    return done.stdout.rstrip("\n"), done.stderr


def _listing(root: Path) -> dict[str, tuple[int, int, int]]:
    """Every file and folder under root with its inode, mtime and size: any rewrite changes it."""
    listing = {}
    for path in sorted(root.rglob("*")):
        stat = path.stat()
        listing[str(path.relative_to(root))] = (stat.st_ino, stat.st_mtime_ns, stat.st_size)
    return listing


def _manifest(result: str) -> dict[str, Any]:
    """The run's manifest, read from the file the workflow's result names."""
    manifest: dict[str, Any] = json.loads(Path(json.loads(result)["manifest"]).read_text())
    return manifest


def _deck(home: Path) -> str:
    """The one Flyte Deck a local run under ``home`` wrote (flytekit keeps it under TMPDIR)."""
    (page,) = (home / "tmp").rglob("deck.html")
    return page.read_text()


class FirstRun(NamedTuple):
    data: Path
    root: Path
    home: Path  # its Flyte local cache holds the compute tasks' results
    run_id: str
    result: str  # the workflow's output, as pyflyte run prints it


@pytest.fixture(scope="module")
def first_run(tmp_path_factory: pytest.TempPathFactory) -> FirstRun:
    """One full run configured by workflow inputs (typed ones too), with an empty Flyte cache."""
    base = tmp_path_factory.mktemp("workflow")
    data = write_small_churn(base / "data")
    root = base / "root"
    env = _env(base / "home1")
    run_id = bootstrap({"DATA_ROOT": str(data), "TARGET_COLUMN": "churned", "EPOCHS": "2"}).run_id
    del env["EPOCHS"]  # given as a typed input below, as the other typed inputs at their default values
    typed = ("--epochs", "2", "--test_size", "0.2", "--standardize", "true", "--model_type", "mlp")
    result, log = _pyflyte_run(
        env,
        "--data_root",
        str(data),
        "--target_column",
        "churned",
        "--pipeline_root_uri",
        str(root),
        *typed,
        fresh=True,
    )
    assert {m.group(1) for m in _COMPUTED.finditer(log)} == {"features", "train", "export"}
    assert f"\nml8s: run {run_id} done; accuracy " in log and "ml8s-model v1" in log  # the headline, on stderr
    ours = [line for line in log.splitlines() if re.match(r"^\S+Z \+[0-9.]+s INFO ", line)]
    assert ours and max(map(len, ours)) <= 160
    deck = _deck(base / "home1")  # the chain commit task's overview of the run
    assert f"ml8s run {run_id}" in deck and "miss: Steps 2-7 ran" in deck and "v1 (1.0.0)" in deck
    # the local run says where its Deck is; the page draws the two epochs' train loss and held-out curves
    (where,) = re.findall(r"^ml8s: the commit_to_chain Deck: file://(\S+deck\.html)$", log, re.MULTILINE)
    assert Path(where).read_text() == deck
    (svg,) = re.findall(r"<svg.*?</svg>", deck, re.S)
    assert "Training curves (per epoch)" in deck and svg.count("<polyline") == 3
    assert all(len(p.split()) == 2 for p in re.findall(r"points='([^']*)'", svg))  # one point per epoch
    return FirstRun(data, root, base / "home1", run_id, result)


def test_pyflyte_run_completes_the_run_and_returns_a_typed_result(first_run: FirstRun) -> None:
    _, root, _, run_id, result = first_run
    run_dir = root / layout.run_prefix(run_id)
    assert (run_dir / layout.SUCCESS_MARKER).is_file()
    out = json.loads(result)
    assert (out["run_id"], out["model_name"], out["model_version"], out["chain"], out["chain_version"]) == (
        run_id,
        "ml8s-model",
        1,
        "ml8s-model",
        1,
    )
    metrics = json.loads((run_dir / layout.METRICS).read_text())
    assert out["metrics"] == {k: v for k, v in metrics.items() if isinstance(v, float)} and "train_rows" in metrics
    # the files are the run's own, referenced where they lie (no copy in Flyte's sandbox)
    manifest = _manifest(result)
    assert out["model"] == str(run_dir / "model" / "model.onnx") and out["manifest"] == str(run_dir / layout.MANIFEST)
    model_sha = hashlib.sha256(Path(out["model"]).read_bytes()).hexdigest()
    assert model_sha == manifest["artifacts"]["model/model.onnx"]["sha256"] == out["sha256"]["model/model.onnx"]
    assert out["sha256"] == {rel: a["sha256"] for rel, a in manifest["artifacts"].items()}


def test_other_root_reuses_the_computation_and_publishes_the_same_bytes(first_run: FirstRun, tmp_path: Path) -> None:
    """The compute tasks are cached on the RunSpec (no pipeline root in it): a run of the same configuration
    under another root is not stopped by the gate, hits the cache for features, training and export, and
    its publish tasks still write every artifact, byte for byte."""
    data, first_root, home, run_id, result = first_run
    root = tmp_path / "root"
    env = _env(home, DATA_ROOT=str(data), TARGET_COLUMN="churned", PIPELINE_ROOT_URI=str(root))
    again, log = _pyflyte_run(env)
    assert _COMPUTED.findall(log) == [], "a compute task ran instead of hitting the cache"
    assert json.loads(again)["run_id"] == run_id
    first, second = (r / layout.run_prefix(run_id) for r in (first_root, root))
    for rel in SEED_LAYOUT:
        assert (second / rel).read_bytes() == (first / rel).read_bytes(), rel
    sha = {rel: a["sha256"] for rel, a in _manifest(result)["artifacts"].items()}
    assert {rel: a["sha256"] for rel, a in _manifest(again)["artifacts"].items()} == sha


def test_same_config_from_environment_is_an_early_exit(first_run: FirstRun, tmp_path: Path) -> None:
    data, root, _, run_id, result = first_run
    before = _listing(root)
    env = _env(tmp_path / "home2", DATA_ROOT=str(data), TARGET_COLUMN="churned", PIPELINE_ROOT_URI=str(root))
    env["PYTHONPROFILEIMPORTTIME"] = "1"  # every import, on stderr: the early exit must load no heavy step
    again, imports = _pyflyte_run(env, fresh=True)
    assert again == result  # the same result, read from the first run's records
    assert json.loads(again)["run_id"] == run_id
    assert _listing(root) == before, "the early exit rewrote something under PIPELINE_ROOT_URI"
    # nor the data readers (pyarrow) nor an S3 client for a local root: the gate hit costs about a no-op run
    heavy = re.findall(r"\|\s+(torch|mlflow|pyarrow|boto3|botocore)$", imports, re.MULTILINE)
    assert heavy == [], f"the early exit imported {sorted(set(heavy))}"
    deck = _deck(tmp_path / "home2")
    assert "Dependencies" not in deck and "Source Code" not in deck, "flytekit's default decks rendered"
    assert f"ml8s run {run_id}" in deck and "hit: the run had completed" in deck and "v1 (1.0.0)" in deck


def test_a_full_or_closed_stdout_is_one_named_error(first_run: FirstRun, tmp_path: Path) -> None:
    """The result into a full disk was a rich traceback out of click (OSError ENOSPC); with stdout closed (>&-) the
    whole run went ahead, exit 0, and the result went nowhere (or into stderr). Both are OUTPUT_ERROR now, as from
    ``ml8s``: the closed one before any work. A stderr on a full disk failed the command at its banner, with the
    traceback on stdout; it loses only the progress lines now."""
    data, root, _, _, _ = first_run
    pyflyte = str(Path(sys.executable).with_name("pyflyte"))
    command = [pyflyte, "run", "workflows/training.py", "training_pipeline"]
    env = _env(tmp_path / "home", DATA_ROOT=str(data), TARGET_COLUMN="churned", PIPELINE_ROOT_URI=str(root))
    with open("/dev/full", "w") as full:
        done = subprocess.run(command, env=env, cwd=REPO, stdout=full, stderr=subprocess.PIPE, text=True, timeout=300)
    assert done.returncode == 1 and "Traceback" not in done.stderr and "Exception ignored" not in done.stderr
    assert done.stderr.endswith(
        "ml8s: OUTPUT_ERROR: writing to standard output failed (No space left on device); "
        "expected it to take the command's whole result: what it printed there is incomplete (its other writes are "
        "not affected; run it again to print the result)\n"
    ), done.stderr[-2000:]
    with open("/dev/full", "w") as full:  # a failing stderr loses the progress lines, not the result
        done = subprocess.run(command, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=full, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.rstrip("\n") == first_run.result
    env["PIPELINE_ROOT_URI"] = str(tmp_path / "root")
    closed = ["sh", "-c", 'exec "$@" >&-', "sh", *command]
    done = subprocess.run(closed, env=env, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1 and done.stderr.startswith("ml8s: OUTPUT_ERROR: standard output is closed"), done.stderr
    assert not (tmp_path / "root").exists()


def _verify(env: dict[str, str], run_id: str) -> None:
    done = forked_ml8s(["verify", run_id, "--json"], env, timeout=300)
    report = json.loads(done.stdout)
    assert report["status"] == "PASS", [c for c in report["checks"] if c["status"] != "PASS"]


def test_force_rerun_recomputes_on_every_flyte_path_and_verifies(first_run: FirstRun, tmp_path: Path) -> None:
    """The input, the variable and the launch plan: each forced run computes features, training and export
    again although the Flyte cache holds them (no overwrite setting anywhere), reproduces the bytes, says so
    in its manifest, and leaves a run that verifies against its chain."""
    data, _, home, run_id, result = first_run
    root = tmp_path / "root"
    env = _env(home, DATA_ROOT=str(data), TARGET_COLUMN="churned", PIPELINE_ROOT_URI=str(root))
    _, log = _pyflyte_run(env)  # a completed run under this root, from the cache
    assert _COMPUTED.findall(log) == []
    probe = (
        "from workflows.launch_plans import training_force_rerun_lp as lp; from tasks.result import result_json; "
        "print(result_json(lp()))"
    )
    forced = {
        "input": _pyflyte_run(env, "--force_rerun", "true"),
        "variable": _pyflyte_run(env | {"FORCE_RERUN": "true"}),
        # In Python, not `pyflyte run`: flytekit 1.16's local `pyflyte run <lp>` gives the workflow's default
        # to a fixed input. On a cluster the plan's fixed input reaches bootstrap (tests/test_package.py).
        "launch plan": _python(env, probe),
    }
    sha = {rel: a["sha256"] for rel, a in _manifest(result)["artifacts"].items()}
    for path, (text, log) in forced.items():
        assert {m.group(1) for m in _COMPUTED.finditer(log)} == {"features", "train", "export"}, path
        rerun = _manifest(text)
        assert rerun["run_id"] == run_id, path
        assert rerun["force_rerun"]["reproduced"] is True and rerun["force_rerun"]["changed"] == [], path
        assert rerun["force_rerun"]["recomputed"] == ["snapshot", "features", "train", "export"], path
        assert {rel: a["sha256"] for rel, a in rerun["artifacts"].items()} == sha, path
    assert (root / layout.run_prefix(run_id) / layout.SUCCESS_MARKER).is_file()
    _verify(env, run_id)


def _python(env: dict[str, str], code: str) -> tuple[str, str]:
    """Run Python code in the repository; return the result JSON it prints, and its stderr."""
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"failed\nstdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    start = done.stdout.index("{")
    _, end = json.JSONDecoder().raw_decode(done.stdout, start)
    return done.stdout[start:end], done.stderr


def _pyflyte(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return forked_pyflyte(["run", "workflows/training.py", "training_pipeline", *args], env, cwd=REPO)


def test_help_shows_typed_inputs_with_defaults_and_descriptions(tmp_path: Path) -> None:
    done = _pyflyte(_env(tmp_path / "home") | {"COLUMNS": "200"}, "--help")
    assert done.returncode == 0, done.stderr
    rows = {m.group(1): m.group(2) for m in re.finditer(r"--(\w+)\s+(\S+)\s", done.stdout)}
    # Optional[T] = None: flytekit shows the type, then TEXT (its spelling of None); a text that is no T is refused
    assert rows["epochs"] == "INTEGER|TEXT" and rows["test_size"] == rows["learning_rate"] == "FLOAT|TEXT"
    assert rows["standardize"] == rows["force_rerun"] == "BOOLEAN|TEXT"
    # model_type is text: mlp, logreg or plugin:<module>:<attribute> (checked at bootstrap, naming the input)
    assert rows["model_type"] == rows["data_root"] == "TEXT|TEXT" and rows["train_device"] == "[cpu|cuda|env]"
    assert "training epochs (unset: EPOCHS, else 10)" in " ".join(done.stdout.split())


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--epochs", "ten"), "Invalid value for '--epochs': 'ten' is not a valid integer"),  # before any task
        (("--epochs", "0"), "CONFIG_ERROR: EPOCHS=0 is invalid; expected an integer >= 1"),  # bootstrap
        (("--learning_rate", "fast"), "Invalid value for '--learning_rate': 'fast' is not a valid float"),
        (("--standardize", "maybe"), "Invalid value for '--standardize': 'maybe' is not a valid boolean"),
    ],
)
def test_a_bad_input_is_one_error_naming_it_and_nothing_is_written(
    tmp_path: Path, args: tuple[str, ...], message: str
) -> None:
    data = write_small_churn(tmp_path / "data", rows=60)
    root = tmp_path / "root"
    env = _env(tmp_path / "home", DATA_ROOT=str(data), TARGET_COLUMN="churned", PIPELINE_ROOT_URI=str(root))
    done = _pyflyte(env | {"COLUMNS": "300"}, *args)
    assert done.returncode != 0
    output = " ".join((done.stdout + done.stderr).split())
    assert message in output, output
    assert args[0].lstrip("-") in output
    assert "Traceback" not in output and 'File "' not in output
    assert not root.exists()


_IMPORT_PROBE = """
import json, sys
import workflows.training as training
import workflows.launch_plans as lps
order = [node.metadata.name for node in training.train_and_register_wf.nodes]
edges = {n.metadata.name: [u.metadata.name for u in n.upstream_nodes] for n in training.train_and_register_wf.nodes}
plans = {}
def value(literal):
    scalar = literal.scalar.union.value.scalar if literal.scalar.union else literal.scalar
    primitive = scalar.primitive
    return primitive.string_value if primitive.string_value is not None else primitive.boolean
for lp in (lps.training_nightly_lp, lps.training_force_rerun_lp, lps.training_continuous_lp):
    plans[lp.name] = {
        "cron": lp.schedule.cron_schedule.schedule if lp.schedule else None,
        "fixed": {k: value(v) for k, v in lp.fixed_inputs.literals.items()},
        "required": sorted(k for k, p in lp.parameters.parameters.items() if p.required),
        "overwrite_cache": bool(lp.overwrite_cache),
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
    assert probe["order"] == [
        "snapshot_data",
        "compute_features",
        "publish_features",
        "train_model",
        "export_model",
        "publish_model",
        "register_model",
        "finalize_run",
    ]
    # Compute tasks get their inputs by data flow; every publish precedes registration and finalization.
    assert {node: sorted(upstream) for node, upstream in probe["edges"].items()} == {
        "snapshot_data": [],
        "compute_features": ["snapshot_data"],
        "publish_features": ["compute_features"],
        "train_model": ["compute_features"],
        "export_model": ["compute_features", "train_model"],
        "publish_model": ["export_model", "publish_features", "train_model"],
        "register_model": ["publish_model"],
        "finalize_run": ["register_model"],
    }
    assert probe["plans"] == {
        "training_nightly_lp": {"cron": "0 2 * * *", "fixed": {}, "required": [], "overwrite_cache": False},
        "training_force_rerun_lp": {
            "cron": None,
            "fixed": {"force_rerun": True},
            "required": [],
            "overwrite_cache": False,  # not needed: a forced run's cache key matches nothing cached
        },
        "training_continuous_lp": {  # WARM_START=head: resolved at bootstrap, so never cached as text
            "cron": "0 3 * * *",
            "fixed": {"warm_start": "head"},
            "required": [],
            "overwrite_cache": False,
        },
    }
