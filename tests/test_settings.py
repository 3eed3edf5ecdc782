"""One settings resolver: one priority for every variable, MLflow required only where it is used, and the
workflow inputs kept in step with the user-level variables."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from conftest import write_small_churn
from forked_cli import forked_ml8s
from pydantic import ValidationError
from s3_servers import S3Endpoint

from ml8s.audit.chain_check import chain_name
from ml8s.audit.mlflow_refs import tracking_uri
from ml8s.errors import ConfigError
from ml8s.identity.priority import explicit_or_env
from ml8s.identity.settings import PLATFORM_VARIABLES, WORKFLOW_PLATFORM_INPUTS, PlatformSettings
from ml8s.identity.variables import USER_VARIABLES, raw_values_from_env
from ml8s.ops.tmp_cleanup import retention_days
from ml8s.pipeline.bootstrap import bootstrap

S3_ROOT = {"PIPELINE_ROOT_URI": "s3://ml8s-runs/team/"}


@pytest.mark.parametrize(
    ("explicit", "env", "expected"),
    [
        ({"epochs": "3"}, {"EPOCHS": "5"}, "3"),
        ({"epochs": " 3 "}, {}, "3"),
        ({"epochs": ""}, {"EPOCHS": "5"}, "5"),
        ({"epochs": "  "}, {"EPOCHS": " 5\n"}, "5"),
        ({}, {"EPOCHS": "5"}, "5"),
        ({}, {"EPOCHS": ""}, None),
        ({"epochs": ""}, {"EPOCHS": " "}, None),
        ({"EPOCHS": "3"}, {}, None),  # explicit inputs are keyed by the lower-case name only
        ({}, {"epochs": "5"}, None),  # the environment by the variable's name only
    ],
)
def test_the_one_priority(explicit: dict[str, str], env: dict[str, str], expected: str | None) -> None:
    assert explicit_or_env("EPOCHS", env, explicit) == expected


def test_user_variables_and_settings_share_the_priority() -> None:
    env = {"EPOCHS": "5", "TEST_SIZE": "", "CHAIN_NAME": "from-env", "MLFLOW_MODEL_NAME": ""}
    explicit = {"epochs": "", "random_seed": "7", "chain_name": " ", "mlflow_experiment_prefix": "exp"}
    raw = raw_values_from_env(env, explicit)
    assert (raw["EPOCHS"], raw["RANDOM_SEED"], raw["TEST_SIZE"], raw["DATA_ROOT"]) == ("5", "7", None, None)
    settings = PlatformSettings.load(env, explicit)
    assert (settings.chain_name, settings.mlflow_experiment_prefix, settings.mlflow_model_name) == (
        "from-env",
        "exp",
        "ml8s-model",
    )


def test_defaults_live_on_the_fields(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    settings = PlatformSettings.load({})
    assert settings.model_dump() == {
        "pipeline_root_uri": f"file://{tmp_path}/pipeline_root",
        "force_rerun": False,
        "strict_data_identity": True,
        "mlflow_tracking_uri": f"sqlite:///{tmp_path}/pipeline_root/mlflow.db",
        "mlflow_experiment_prefix": "ml8s",
        "mlflow_model_name": "ml8s-model",
        "chain_name": "ml8s-model",
        "chain_require_signed": False,
        "chain_trust_root": "",
        "image_version": "dev",
        "tmp_retention_days": 7,
        "warm_start_root_uri": "",
        "stale_parent_policy": "retrain",
        "drift_policy": "warn",
        "data_quiet_seconds": 0,
        "promote_min_delta": 0.0,
        "delta_base_interval": 10,
        "alias_deadline_seconds": 30,
    }
    assert sorted(PLATFORM_VARIABLES) == sorted([name.upper() for name in settings.model_dump()] + ["ML8S_WORKER_ID"])
    assert PLATFORM_VARIABLES["TMP_RETENTION_DAYS"].endswith("; default 7")


def test_explicit_and_environment_values() -> None:
    env = {
        "PIPELINE_ROOT_URI": "/srv/env-root/",
        "FORCE_RERUN": "YES",
        "STRICT_DATA_IDENTITY": "0",
        "MLFLOW_MODEL_NAME": "churn",
        "TMP_RETENTION_DAYS": " 30 ",
        "IMAGE_VERSION": "1.2.3",
    }
    settings = PlatformSettings.load(env, {"pipeline_root_uri": "/srv/input-root", "force_rerun": "false"})
    assert settings.pipeline_root_uri == "file:///srv/input-root"
    assert settings.mlflow_tracking_uri == "sqlite:////srv/input-root/mlflow.db"
    assert (settings.force_rerun, settings.strict_data_identity) == (False, False)
    assert (settings.mlflow_model_name, settings.chain_name, settings.image_version) == ("churn", "churn", "1.2.3")
    assert settings.tmp_retention_days == 30


def test_load_reads_os_environ_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHAIN_NAME", "from-process")
    monkeypatch.setenv("PIPELINE_ROOT_URI", "/srv/root")
    assert PlatformSettings.load().chain_name == "from-process"


def test_building_or_reading_back_never_consults_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    written = PlatformSettings.load({"PIPELINE_ROOT_URI": "/srv/root"})
    monkeypatch.setenv("CHAIN_NAME", "other")
    monkeypatch.setenv("FORCE_RERUN", "true")
    monkeypatch.setenv("PIPELINE_ROOT_URI", "/elsewhere")
    assert PlatformSettings.model_validate_json(written.model_dump_json()) == written
    assert PlatformSettings(pipeline_root_uri="/srv/root") == written
    assert PlatformSettings().chain_name == "ml8s-model"


def test_the_class_is_frozen_and_closed() -> None:
    settings = PlatformSettings.load({"PIPELINE_ROOT_URI": "/srv/root"})
    with pytest.raises(ValidationError):
        settings.chain_name = "x"  # type: ignore[misc]
    with pytest.raises(ValidationError):
        PlatformSettings.model_validate({"pipeline_root_uri": "/srv/root", "colour": "blue"})
    with pytest.raises(ValidationError):
        PlatformSettings.model_validate({"pipeline_root_uri": "/srv/root", "force_rerun": 2})


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"FORCE_RERUN": "perhaps"}, "FORCE_RERUN='perhaps' is invalid; expected true or false"),
        ({"STRICT_DATA_IDENTITY": "on"}, "STRICT_DATA_IDENTITY='on' is invalid; expected true or false"),
        ({"TMP_RETENTION_DAYS": "-1"}, "TMP_RETENTION_DAYS='-1' is invalid; expected a whole number of days"),
        ({"TMP_RETENTION_DAYS": "1.5"}, "TMP_RETENTION_DAYS='1.5' is invalid; expected a whole number of days"),
        ({"TMP_RETENTION_DAYS": "9" * 400}, "TMP_RETENTION_DAYS has 400 digits; expected a whole number of days of"),
        ({"DELTA_BASE_INTERVAL": "9" * 5000}, "DELTA_BASE_INTERVAL has 5,000 digits; expected a whole number >= 1 of"),
        ({"DELTA_BASE_INTERVAL": "0"}, "DELTA_BASE_INTERVAL='0' is invalid; expected a whole number >= 1"),
        (  # MLflow refused it at registration, after the run had trained and written its artifacts
            {"MLFLOW_EXPERIMENT_PREFIX": "e" * 501},
            "MLFLOW_EXPERIMENT_PREFIX (or MLFLOW_EXPERIMENT_NAME) has 501 characters; expected an MLflow experiment",
        ),
        (
            {"MLFLOW_EXPERIMENT_NAME": "e" * 600},
            "MLFLOW_EXPERIMENT_PREFIX (or MLFLOW_EXPERIMENT_NAME) has 600 characters",
        ),
        # a newline split the run's one-line summary; an escape sequence reached the terminal (stderr)
        ({"MLFLOW_MODEL_NAME": "churn\nv2"}, "MLFLOW_MODEL_NAME='churn\\nv2' is invalid: it holds a control character"),
        ({"MLFLOW_MODEL_NAME": "a\x1b[2Jb"}, "MLFLOW_MODEL_NAME='a\\x1b[2Jb' is invalid: it holds a control character"),
        ({"MLFLOW_MODEL_NAME": "a\tb"}, "it holds a control character"),
        ({"MLFLOW_EXPERIMENT_PREFIX": "e\rx"}, "MLFLOW_EXPERIMENT_PREFIX (or MLFLOW_EXPERIMENT_NAME)='e\\rx' holds"),
        ({"PIPELINE_ROOT_URI": "gs://b/x"}, "PIPELINE_ROOT_URI='gs://b/x' has an unsupported scheme"),
        ({"PIPELINE_ROOT_URI": "s3:/runs"}, "PIPELINE_ROOT_URI='s3:/runs' is not an S3 URI"),
        ({"PIPELINE_ROOT_URI": "~/runs"}, "expected an absolute or relative path; ~ is not expanded"),
    ],
)
def test_malformed_settings_name_the_variable(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=r"^CONFIG_ERROR: ") as caught:
        PlatformSettings.load(env)
    assert message in str(caught.value)


@pytest.mark.parametrize("name", ["TARGET_COLUMN", "EXCLUDE_COLUMNS", "DATA_ROOT", "PIPELINE_ROOT_URI"])
def test_a_value_with_bytes_that_are_not_utf8_is_a_config_error(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`TARGET_COLUMN=$'\\xff'` reaches Python as a lone surrogate: it used to be an INTERNAL_ERROR from the
    identity's hashing (a user value) or a REGISTRY_ERROR after training (a platform one)."""
    from ml8s.cli.main import main

    data = write_small_churn(tmp_path / "data", rows=40, files=1)
    env = {"DATA_ROOT": str(data), "TARGET_COLUMN": "churned", "PIPELINE_ROOT_URI": str(tmp_path / "root")}
    env[name] = env.get(name, "") + "caf\udce9"  # "café" written in Latin-1
    with pytest.raises(ConfigError, match=rf"^CONFIG_ERROR: {name}='.*' holds bytes that are not UTF-8"):
        bootstrap(env)
    assert not (tmp_path / "root").exists()
    if name == "PIPELINE_ROOT_URI":  # read by --root's commands when --root is absent
        monkeypatch.setenv(name, env[name])
        assert main(["runs", "list"]) == 1
        assert capsys.readouterr().err.startswith(f"ml8s: CONFIG_ERROR: {name}='")


