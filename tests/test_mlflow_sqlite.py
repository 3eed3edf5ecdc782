"""A run registered in the local sqlite MLflow: the version is a pyfunc model that predicts on raw rows as
`ml8s predict` does (also served by `mlflow models serve`), logged outside ARTIFACT_ROOT; the MLflow run has
plain params, curves and source tags."""

from __future__ import annotations

import contextlib
import hashlib
import http.server
import json
import logging
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from conftest import write_small_churn
from mlflow import MlflowClient
from mlflow_predict import (
    EDGE_ROWS,
    assert_same_predictions,
    cli_predict,
    post_invocations,
    post_raw,
    pyfunc_predict,
    typed_frame,
)
from mlflow_support import (
    MLFLOW,
    artifact_dir,
    copy_root_as_recorded_there,
    free_port,
    raw_rows,
    stop,
    wait_until_answers,
    write_rows,
)

import ml8s
from ml8s.audit import verify_run
from ml8s.contract import layout
from ml8s.pipeline.run import run_pipeline

REPO = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Completed:
    root: Path
    run_id: str
    mlflow: dict[str, str]
    rows: list[dict[str, str]]
    rows_csv: Path

    @property
    def client(self) -> MlflowClient:
        return MlflowClient(tracking_uri=self.mlflow["tracking_uri"])


@pytest.fixture(scope="module")
def completed(tmp_path_factory: pytest.TempPathFactory) -> Completed:
    base = tmp_path_factory.mktemp("sqlite")
    data = write_small_churn(base / "data")
    env = {"DATA_ROOT": str(data), "TARGET_COLUMN": "churned", "PIPELINE_ROOT_URI": str(base / "root"), "EPOCHS": "3"}
    manifest = json.loads(run_pipeline(env))
    rows = raw_rows(data)[:60] + EDGE_ROWS
    return Completed(base / "root", manifest["run_id"], manifest["mlflow"], rows, write_rows(base / "rows.csv", rows))


def test_version_is_a_logged_pyfunc_model_outside_artifact_root(completed: Completed) -> None:
    client, ref = completed.client, completed.mlflow
    version = client.get_model_version(ref["model_name"], ref["model_version"])
    model_id = version.source.removeprefix("models:/")
    logged = client.get_logged_model(model_id)
    assert str(logged.status) == "READY" and logged.source_run_id == ref["mlflow_run_id"] == version.run_id
    assert logged.tags["full_config_hash"] == version.tags["full_config_hash"]
    where = Path(logged.artifact_location.removeprefix("file://"))
    assert where.is_relative_to(completed.root / "mlruns")  # MLflow's store, not ARTIFACT_ROOT

    mlmodel = yaml.safe_load((where / "MLmodel").read_text())
    flavor = mlmodel["flavors"]["python_function"]
    assert flavor["loader_module"] == "mlflow.pyfunc.loaders.code_model" and flavor["code"] == "code"
    assert (where / "code" / "ml8s" / "inference" / "pyfunc.py").is_file()
    assert not list(where.rglob("__pycache__"))
    assert mlmodel["model_id"] == model_id and mlmodel["run_id"] == ref["mlflow_run_id"]
    # No input schema: MLflow's would refuse what training reads ("NA" in a number column) and break text/csv;
    # the columns and their kinds are in the metadata, the model is logged from code (nothing pickled).
    assert "inputs" not in mlmodel["signature"] or mlmodel["signature"]["inputs"] is None
    assert mlmodel["metadata"]["ml8s_input_columns"] == [
        {"name": "auto_pay", "kind": "boolean"},
        {"name": "monthly_charges", "kind": "numeric"},
        {"name": "plan", "kind": "categorical"},
        {"name": "tenure", "kind": "numeric"},
    ]
    assert "python_model.pkl" not in {p.name for p in where.rglob("*")} and "model_code_path" in flavor
    outputs = [c["name"] for c in json.loads(mlmodel["signature"]["outputs"])]
    assert outputs == ["predicted_class", "probability_no", "probability_yes"]
    example = json.loads((where / "input_example.json").read_text())
    assert example["columns"] == ["auto_pay", "monthly_charges", "plan", "tenure"] and len(example["data"]) == 2
    requirements = (where / "requirements.txt").read_text().split()
    assert any(r.startswith("onnxruntime==") for r in requirements) and any(
        r.startswith("mlflow==") for r in requirements
    )

    run_dir = artifact_dir(completed.root, completed.run_id)
    for name, rel in [
        ("feature_schema.json", layout.FEATURE_SCHEMA),
        ("training_metadata.json", layout.TRAINING_METADATA),
        ("model.onnx", layout.model_export("onnx")),
    ]:
        assert (where / "artifacts" / name).read_bytes() == (run_dir / rel).read_bytes()
    listing = sorted(str(p.relative_to(run_dir)) for p in run_dir.rglob("*") if p.is_file())
    logs = [layout.EPOCH_LOG, layout.TENSORBOARD_EVENTS]
    assert listing == sorted([*layout.final_artifacts("onnx"), layout.SUCCESS_MARKER, *logs])
    metadata = json.loads((run_dir / layout.TRAINING_METADATA).read_bytes())
    for rel, recorded in metadata["artifacts"].items():
        assert hashlib.sha256((run_dir / rel).read_bytes()).hexdigest() == recorded["sha256"]


