"""The pipeline against a real `mlflow server` on loopback: the run completes and verifies, its version is a
pyfunc that predicts as `ml8s predict` does, racing registrations leave one version."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import make_context, write_small_churn
from forked_cli import forked_ml8s, forked_pyflyte
from mlflow import MlflowClient
from mlflow_predict import EDGE_ROWS, assert_same_predictions, cli_predict, pyfunc_predict, typed_frame
from mlflow_support import mlflow_server, raw_rows, write_rows

from ml8s.audit import verify_run
from ml8s.pipeline.run import run_pipeline
from ml8s.registry.registration import MlflowRef

EXPERIMENT = "churn experiments"
_RUN_VARS = ("DATA_ROOT", "TARGET_COLUMN", "EPOCHS", "PIPELINE_ROOT_URI", "FORCE_RERUN", "CHAIN_NAME")

# A child process: import everything, say it is ready, wait for the barrier, register.
CHILD = """
import os, sys, time
import mlflow
from ml8s.context.run import RunContext
from ml8s.registry.registration import register
ctx_file, ready, barrier = sys.argv[1:4]
ctx = RunContext.from_json(open(ctx_file).read())
open(ready, "w").close()
while not os.path.exists(barrier):
    time.sleep(0.005)
print(register(ctx, ctx.open_store(), timeout_s=120).model_dump_json())
"""


@dataclass(frozen=True)
class Served:
    uri: str
    data: Path
    root: Path
    run_id: str
    mlflow: dict[str, str]
    rows: list[dict[str, str]]
    rows_csv: Path
    stdout: str
    stderr: str


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Started, not yet answering: it boots while the run below trains."""
    yield from mlflow_server(tmp_path_factory.mktemp("mlflow-server"), wait=False)


@pytest.fixture(scope="module")
def served(server: str, tmp_path_factory: pytest.TempPathFactory) -> Served:
    """`ml8s run` with MLFLOW_TRACKING_URI pointing at the server (it failed at registration before), in its
    own process: what it prints on stdout and stderr is checked too. EPOCHS is a flag, MLflow's own
    MLFLOW_EXPERIMENT_NAME names the experiment."""
    base = tmp_path_factory.mktemp("served")
    data = write_small_churn(base / "data")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "ML8S_")) and k not in _RUN_VARS}
    env.update(DATA_ROOT=str(data), TARGET_COLUMN="churned", PIPELINE_ROOT_URI=str(base / "root"))
    env.update(MLFLOW_TRACKING_URI=server, MLFLOW_EXPERIMENT_NAME=EXPERIMENT)
    env.update(EPOCH="30")  # a typo: warned about, ignored (the racing test below checks the RUN_ID is EPOCHS=2's)
    # The run asks the server before training; it is still booting then: a refused connection is asked
    # again for up to MLFLOW_HTTP_REQUEST_TIMEOUT seconds. MLflow's own retries (1, 2, 4, ... s) stay in place.
    env.update(MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR="1", MLFLOW_HTTP_REQUEST_MAX_RETRIES="8")
    env.update(MLFLOW_HTTP_REQUEST_TIMEOUT="120")
    done = forked_ml8s(["run", "--epochs", "2"], env, timeout=600)
    assert done.returncode == 0, done.stderr
    manifest = json.loads(done.stdout)
    rows = raw_rows(data)[:40] + EDGE_ROWS
    rows_csv = write_rows(base / "rows.csv", rows)
    return Served(
        server, data, base / "root", manifest["run_id"], manifest["mlflow"], rows, rows_csv, done.stdout, done.stderr
    )


def test_run_against_a_server_completes_verifies_and_registers_once(served: Served) -> None:
    assert served.mlflow["tracking_uri"] == served.uri and served.mlflow["model_version"] == "1"
    assert not (served.root / "mlflow.db").exists()
    report = verify_run(str(served.root), served.run_id, {"MLFLOW_TRACKING_URI": served.uri})
    assert report.passed, report.model_dump_json(indent=2)
    client = MlflowClient(tracking_uri=served.uri)
    # a run killed after its commit, before MLflow's alias moved: its re-run, a gate hit, sets it (it did not)
    client.delete_registered_model_alias(served.mlflow["model_name"], "head")
    again = run_pipeline(
        {
            "DATA_ROOT": str(served.data),
            "TARGET_COLUMN": "churned",
            "PIPELINE_ROOT_URI": str(served.root),
            "EPOCHS": "2",
            "MLFLOW_TRACKING_URI": served.uri,
            "MLFLOW_EXPERIMENT_NAME": EXPERIMENT,
        }
    )
    assert json.loads(again)["mlflow"] == served.mlflow
    assert client.get_model_version_by_alias(served.mlflow["model_name"], "head").version == "1"
    (version,) = client.search_model_versions(f"name = '{served.mlflow['model_name']}'")
    assert version.source.startswith("models:/m-")
    logged = client.get_logged_model(version.source.removeprefix("models:/"))
    assert logged.artifact_location.startswith("mlflow-artifacts:/")  # the server's own store


def test_pyfunc_from_the_server_predicts_what_ml8s_predict_does(
    served: Served, capsys: pytest.CaptureFixture[str]
) -> None:
    expected = cli_predict(capsys, served.root, served.run_id, served.rows_csv)
    model_uri = f"models:/{served.mlflow['model_name']}/{served.mlflow['model_version']}"
    assert_same_predictions(expected, pyfunc_predict(served.uri, model_uri, typed_frame(served.rows)))


