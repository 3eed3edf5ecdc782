"""``ml8s verify`` asks the MLflow the run registered with, as manifest.json records it (defect 7).

MLFLOW_TRACKING_URI is used only for a manifest that records none (and to supply credentials for the
recorded URI); ``--mlflow-tracking-uri`` overrides both, for a registry that moved. The report says
which URI it used and where it came from. A manifest never records a password.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import write_small_churn
from forked_cli import forked_ml8s

from ml8s.audit import verify_run
from ml8s.audit.mlflow_refs import choose_tracking_uri
from ml8s.errors import RegistryError, without_credentials
from ml8s.identity.uri import public_tracking_uri
from ml8s.log import HumanFormatter
from ml8s.registry.registration import MlflowRef

OURS = ("FORCE_RERUN", "MLFLOW_TRACKING_URI", "CHAIN_NAME", "MLFLOW_MODEL_NAME", "PIPELINE_ROOT_URI", "DATA_ROOT")


def _ml8s(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return forked_ml8s(args, env, timeout=300)


@pytest.fixture(scope="module")
def registered(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, str], str, str]:
    """A run registered in a sqlite database outside its pipeline root: (env without MLflow, run_id, URI)."""
    base = tmp_path_factory.mktemp("tracking")
    data = write_small_churn(base / "data", rows=120, files=1)
    env = {k: v for k, v in os.environ.items() if k not in OURS}
    env.update(DATA_ROOT=str(data), TARGET_COLUMN="churned", PIPELINE_ROOT_URI=str(base / "root"), EPOCHS="1")
    uri = f"sqlite:///{base}/elsewhere/registry.db"
    (base / "elsewhere").mkdir()
    done = _ml8s({**env, "MLFLOW_TRACKING_URI": uri}, "run")
    assert done.returncode == 0, done.stderr
    manifest = json.loads(done.stdout)
    assert manifest["mlflow"]["tracking_uri"] == uri
    assert not (base / "root" / "mlflow.db").exists()  # the root's default database is not the registry
    return env, manifest["run_id"], uri


def test_verify_uses_the_manifests_uri_with_the_variable_unset(registered: tuple[dict[str, str], str, str]) -> None:
    env, run_id, uri = registered
    done = _ml8s(env, "verify", run_id)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "PASS  mlflow" in done.stdout and f"({uri}, from manifest.json)" in done.stdout
    assert not (Path(env["PIPELINE_ROOT_URI"]) / "mlflow.db").exists()  # nothing created where it was not


def test_a_wrong_variable_is_ignored_and_said_so(registered: tuple[dict[str, str], str, str], tmp_path: Path) -> None:
    env, run_id, uri = registered
    bogus = f"sqlite:///{tmp_path}/no/such/mlflow.db"
    report = verify_run(env["PIPELINE_ROOT_URI"], run_id, {**env, "MLFLOW_TRACKING_URI": bogus})
    assert report.passed, report.failed()
    (mlflow,) = [c for c in report.checks if c.name == "mlflow"]
    assert mlflow.reason.endswith(f"({uri}, from manifest.json)")
    assert f"MLFLOW_TRACKING_URI={bogus} ignored: manifest.json records the registry" in mlflow.details
    assert not (tmp_path / "no").exists()


def test_the_explicit_flag_overrides_the_manifest(registered: tuple[dict[str, str], str, str], tmp_path: Path) -> None:
    env, run_id, uri = registered
    bogus = f"sqlite:///{tmp_path}/moved.db"
    done = _ml8s(env, "verify", run_id, "--mlflow-tracking-uri", bogus)
    assert done.returncode == 1 and "FAIL  mlflow" in done.stdout
    assert f"does not exist (tracking URI from --mlflow-tracking-uri; manifest.json records {uri})" in done.stdout
    assert not (tmp_path / "moved.db").exists()


def _ref(tracking_uri: str) -> MlflowRef:
    return MlflowRef(
        tracking_uri=tracking_uri,
        experiment_name="ml8s",
        experiment_id="1",
        mlflow_run_id="r",
        model_name="m",
        model_version="1",
    )


def test_the_order_of_choice() -> None:
    recorded, env = _ref("http://mlflow:5000"), {"MLFLOW_TRACKING_URI": "http://other:5000"}
    assert choose_tracking_uri(recorded, env, "file:///srv/root").model_dump() == {
        "uri": "http://mlflow:5000",
        "source": "manifest.json",
        "ignored": "http://other:5000",
    }
    assert choose_tracking_uri(recorded, env, "file:///srv/root", " http://moved:5000 ").uri == "http://moved:5000"
    with_password = {"MLFLOW_TRACKING_URI": "http://bot:pw@mlflow:5000"}
    chosen = choose_tracking_uri(recorded, with_password, "file:///srv/root")
    assert (chosen.uri, chosen.source) == (
        "http://bot:pw@mlflow:5000",
        "manifest.json (credentials from MLFLOW_TRACKING_URI)",
    )
    # A manifest that records no URI (hand-made or older): the variable, else the local root's default.
    older = _ref("")
    assert choose_tracking_uri(older, env, "file:///srv/root").model_dump() == {
        "uri": "http://other:5000",
        "source": "MLFLOW_TRACKING_URI (manifest.json records none)",
        "ignored": "",
    }
    assert choose_tracking_uri(older, {}, "file:///srv/root").uri == "sqlite:////srv/root/mlflow.db"


@pytest.mark.parametrize(
    ("uri", "public"),
    [
        ("https://bot:s3cret@mlflow.example.com:5000/", "https://mlflow.example.com:5000/"),
        ("http://token@[::1]:5000/x?y=1", "http://[::1]:5000/x?y=1"),
        ("HTTP://a:b@c@host/", "http://host/"),
        ("postgresql://ml:pw@db:5432/mlflow", "postgresql://ml@db:5432/mlflow"),
        ("mysql://ml@db/mlflow", "mysql://ml@db/mlflow"),
        ("sqlite:////srv/root/mlflow.db", "sqlite:////srv/root/mlflow.db"),
        ("http://mlflow:5000", "http://mlflow:5000"),
        ("databricks", "databricks"),
    ],
)
def test_a_manifest_never_records_a_password(uri: str, public: str) -> None:
    assert public_tracking_uri(uri) == public


def test_a_hung_registry_fails_the_mlflow_check_within_the_bound(
    registered: tuple[dict[str, str], str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """MLflow's own client would wait 120 s per request and retry seven times: the verifier asks first."""
    env, run_id, _ = registered
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "0.5")  # MLflow's variable bounds the question too
    with socket.create_server(("127.0.0.1", 0)) as hung:  # accepts, never answers
        hung.listen(8)
        uri = f"http://bot:pw@127.0.0.1:{hung.getsockname()[1]}"
        report = verify_run(env["PIPELINE_ROOT_URI"], run_id, env, tracking_uri=uri)
    (mlflow,) = [c for c in report.checks if c.name == "mlflow"]
    assert not report.passed and mlflow.status == "FAIL", mlflow
    public = uri.replace("bot:pw@", "")
    assert f"MLflow at {public}: no answer to GET {public}/health within 0.5 s (TimeoutError" in mlflow.reason
    assert "pw" not in mlflow.reason + "".join(mlflow.details)


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        (
            "MLflow at https://bot:s3cret@mlflow:5000/ failed; postgresql://ml:pw@db/m too",
            "MLflow at https://mlflow:5000/ failed; postgresql://ml@db/m too",
        ),
        (
            "API request to http://token@[::1]:5000/api/2.0/x failed",
            "API request to http://[::1]:5000/api/2.0/x failed",
        ),
        ("HTTP://a:b@c@host/x", "HTTP://host/x"),  # an unencoded "@" in the password
        ("s3://bucket/key@v2 and sqlite:////srv/x@y.db and git@host:repo", None),  # no userinfo: unchanged
    ],
)
def test_no_error_or_log_line_carries_a_password(text: str, shown: str | None) -> None:
    shown = text if shown is None else shown
    assert without_credentials(text) == shown
    assert str(RegistryError(text)) == f"REGISTRY_ERROR: {shown}" and RegistryError(text).message == shown
    record = logging.LogRecord("ml8s", logging.WARNING, __file__, 1, "%s", (text,), None)
    assert HumanFormatter().format(record).endswith(f" {shown}")