def test_pyfunc_from_the_registry_predicts_what_ml8s_predict_does(
    completed: Completed, capsys: pytest.CaptureFixture[str]
) -> None:
    expected = cli_predict(capsys, completed.root, completed.run_id, completed.rows_csv)
    assert len(expected) == 1 + len(completed.rows)
    ref = completed.mlflow
    got = pyfunc_predict(
        ref["tracking_uri"], f"models:/{ref['model_name']}/{ref['model_version']}", typed_frame(completed.rows)
    )
    assert_same_predictions(expected, got)


def test_mlflow_run_has_plain_params_curves_and_source_tags(completed: Completed) -> None:
    client, ref = completed.client, completed.mlflow
    found = client.search_runs(
        [ref["experiment_id"]], "params.model_type = 'mlp' and params.epochs = '3' and params.target_column = 'churned'"
    )
    assert [r.info.run_id for r in found] == [ref["mlflow_run_id"]]
    run = found[0]
    assert run.data.params["standardize"] == "true" and run.data.params["max_features"] == "null"
    metadata = json.loads((artifact_dir(completed.root, completed.run_id) / layout.TRAINING_METADATA).read_bytes())
    history = client.get_metric_history(ref["mlflow_run_id"], "train_loss")
    assert [(m.step, m.value) for m in history] == list(enumerate(metadata["training"]["epoch_losses"], start=1))
    held_out = json.loads((artifact_dir(completed.root, completed.run_id) / layout.METRICS).read_bytes())
    (accuracy,) = client.get_metric_history(ref["mlflow_run_id"], "accuracy")
    assert (accuracy.step, accuracy.value) == (3, held_out["accuracy"])
    tags = run.data.tags
    assert tags["ml8s.version"] == ml8s.__version__ and tags["mlflow.source.type"] == "LOCAL"
    assert tags["mlflow.source.name"]
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True, check=False)
    if head.returncode == 0:
        assert tags["mlflow.source.git.commit"] == head.stdout.strip()
    else:
        assert "mlflow.source.git.commit" not in tags


def test_run_verifies_with_its_logged_model(completed: Completed) -> None:
    report = verify_run(str(completed.root), completed.run_id, {})
    assert report.passed, report.model_dump_json(indent=2)
    assert "mlflow" in {check.name for check in report.checks}