def test_racing_registrations_on_a_server_leave_one_version(served: Served, tmp_path: Path) -> None:
    ctx = make_context(
        served.data,
        served.root,
        epochs="2",
        mlflow_tracking_uri=served.uri,
        mlflow_model_name="raced",
        mlflow_experiment_prefix="raced",
    )
    assert ctx.run_id == served.run_id
    ctx_file, barrier = tmp_path / "ctx.json", tmp_path / "go"
    ctx_file.write_text(ctx.to_json())
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", CHILD, str(ctx_file), str(tmp_path / f"ready-{i}"), str(barrier)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(2)
    ]
    deadline = time.monotonic() + 60
    while not all((tmp_path / f"ready-{i}").exists() for i in range(2)):
        assert time.monotonic() < deadline and all(p.poll() is None for p in procs), "children did not start"
        time.sleep(0.01)
    barrier.touch()
    refs = []
    for proc in procs:
        out, err = proc.communicate(timeout=180)
        assert proc.returncode == 0, err
        refs.append(MlflowRef.model_validate_json(out.strip().splitlines()[-1]))
    assert refs[0] == refs[1] and refs[0].model_version == "1"
    client = MlflowClient(tracking_uri=served.uri)
    assert [v.version for v in client.search_model_versions("name = 'raced'")] == ["1"]
    assert len(client.search_runs([refs[0].experiment_id])) == 1
    assert len(client.search_logged_models([refs[0].experiment_id])) == 1


def test_the_run_is_in_mlflow_as_mlflow_users_expect(served: Served) -> None:
    """stdout is the manifest alone (MLflow's "View run" lines go to stderr); MLflow holds per-epoch train and
    held-out curves at the times the epochs ended, the dataset input, row counts as tags, the experiment
    MLFLOW_EXPERIMENT_NAME names, a run opened when training started, and the head alias on the version."""
    assert json.loads(served.stdout)["run_id"] == served.run_id  # the whole of stdout is one JSON document
    assert "ml8s: warning: EPOCH is set but ml8s does not read it; did you mean EPOCHS?" in served.stderr.splitlines()
    ours = [line for line in served.stderr.splitlines() if re.match(r"^\S+Z \+[0-9.]+s |^ml8s: ", line)]
    assert ours and max(len(line) for line in ours) <= 160
    assert ours[-1].startswith(f"ml8s: run {served.run_id} done in ") and "ml8s-model v1" in ours[-1]
    client = MlflowClient(tracking_uri=served.uri)
    assert served.mlflow["experiment_name"] == EXPERIMENT
    run = client.get_run(served.mlflow["mlflow_run_id"])
    epochs = json.loads((served.root / "ml8s_training_runs" / served.run_id / "logs" / "epochs.json").read_bytes())
    for name in ("train_loss", "held_out_log_loss", "held_out_accuracy"):
        history = sorted(client.get_metric_history(run.info.run_id, name), key=lambda m: m.step)
        assert [m.step for m in history] == [1, 2], name
        assert [m.timestamp for m in history] == [e["time_ms"] for e in epochs["epochs"]], name
    assert run.info.start_time == epochs["started_ms"] < epochs["epochs"][0]["time_ms"]
    assert "train_rows" not in run.data.metrics and int(run.data.tags["ml8s.train_rows"]) > 0
    (dataset,) = run.inputs.dataset_inputs
    assert dataset.dataset.digest == json.loads(served.stdout)["data_fingerprint"][:32]
    assert {t.key: t.value for t in dataset.tags} == {"mlflow.data.context": "training"}
    head = client.get_model_version_by_alias(served.mlflow["model_name"], "head")
    assert head.version == served.mlflow["model_version"]


def test_pyflyte_run_against_a_server_prints_its_result_alone(served: Served, tmp_path: Path) -> None:
    """`pyflyte run` with an HTTP tracking URI: MLflow's "View run" lines never reach stdout, which is the
    workflow's typed result as one JSON document; its model version is the one the server registered (a model
    of its own, so the versions and aliases of the other tests stay as they are)."""
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "ML8S_", "FLYTE")) and k not in _RUN_VARS
    }
    (tmp_path / "tmp").mkdir()
    env.update(HOME=str(tmp_path), TMPDIR=str(tmp_path / "tmp"), MLFLOW_TRACKING_URI=served.uri)
    env.update(MLFLOW_MODEL_NAME="flyte-model", MLFLOW_EXPERIMENT_NAME=EXPERIMENT)
    args = ["--data_root", str(served.data), "--target_column", "churned", "--epochs", "2"]
    args += ["--pipeline_root_uri", str(tmp_path / "root")]
    repo = Path(__file__).resolve().parent.parent
    done = forked_pyflyte(["run", "workflows/training.py", "training_pipeline", *args], env, cwd=repo, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout)  # the whole of stdout
    assert (result["run_id"], result["model_name"], result["model_version"]) == (served.run_id, "flyte-model", 1)
    assert "View run" not in done.stdout and "Traceback" not in done.stderr
    client = MlflowClient(tracking_uri=served.uri)
    (version,) = client.search_model_versions("name = 'flyte-model'")
    assert version.version == client.get_model_version_by_alias("flyte-model", "head").version == "1"