def test_an_s3_root_loads_without_mlflow() -> None:
    settings = PlatformSettings.load(S3_ROOT)
    assert (settings.pipeline_root_uri, settings.mlflow_tracking_uri) == ("s3://ml8s-runs/team", "")
    # The tools that never talk to MLflow resolve what they need from the same settings.
    assert chain_name({**S3_ROOT, "MLFLOW_MODEL_NAME": "churn"}) == "churn"
    assert retention_days({**S3_ROOT, "TMP_RETENTION_DAYS": "3"}) == 3.0
    with pytest.raises(ConfigError, match="MLFLOW_TRACKING_URI is required when PIPELINE_ROOT_URI is not local"):
        settings.mlflow_tracking_uri_for_registry()
    with pytest.raises(ConfigError, match="MLFLOW_TRACKING_URI is required"):
        tracking_uri({}, "s3://ml8s-runs/team")
    explicit = PlatformSettings.load({**S3_ROOT, "MLFLOW_TRACKING_URI": "http://mlflow:5000"})
    assert explicit.mlflow_tracking_uri_for_registry() == "http://mlflow:5000"
    assert tracking_uri({"MLFLOW_TRACKING_URI": "http://m"}, "s3://ml8s-runs/team") == "http://m"
    assert tracking_uri({}, "file:///srv/root") == "sqlite:////srv/root/mlflow.db"