def test_a_registry_whose_database_driver_is_not_installed_is_a_named_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """A postgresql:// registry where psycopg is not installed: MLflow's client raised ModuleNotFoundError, and
    `ml8s verify`, `ml8s audit bundle` (reading the published anchor) and `ml8s runs list` each ended in an
    INTERNAL_ERROR. Each is now a RegistryError naming the module (the mlflow check FAILs; runs list says why the
    registration is unconfirmed). None in sys.modules makes the import fail whatever is installed."""
    from ml8s.audit.anchor_tags import read_published
    from ml8s.audit.mlflow_refs import read_view
    from ml8s.ops.registrations import registration_states

    monkeypatch.setitem(sys.modules, "psycopg", None)
    uri = "postgresql://ml@127.0.0.1:9/mlflow"
    said = "the module 'psycopg', which its URI's database driver needs, is not installed"
    with pytest.raises(RegistryError, match=said):
        read_view(uri, _ref(uri), "f" * 64)
    with pytest.raises(RegistryError, match=said):
        read_published(uri, "ml8s-model")
    ref = {"tracking_uri": uri, "model_name": "ml8s-model", "model_version": "1", "mlflow_run_id": "0" * 32}
    (state,) = registration_states({"a" * 12: ref}, {}).values()
    assert state.startswith("unconfirmed: ") and said in state