def test_mlflow_models_serve_answers_raw_rows(
    completed: Completed, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    ref, port, log = completed.mlflow, free_port(), tmp_path / "serve.log"
    model_uri = f"models:/{ref['model_name']}/{ref['model_version']}"
    command = [MLFLOW, "models", "serve", "-m", model_uri, "--env-manager", "local", "-h", "127.0.0.1", "-p", str(port)]
    # The scoring server runs `uvicorn` from PATH: the environment's own bin directory.
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    env = {**os.environ, "MLFLOW_TRACKING_URI": ref["tracking_uri"], "PATH": path}
    with log.open("wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    # Raw rows as a user sends them: "NA" and "?" for missing numbers, booleans as text or JSON booleans,
    # whole numbers where the column holds decimals.
    raw = [dict(row) for row in completed.rows]
    raw[0] |= {"tenure": "NA", "auto_pay": "true"}
    raw[1] |= {"monthly_charges": "?", "plan": "NA"}
    raw[2] |= {"auto_pay": "", "tenure": "12"}
    raw_csv = write_rows(tmp_path / "raw.csv", raw)
    records = [dict(row) for row in raw]
    records[3] |= {"tenure": 12, "monthly_charges": 30, "auto_pay": True}
    records[4] |= {"tenure": None, "auto_pay": False}
    json_body = json.dumps({"dataframe_records": records}).encode()
    records_csv = write_rows(tmp_path / "records.csv", [{k: _text(v) for k, v in r.items()} for r in records])
    url = f"http://127.0.0.1:{port}/invocations"
    try:
        wait_until_answers(f"http://127.0.0.1:{port}/ping", process, log)
        answer = post_invocations(url, typed_frame(completed.rows))
        by_csv = post_raw(url, raw_csv.read_bytes(), "text/csv")
        by_json = post_raw(url, json_body, "application/json")
    finally:
        stop(process)
    assert_same_predictions(cli_predict(capsys, completed.root, completed.run_id, completed.rows_csv), answer)
    assert_same_predictions(cli_predict(capsys, completed.root, completed.run_id, raw_csv), by_csv)
    assert_same_predictions(cli_predict(capsys, completed.root, completed.run_id, records_csv), by_json)


def _text(value: object) -> str:
    """A JSON cell as CSV text: null is empty, booleans true/false."""
    if value is None:
        return ""
    return str(value).lower() if isinstance(value, bool) else str(value)


def test_saving_the_model_scans_no_installed_distribution(
    completed: Completed, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The model's pip requirements are pinned from this environment, so MLflow's mismatch check (which first
    maps every installed distribution to its modules) is skipped; the requirements file is still exact."""
    import mlflow.utils.requirements_utils as requirements_utils

    from ml8s.inference.model_files import read_run_files
    from ml8s.inference.pyfunc import requirements, save_model_dir

    scans: list[str] = []  # MLflow swallows any error of its check: record the call instead
    monkeypatch.setattr(requirements_utils, "_MODULES_TO_PACKAGES", None)
    monkeypatch.setattr(requirements_utils, "_init_modules_to_packages_map", lambda: scans.append("scan"))
    files = read_run_files(f"file://{completed.root}", completed.run_id, require_marker=True)
    save_model_dir(str(tmp_path / "model"), files)
    assert scans == [], "MLflow scanned every installed distribution while saving the model"
    written = (tmp_path / "model" / "requirements.txt").read_text().split()
    assert sorted(written) == requirements("onnx")
    import mlflow.utils.environment as environment

    check = requirements_utils.warn_dependency_requirement_mismatches
    assert environment.warn_dependency_requirement_mismatches is check  # restored after the save


def test_a_rerun_moves_aliases_a_kill_left_on_another_version_back_once(
    completed: Completed, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A run killed after its chain commit and promotion decision, before MLflow's aliases moved, left them on an
    older version; the re-run returned at the gate, which moved nothing, so ``@head`` and ``@promoted`` stayed
    there for good. The re-run now points them where the chain's head and promotion log say, without a new
    version; the next re-run finds them right and writes nothing to MLflow."""
    from ml8s.registry.mlflow_model import registry_resolves_with

    root = tmp_path / "root"
    copy_root_as_recorded_there(completed.root, root)
    db = root / "mlflow.db"
    client, name = MlflowClient(tracking_uri=f"sqlite:///{db}"), completed.mlflow["model_name"]
    ours = client.get_model_version(name, completed.mlflow["model_version"])
    assert client.get_registered_model(name).aliases == {"head": ours.version, "promoted": ours.version}
    with registry_resolves_with(f"sqlite:///{db}"):  # the version the aliases pointed at before the killed run
        older = client.create_model_version(name, source=ours.source, run_id=ours.run_id, model_id=ours.model_id)
    for alias in ("head", "promoted"):
        client.set_registered_model_alias(name, alias, older.version)
    # ml8s verify reports them (notes: they follow the chain, not the run), as after an alias write that landed late
    stale = [line for line in _mlflow_details(root, completed.run_id) if line.startswith("stale MLflow alias")]
    assert stale == [
        f"stale MLflow alias {alias!r}: version {older.version} -> version {ours.version} (chain v1) (a late alias "
        "write, or a failed alias step; the next run moves it)"
        for alias in ("head", "promoted")
    ]
    env = {"DATA_ROOT": str(completed.root.parent / "data"), "TARGET_COLUMN": "churned", "EPOCHS": "3"}
    env["PIPELINE_ROOT_URI"] = str(root)

    with caplog.at_level(logging.INFO, logger="ml8s"):
        assert json.loads(run_pipeline(env))["run_id"] == completed.run_id  # the gate's early exit
    assert client.get_registered_model(name).aliases == {"head": ours.version, "promoted": ours.version}
    moved = [r.getMessage() for r in caplog.records if getattr(r, "step", "") == "aliases"]
    assert moved == [
        f"MLflow {name!r} alias 'head': version {older.version} -> version {ours.version} (chain v1)",
        f"MLflow {name!r} alias 'promoted': version {older.version} -> version {ours.version} (chain v1)",
    ]
    assert sorted(v.version for v in client.search_model_versions(f"name='{name}'")) == sorted(
        [ours.version, older.version]
    )

    caplog.clear()
    before = (db.read_bytes(), db.stat().st_mtime_ns)
    with caplog.at_level(logging.INFO, logger="ml8s"):
        run_pipeline(env)
    assert (db.read_bytes(), db.stat().st_mtime_ns) == before  # nothing written to MLflow
    assert not [r.getMessage() for r in caplog.records if getattr(r, "step", "") == "aliases"]
    assert not [line for line in _mlflow_details(root, completed.run_id) if line.startswith(("stale", "aliases"))]


def _mlflow_details(root: Path, run_id: str) -> tuple[str, ...]:
    report = verify_run(str(root), run_id, {})
    assert report.passed, report.model_dump_json(indent=2)
    return report.check("mlflow").details


def test_an_early_exit_points_head_at_the_version_of_the_chain_head_not_its_own(
    completed: Completed, tmp_path: Path
) -> None:
    """Another run committed chain v2 and was killed before MLflow's ``head`` moved to its version: a re-run of
    v1's run (an early exit) now points ``head`` at v2's version, the chain's head, not at its own, and keeps
    ``promoted`` on its own version, which the promotion log serves (v2 was never decided)."""
    from ml8s.chain import ChainStore, CommitMeta
    from ml8s.registry.mlflow_model import registry_resolves_with
    from ml8s.store import LocalStore

    root = tmp_path / "root"
    copy_root_as_recorded_there(completed.root, root)
    client, name = MlflowClient(tracking_uri=f"sqlite:///{root / 'mlflow.db'}"), completed.mlflow["model_name"]
    ours, other = client.get_model_version(name, completed.mlflow["model_version"]), "ab" * 32
    with registry_resolves_with(f"sqlite:///{root / 'mlflow.db'}"):
        newer = client.create_model_version(
            name, source=ours.source, run_id=ours.run_id, model_id=ours.model_id, tags={"full_config_hash": other}
        )
    meta = CommitMeta(
        run_id=other[:12],
        full_config_hash=other,
        artifact_root="file:///elsewhere",
        architecture="x",
        parameter_count=1,
    )
    assert ChainStore(LocalStore(str(root)), "ml8s-model").commit({"model.bin": b"v2"}, meta).counter == 2
    env = {"DATA_ROOT": str(completed.root.parent / "data"), "TARGET_COLUMN": "churned", "EPOCHS": "3"}
    run_pipeline({**env, "PIPELINE_ROOT_URI": str(root)})
    assert client.get_registered_model(name).aliases == {"head": newer.version, "promoted": ours.version}


@pytest.mark.parametrize(
    ("uri", "said"), [("postgresql://ml@127.0.0.1:9/mlflow", "is not installed"), ("http://127.0.0.1:9", "no answer")]
)
def test_an_early_exit_whose_registry_cannot_be_read_returns_the_run_and_says_so(
    completed: Completed, uri: str, said: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The early exit now reads MLflow's aliases: a registry it cannot read (a database driver not installed, a
    server that does not answer) is a warning naming it, and the run's result stands (no traceback, no failure)."""
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "1")  # the probe's bound on an absent server
    env = {"DATA_ROOT": str(completed.root.parent / "data"), "TARGET_COLUMN": "churned", "EPOCHS": "3"}
    env.update(PIPELINE_ROOT_URI=str(completed.root), MLFLOW_TRACKING_URI=uri)
    with caplog.at_level(logging.WARNING, logger="ml8s"):
        assert json.loads(run_pipeline(env))["run_id"] == completed.run_id
    (warned,) = [r.getMessage() for r in caplog.records if getattr(r, "step", "") == "aliases"]
    assert (
        warned.startswith("MLflow aliases of 'ml8s-model' not brought in line with chain 'ml8s-model'")
        and said in warned
    )


def test_a_server_view_finds_the_version_of_a_run_by_its_hash_not_by_the_number_its_manifest_recorded(
    completed: Completed, tmp_path: Path
) -> None:
    """A server's registry recreated or restored (REGISTRY_REPLACED): the number a run's manifest recorded now
    belongs to another run's version. The view of a tracking server took that number for the run's version
    without asking, so the early exit pointed ``@head`` at the other run's model; it now finds the version by
    FULL_CONFIG_HASH, as the sqlite view does (the client's view is read here through a sqlite URI)."""
    from ml8s.registry.alias_view import _ClientView
    from ml8s.registry.mlflow_model import registry_resolves_with

    shutil.copy(completed.root / "mlflow.db", tmp_path / "mlflow.db")
    uri, name = f"sqlite:///{tmp_path / 'mlflow.db'}", completed.mlflow["model_name"]
    client = MlflowClient(tracking_uri=uri)
    ours = client.get_model_version(name, completed.mlflow["model_version"])
    with registry_resolves_with(uri):  # another run's version, holding the number the manifest recorded
        other = client.create_model_version(
            name, source=ours.source, run_id=ours.run_id, model_id=ours.model_id, tags={"full_config_hash": "cd" * 32}
        )
    ours_hash = ours.tags["full_config_hash"]
    view = _ClientView(uri, name)  # before: also given (ours_hash, str(other.version)), the manifest's record
    assert view.version_of(ours_hash) == str(ours.version)
    assert view.version_of("cd" * 32) == str(other.version)


def test_an_early_exit_never_upgrades_an_older_mlflow_database_to_move_an_alias(
    completed: Completed, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The registry's database was taken back to the previous MLflow schema (as an older MLflow leaves it) and its
    ``head`` alias deleted by hand: the early exit's alias write opened MLflow's client on it, which migrates an older
    database in place, without the backup that REGISTRY_SCHEMA_INCOMPLETE asks for. The schema is now checked
    first: a warning naming it, the database left as it was, the run's result standing."""
    import sqlite3

    from alembic import command

    from ml8s.registry.schema import _alembic_config

    root = tmp_path / "root"
    copy_root_as_recorded_there(completed.root, root)
    db = root / "mlflow.db"
    with sqlite3.connect(db) as connection:
        connection.execute("DELETE FROM registered_model_aliases WHERE alias = 'head'")
    command.downgrade(_alembic_config(f"sqlite:///{db}"), "-1")
    before = db.read_bytes()
    env = {"DATA_ROOT": str(completed.root.parent / "data"), "TARGET_COLUMN": "churned", "EPOCHS": "3"}
    with caplog.at_level(logging.WARNING, logger="ml8s"):
        assert json.loads(run_pipeline({**env, "PIPELINE_ROOT_URI": str(root)}))["run_id"] == completed.run_id
    (warned,) = [r.getMessage() for r in caplog.records if getattr(r, "step", "") == "aliases"]
    assert "is not at this MLflow's schema" in warned and "mlflow db upgrade" in warned
    assert db.read_bytes() == before  # neither migrated nor written


def test_an_early_exit_reads_a_database_whose_writer_was_killed_mid_transaction(
    completed: Completed, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A process killed while writing the registry (an alias move, a registration) leaves a hot journal beside
    it. The alias view opened the database read-only, which cannot roll that journal back, so every early exit
    warned 'attempt to write a readonly database' and left ``@head`` where it was until something else wrote
    to MLflow: for a run that is only ever re-run, for good. The view now rolls the dead transaction back, as
    MLflow and the schema check do, and moves the alias."""
    import sqlite3

    root = tmp_path / "root"
    copy_root_as_recorded_there(completed.root, root)
    db, name = root / "mlflow.db", completed.mlflow["model_name"]
    with sqlite3.connect(db) as connection:  # the alias the killed writer was moving
        connection.execute("DELETE FROM registered_model_aliases WHERE alias = 'head'")
    killed = (
        "import os, sqlite3, sys\n"
        "c = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
        "c.execute('PRAGMA cache_size=1')\n"
        "c.execute('BEGIN')\n"
        "c.execute('UPDATE model_version_tags SET value = value')\n"
        "c.execute('CREATE TABLE spill AS WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n '\n"
        "          'WHERE i < 4000) SELECT randomblob(500) AS b FROM n')\n"
        "os._exit(9)\n"
    )
    subprocess.run([sys.executable, "-c", killed, str(db)], check=False)
    assert (root / "mlflow.db-journal").stat().st_size > 0
    env = {"DATA_ROOT": str(completed.root.parent / "data"), "TARGET_COLUMN": "churned", "EPOCHS": "3"}
    with caplog.at_level(logging.INFO, logger="ml8s"):
        run_pipeline({**env, "PIPELINE_ROOT_URI": str(root)})
    said = [r.getMessage() for r in caplog.records if getattr(r, "step", "") == "aliases"]
    assert not [line for line in said if "not brought in line" in line], said
    aliases = MlflowClient(tracking_uri=f"sqlite:///{db}").get_registered_model(name).aliases
    version = completed.mlflow["model_version"]
    assert {alias: str(number) for alias, number in aliases.items()} == {"head": version, "promoted": version}


@contextlib.contextmanager
def _answers_health_then_hangs(api_status: int = 0) -> Iterator[tuple[str, list[str]]]:
    """A loopback MLflow that answers ``GET /health`` (so ml8s's probe passes) and never answers its API: the
    client's requests are held until the server closes (``api_status``: each is answered with that status and
    an MLflow error instead). Yields its URI and the paths asked for."""
    asked: list[str] = []
    released = threading.Event()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            asked.append(self.path)
            if self.path.startswith("/health"):
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"OK")
                return
            if api_status:
                body = json.dumps({"error_code": "INTERNAL_ERROR", "message": "the registry is down"}).encode()
                self.send_response(api_status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                return
            released.wait()  # the API never answers; the connection closes with the server

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", asked
    finally:
        released.set()
        server.shutdown()
        server.server_close()


def test_an_early_exit_against_a_hung_mlflow_api_returns_within_the_alias_deadline(
    completed: Completed, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A run whose work is done waited on a hung MLflow at its end: the probe passes (the server answers
    /health), then MLflow's client waits MLFLOW_HTTP_REQUEST_TIMEOUT (120 s) per request, retried up to seven
    times, and a sqlite registry's lock up to 300 s. The whole convergence is now bounded by
    ALIAS_DEADLINE_SECONDS: the run returns its manifest with the warning naming the deadline."""
    # MLflow's own bound made short, without retries: without the deadline this test fails in seconds (MLflow's
    # timeout in the warning), not after minutes
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "5")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    env = {"DATA_ROOT": str(completed.root.parent / "data"), "TARGET_COLUMN": "churned", "EPOCHS": "3"}
    with _answers_health_then_hangs() as (uri, asked), caplog.at_level(logging.WARNING, logger="ml8s"):
        env.update(PIPELINE_ROOT_URI=str(completed.root), MLFLOW_TRACKING_URI=uri, ALIAS_DEADLINE_SECONDS="1")
        assert json.loads(run_pipeline(env))["run_id"] == completed.run_id
        assert [path for path in asked if path.startswith("/api/")], asked  # it hung in MLflow's API, past the probe
    (warned,) = [r.getMessage() for r in caplog.records if getattr(r, "step", "") == "aliases"]
    assert warned.startswith("MLflow aliases of 'ml8s-model' not brought in line with chain 'ml8s-model'"), warned
    assert "not done within ALIAS_DEADLINE_SECONDS=1 s" in warned and warned.endswith("(the next run tries again)")


def test_an_early_exit_whose_sqlite_registry_lock_is_held_returns_within_the_alias_deadline(
    completed: Completed, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """An alias to move, and the registration lock beside the sqlite registry held by another run (a long
    registration, a hung one): the early exit waited up to 300 s for it. It now waits ALIAS_DEADLINE_SECONDS at
    most, warns, and leaves the registry as it was."""
    import sqlite3

    from ml8s.locks import path_lock

    root = tmp_path / "root"
    copy_root_as_recorded_there(completed.root, root)
    db = root / "mlflow.db"
    with sqlite3.connect(db) as connection:  # the alias a killed run left unmoved
        connection.execute("DELETE FROM registered_model_aliases WHERE alias = 'head'")
    before = db.read_bytes()
    env = {"DATA_ROOT": str(completed.root.parent / "data"), "TARGET_COLUMN": "churned", "EPOCHS": "3"}
    env.update(PIPELINE_ROOT_URI=str(root), ALIAS_DEADLINE_SECONDS="1")
    with path_lock(f"{db}.lock"), caplog.at_level(logging.WARNING, logger="ml8s"):
        assert json.loads(run_pipeline(env))["run_id"] == completed.run_id
    (warned,) = [r.getMessage() for r in caplog.records if getattr(r, "step", "") == "aliases"]
    assert "not brought in line" in warned and "ALIAS_DEADLINE_SECONDS=1 s" in warned, warned
    assert db.read_bytes() == before


@pytest.mark.parametrize("damaged", ["head", "promotion log"])
def test_a_chain_that_cannot_be_read_when_the_aliases_converge_is_a_warning_not_a_failed_run(
    completed: Completed, tmp_path: Path, damaged: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The convergence is a run's last step, after its commit and decision: the chain's head or promotion log
    found damaged there (written over since, or a store failing) raised out of it, so a run whose work was done
    failed. It is now the convergence's warning naming the damage, the aliases left as they are (``ml8s chain
    verify`` reports the damage)."""
    from ml8s.chain import ChainStore
    from ml8s.chain.paths import HEAD
    from ml8s.chain.promotion import record_key
    from ml8s.pipeline.bootstrap import bootstrap
    from ml8s.registry.alias import converge_aliases

    root = tmp_path / "root"
    copy_root_as_recorded_there(completed.root, root)
    env = {"DATA_ROOT": str(completed.root.parent / "data"), "TARGET_COLUMN": "churned", "EPOCHS": "3"}
    ctx = bootstrap({**env, "PIPELINE_ROOT_URI": str(root)})
    store = ctx.open_store()
    chain = ChainStore(store, ctx.settings.chain_name)
    key = chain.key(HEAD) if damaged == "head" else record_key(chain, 1)
    store.put_atomic(key, b"{not json", tmp_key=f"{key}.tmp-test")
    with caplog.at_level(logging.WARNING, logger="ml8s"):
        assert converge_aliases(ctx, store) == []
    (warned,) = [r.getMessage() for r in caplog.records if getattr(r, "step", "") == "aliases"]
    assert warned.startswith("MLflow aliases of 'ml8s-model' not brought in line with chain 'ml8s-model'"), warned
    assert "CHAIN_CORRUPTION" in warned and warned.endswith("(the next run tries again)"), warned


def test_an_early_exit_that_makes_the_promotion_decision_waits_on_mlflow_only_within_the_alias_deadline(
    completed: Completed, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A run killed between its chain commit and its promotion decision: its re-run, an early exit, decides then,
    and the promotion step moved the alias ``promoted`` itself, outside ALIAS_DEADLINE_SECONDS (MLflow's timeouts
    on a hung server: minutes; a held sqlite lock: 300 s), right before the convergence moved it again. The
    decision is made and the aliases are the convergence's alone: one bounded wait, one warning."""
    from ml8s.chain import ChainStore, PromotionLog
    from ml8s.chain.promotion import record_key
    from ml8s.store import LocalStore

    root = tmp_path / "root"
    copy_root_as_recorded_there(completed.root, root)
    chain = ChainStore(LocalStore(str(root)), "ml8s-model")
    chain.store.delete(record_key(chain, 1))  # the decision the killed run never wrote
    assert PromotionLog(chain).decisions() == []
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "5")  # MLflow's own bound short: a failure in seconds
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    env = {"DATA_ROOT": str(completed.root.parent / "data"), "TARGET_COLUMN": "churned", "EPOCHS": "3"}
    with _answers_health_then_hangs() as (uri, asked), caplog.at_level(logging.INFO, logger="ml8s"):
        env.update(PIPELINE_ROOT_URI=str(root), MLFLOW_TRACKING_URI=uri, ALIAS_DEADLINE_SECONDS="1")
        assert json.loads(run_pipeline(env))["run_id"] == completed.run_id
    assert [d.decision.action for d in PromotionLog(chain).decisions()] == ["promote"]
    assert len([path for path in asked if path.startswith("/api/")]) == 1, asked  # the convergence's, held
    said = [(getattr(r, "step", ""), r.getMessage()) for r in caplog.records if "MLflow" in r.getMessage()]
    assert len(said) == 1 and said[0][0] == "aliases", said
    assert "not done within ALIAS_DEADLINE_SECONDS=1 s" in said[0][1]


def test_the_aliases_never_follow_a_head_a_store_writer_appended_unsigned(
    completed: Completed, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A store writer (no key of the chain's trust policy) appended an unsigned version naming the FULL_CONFIG_HASH
    of another registered version: followers, ``predict --chain`` and ``chain verify`` refuse it (CHAIN_UNTRUSTED),
    but the convergence read the head unchecked and pointed ``@head`` at that version. The head is now read as
    every chain reader reads it (checked against the trust policies, CHAIN_TRUST_ROOT, CHAIN_REQUIRE_SIGNED): a
    warning naming the refusal, the alias left where it was."""
    from test_chain_signing import KEY_A, intruder
    from test_chain_support import run_hash

    from ml8s.chain import ChainStore, CommitMeta
    from ml8s.chain.trust import adopt_policy
    from ml8s.pipeline.bootstrap import bootstrap
    from ml8s.registry.alias import converge_aliases
    from ml8s.registry.mlflow_model import registry_resolves_with
    from ml8s.store import LocalStore

    root = tmp_path / "root"
    copy_root_as_recorded_there(completed.root, root)
    uri, name = f"sqlite:///{root / 'mlflow.db'}", completed.mlflow["model_name"]
    client = MlflowClient(tracking_uri=uri)
    ours = client.get_model_version(name, completed.mlflow["model_version"])
    with registry_resolves_with(uri):  # the version the forger wants served as @head
        tags = {"full_config_hash": run_hash("x")}
        client.create_model_version(name, source=ours.source, run_id=ours.run_id, model_id=ours.model_id, tags=tags)
    chain = ChainStore(LocalStore(str(root)), "signed-model", signer=KEY_A)
    chain.init()
    adopt_policy(chain, KEY_A, [KEY_A.public_key])
    mine = ours.tags["full_config_hash"]
    signed = CommitMeta(run_id=mine[:12], full_config_hash=mine, artifact_root="r", architecture="x", parameter_count=1)
    chain.commit({"model.bin": b"ours"}, signed)
    intruder(chain, "x", signer=None, policy=0)
    env = {"DATA_ROOT": str(completed.root.parent / "data"), "TARGET_COLUMN": "churned", "EPOCHS": "3"}
    ctx = bootstrap({**env, "PIPELINE_ROOT_URI": str(root), "CHAIN_NAME": "signed-model"})
    with caplog.at_level(logging.WARNING, logger="ml8s"):
        assert converge_aliases(ctx, ctx.open_store()) == []
    assert client.get_registered_model(name).aliases == {"head": ours.version, "promoted": ours.version}
    (warned,) = [r.getMessage() for r in caplog.records if getattr(r, "step", "") == "aliases"]
    assert "not brought in line with chain 'signed-model'" in warned and "CHAIN_UNTRUSTED" in warned, warned


def test_an_early_exit_against_a_registry_answering_500_returns_within_the_alias_deadline(
    completed: Completed, caplog: pytest.LogCaptureFixture
) -> None:
    """A server whose health check passes and whose API answers 500: MLflow's client retries each request with
    growing back-off (minutes, by its defaults). The early exit returns within ALIAS_DEADLINE_SECONDS, and the
    warning says what may have held it, not that the registry gave no answer."""
    env = {"DATA_ROOT": str(completed.root.parent / "data"), "TARGET_COLUMN": "churned", "EPOCHS": "3"}
    with _answers_health_then_hangs(500) as (uri, asked), caplog.at_level(logging.WARNING, logger="ml8s"):
        env.update(PIPELINE_ROOT_URI=str(completed.root), MLFLOW_TRACKING_URI=uri, ALIAS_DEADLINE_SECONDS="1")
        assert json.loads(run_pipeline(env))["run_id"] == completed.run_id
    assert [path for path in asked if path.startswith("/api/")], asked
    (warned,) = [r.getMessage() for r in caplog.records if getattr(r, "step", "") == "aliases"]
    assert "not done within ALIAS_DEADLINE_SECONDS=1 s" in warned and "still retrying the errors" in warned, warned