def test_a_training_run_needs_mlflow_before_it_reads_data(tmp_path: Path) -> None:
    # DATA_ROOT does not exist: reaching the data would be a DataError, so the ConfigError came first.
    env = {**S3_ROOT, "DATA_ROOT": str(tmp_path / "absent"), "TARGET_COLUMN": "y"}
    with pytest.raises(ConfigError, match="MLFLOW_TRACKING_URI is required"):
        bootstrap(env)


@pytest.mark.parametrize(
    ("root", "tracking", "variable"),
    [
        ("data/root", "", "PIPELINE_ROOT_URI"),
        ("data", "", "PIPELINE_ROOT_URI"),
        ("link/root", "", "PIPELINE_ROOT_URI"),  # DATA_ROOT reached through a link
        ("runs", "sqlite:///{tmp}/data/mlflow.db", "MLFLOW_TRACKING_URI"),
    ],
)
def test_a_run_writing_under_data_root_fails_before_any_write(
    tmp_path: Path, root: str, tracking: str, variable: str
) -> None:
    """The first run succeeded; the next fingerprinted the first one's files as data (DATA_ERROR on its lock
    file; a .parquet artifact would have been read as data)."""
    data = write_small_churn(tmp_path / "data")
    (tmp_path / "link").symlink_to(data)
    env = {"DATA_ROOT": str(data), "TARGET_COLUMN": "churned", "PIPELINE_ROOT_URI": str(tmp_path / root)}
    if tracking:
        env["MLFLOW_TRACKING_URI"] = tracking.format(tmp=tmp_path)
    with pytest.raises(
        ConfigError, match=rf"^CONFIG_ERROR: {variable}=\S+ lies under DATA_ROOT=file://{tmp_path}/data, "
    ):
        bootstrap(env)
    assert sorted(p.name for p in data.iterdir()) == ["part-000.csv", "part-001.csv"]
    ok = {**env, "PIPELINE_ROOT_URI": str(tmp_path / "data-runs"), "MLFLOW_TRACKING_URI": ""}
    assert bootstrap(ok).artifact_root.startswith(f"file://{tmp_path}/data-runs/")  # a sibling, not under it


@pytest.mark.parametrize(
    ("uri", "problem"),
    [
        ("sqlite://", "is an in-memory SQLite database"),
        ("sqlite:///", "is an in-memory SQLite database"),
        ("sqlite:///:memory:", "is an in-memory SQLite database"),
        ("sqlite:///file::memory:?uri=true", "is an in-memory SQLite database"),
        ("sqlite:///db?mode=memory&uri=true", "is an in-memory SQLite database"),
        ("ftp://host/x", "has scheme 'ftp', for which MLflow has no model registry"),
        ("s3://bucket/mlruns", "has scheme 's3', for which MLflow has no model registry"),
        ("./mlruns", "is MLflow's file store, which this MLflow refuses unless MLFLOW_ALLOW_FILE_STORE=true"),
        ("file:///srv/mlruns", "is MLflow's file store"),
        # SQLAlchemy found no dialect "SQLITE" only at registration, after the run had trained
        ("SQLITE:////srv/mlflow.db", "has scheme 'SQLITE'; a database URL's scheme is lower-case ('sqlite')"),
        ("PostgreSQL://ml@db/mlflow", "has scheme 'PostgreSQL'; a database URL's scheme is lower-case"),
        # an INTERNAL_ERROR (urlsplit's ValueError) once the run asked the server, or an unanswered server
        ("https://[::1", "is no URL (Invalid IPv6 URL)"),
        ("http://", "names no host"),
        ("https:///mlflow", "names no host"),
        ("http://mlflow:99999", "is no URL (Port out of range"),
        ("http://mlflow:abc/", "is no URL (Port could not be cast"),
    ],
)
def test_a_tracking_uri_that_would_lose_or_refuse_the_model_fails_at_load(
    uri: str, problem: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    with pytest.raises(ConfigError, match=r"^CONFIG_ERROR: MLFLOW_TRACKING_URI=") as caught:
        PlatformSettings.load({**S3_ROOT, "MLFLOW_TRACKING_URI": uri})
    assert problem in str(caught.value) and "expected sqlite:///PATH" in str(caught.value)


@pytest.mark.parametrize(
    "uri",
    [
        "sqlite:////srv/root/mlflow.db",
        "sqlite:///mlflow.db",
        "http://mlflow:5000",
        "https://bot:pw@mlflow.example",
        "https://[::1]:5443/mlflow",
        "postgresql+psycopg2://u@db/mlflow",
        "mysql://u@db/mlflow",
        "databricks",
        "databricks://profile",
        "databricks-uc",
    ],
)
def test_tracking_uris_mlflow_keeps_a_registry_at_load_as_given(uri: str) -> None:
    assert PlatformSettings.load({**S3_ROOT, "MLFLOW_TRACKING_URI": uri}).mlflow_tracking_uri == uri


def test_the_file_store_loads_where_mlflow_allows_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow's own opt-in, read from the process
    assert PlatformSettings.load({**S3_ROOT, "MLFLOW_TRACKING_URI": "./mlruns"}).mlflow_tracking_uri == "./mlruns"


def test_a_run_to_an_in_memory_registry_fails_before_any_write(tmp_path: Path) -> None:
    """MLflow itself accepts ``sqlite://`` and loses the model when the process ends; the run claimed v1."""
    data = write_small_churn(tmp_path / "data")
    env = {k: v for k, v in os.environ.items() if k not in ("FORCE_RERUN", "CHAIN_NAME", "MLFLOW_MODEL_NAME")}
    env.update(DATA_ROOT=str(data), TARGET_COLUMN="churned", PIPELINE_ROOT_URI=str(tmp_path / "root"))
    env.update(MLFLOW_TRACKING_URI="sqlite:///")
    done = forked_ml8s(["run"], env, timeout=300)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert (
        done.stderr.strip()
        .splitlines()[-1]
        .startswith("ml8s: CONFIG_ERROR: MLFLOW_TRACKING_URI='sqlite:///' is an in-memory SQLite database")
    ), done.stderr[-2000:]
    assert not (tmp_path / "root").exists()
    args = ["verify", "0123456789ab", "--root", str(tmp_path), "--mlflow-tracking-uri", "sqlite://"]
    verify = forked_ml8s(args, env, timeout=120)
    assert verify.returncode == 2 and "is an in-memory SQLite database" in verify.stderr, verify.stderr


def test_workflow_inputs_match_the_variables() -> None:
    """Adding a user variable without its workflow input (or the reverse) fails here."""
    from tasks.bootstrap import bootstrap_run
    from workflows.training import training_pipeline

    expected = sorted([name.lower() for name in USER_VARIABLES] + list(WORKFLOW_PLATFORM_INPUTS))
    assert sorted(training_pipeline.python_interface.inputs) == expected
    assert sorted(bootstrap_run.python_interface.inputs) == expected
    assert set(WORKFLOW_PLATFORM_INPUTS) <= set(PlatformSettings.model_fields)
    assert not set(WORKFLOW_PLATFORM_INPUTS) & {name.lower() for name in USER_VARIABLES}


def test_tools_that_never_use_mlflow_run_on_an_s3_root_without_it(moto_server: S3Endpoint) -> None:
    drop = ("MLFLOW_TRACKING_URI", "CHAIN_NAME", "MLFLOW_MODEL_NAME", "TMP_RETENTION_DAYS")
    env = {k: v for k, v in os.environ.items() if k not in drop and not k.startswith(("AWS_", "FLYTE_AWS_"))}
    env.update(moto_server.env(), PIPELINE_ROOT_URI=f"s3://{moto_server.make_bucket()}/runs")
    for args in (["chain", "init"], ["chain", "log"], ["tmp-cleanup", "--dry-run"], ["runs", "list"]):
        done = forked_ml8s(args, env, timeout=120)
        assert done.returncode == 0, f"ml8s {' '.join(args)}: {done.stderr}"
    assert forked_ml8s(["chain", "log"], env).stdout.startswith("v0 ")


HUGE = "\x1b[2J" + "x" * 100_000  # a terminal escape, then a value no message should carry whole


@pytest.mark.parametrize(
    "name",
    [
        "PIPELINE_ROOT_URI",
        "WARM_START_ROOT_URI",
        "MLFLOW_TRACKING_URI",
        "MLFLOW_MODEL_NAME",
        "CHAIN_NAME",
        "FORCE_RERUN",
        "DRIFT_POLICY",
        "PROMOTE_MIN_DELTA",
        "TMP_RETENTION_DAYS",
        "DATA_ROOT",
        "MODEL_TYPE",
        "TEST_SIZE",
        "EPOCHS",
        "WARM_START",
    ],
)
def test_a_huge_value_is_quoted_as_a_bounded_escaped_excerpt(name: str) -> None:
    """A 100 KB variable was echoed whole in its CONFIG_ERROR (one line of 100 KB in every log and terminal)."""
    from ml8s.identity.params import validate_params
    from ml8s.identity.variables import canonical_config

    env = {"DATA_ROOT": "/data", "TARGET_COLUMN": "y", name: "gs://" + HUGE if "_ROOT" in name else HUGE}
    with pytest.raises(ConfigError) as caught:
        validate_params(canonical_config(env)) if name in USER_VARIABLES else PlatformSettings.load(env)
    message = str(caught.value)
    assert len(message) < 1_000 and "\x1b" not in message, message[:300]
    assert f"{name}=" in message and "\\x1b[2J" in message and "characters)" in message, message


def test_a_long_root_given_on_the_command_line_is_cut_and_a_password_before_the_cut_is_not_shown(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from ml8s.cli.main import main

    monkeypatch.delenv("PIPELINE_ROOT_URI", raising=False)
    assert main(["runs", "list", "--root", "gs://" + "b" * 10_000]) == 1
    err = capsys.readouterr().err
    assert err.startswith("ml8s: CONFIG_ERROR: --root='gs://bbb") and "… (10,005 characters)" in err, err[:300]
    assert len(err) < 500
    # the "@" that ends the password lies past the cut: the credentials go before the cut, not after it
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "mongodb://bot:s3cret" + "k" * 300 + "@db/mlflow")
    with pytest.raises(ConfigError) as caught:
        PlatformSettings.load()
    assert "s3cret" not in str(caught.value) and "mongodb://bot@db/mlflow" in str(caught.value)
