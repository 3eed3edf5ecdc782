"""ML8S_MLFLOW_SCHEMA_TEMPLATE (issue 22): a new local MLflow database is a copy of an empty template, used only
when it is complete, at alembic's head revision of this MLflow, and empty; anything else is refused by name."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import sqlalchemy

import ml8s.registry.schema as schema
from ml8s.errors import RegistryError
from ml8s.registry.schema import TEMPLATE_ENV, create_template, ensure_schema


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("template") / "empty.db"
    create_template(str(path))
    return path


def _execute(path: Path, *statements: str) -> None:
    engine = sqlalchemy.create_engine(f"sqlite:///{path}")
    with engine.begin() as connection:
        for statement in statements:
            connection.execute(sqlalchemy.text(statement))
    engine.dispose()


def test_the_session_uses_a_template(mlflow_schema_template: Path) -> None:
    """conftest makes one and exports it, so ml8s processes started by tests copy it too."""
    import os

    assert os.environ[TEMPLATE_ENV] == str(mlflow_schema_template) and mlflow_schema_template.is_file()


def test_a_new_database_is_a_checked_copy_and_runs_no_migration(
    template: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = template.read_bytes()
    monkeypatch.setenv(TEMPLATE_ENV, str(template))
    monkeypatch.setattr(schema, "_create", lambda path, uri: pytest.fail("migrations ran despite the template"))
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    ensure_schema(uri)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mlflow.db"]  # no temporary file left beside it
    assert (tmp_path / "mlflow.db").read_bytes() == template.read_bytes()
    ensure_schema(uri)  # now present and complete: checked, left alone
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    client.create_registered_model("m")
    assert [m.name for m in client.search_registered_models()] == ["m"]
    assert template.read_bytes() == before  # the template itself is never opened for writing


@pytest.mark.parametrize(
    ("damage", "named"),
    [
        ("UPDATE alembic_version SET version_num = 'c48cb773bb87'", "schema revision c48cb773bb87, expected"),
        ("DROP TABLE scheduler_leases", "missing tables ['scheduler_leases']"),
        (
            "INSERT INTO experiments (experiment_id, name, lifecycle_stage) VALUES (7, 'used', 'active')",
            "not empty (1 experiments, 0 registered_models, 0 runs)",
        ),
        ("INSERT INTO registered_models (name) VALUES ('used')", "not empty (0 experiments, 1 registered_models"),
    ],
)
def test_a_stale_damaged_or_used_template_is_refused(
    template: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, damage: str, named: str
) -> None:
    bad = tmp_path / "bad.db"
    shutil.copyfile(template, bad)
    _execute(bad, damage)
    monkeypatch.setenv(TEMPLATE_ENV, str(bad))
    root = tmp_path / "root"
    root.mkdir()
    with pytest.raises(RegistryError, match=f"{TEMPLATE_ENV}=.*bad.db cannot create") as caught:
        ensure_schema(f"sqlite:///{root}/mlflow.db")
    assert named in str(caught.value) and "\n" not in str(caught.value)
    assert list(root.iterdir()) == []  # nothing created, no temporary file left


def test_a_missing_or_garbage_template_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "root"
    root.mkdir()
    monkeypatch.setenv(TEMPLATE_ENV, str(tmp_path / "absent.db"))
    with pytest.raises(RegistryError, match="cannot copy it to create"):
        ensure_schema(f"sqlite:///{root}/mlflow.db")
    (tmp_path / "garbage.db").write_bytes(b"not sqlite" * 500)
    monkeypatch.setenv(TEMPLATE_ENV, str(tmp_path / "garbage.db"))
    with pytest.raises(RegistryError, match="not a readable sqlite database"):
        ensure_schema(f"sqlite:///{root}/mlflow.db")
    assert list(root.iterdir()) == []


def test_a_missing_template_fails_at_bootstrap_not_after_training(
    template: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It used to be found when registration copied it, after the whole run had trained and written its files."""
    from ml8s.errors import ConfigError
    from ml8s.identity.settings import PlatformSettings
    from ml8s.pipeline import preflight

    assert preflight._TEMPLATE_ENV == TEMPLATE_ENV
    settings = PlatformSettings.load({"PIPELINE_ROOT_URI": str(tmp_path / "root")})
    for bad, says in ((tmp_path / "absent.db", "does not exist"), (tmp_path, "is a directory")):
        monkeypatch.setenv(TEMPLATE_ENV, str(bad))
        with pytest.raises(ConfigError, match=f"^CONFIG_ERROR: {TEMPLATE_ENV}=.* {says}; expected an empty MLflow"):
            preflight.check_writable_root(settings)
    (tmp_path / "root").mkdir()
    (tmp_path / "root" / "mlflow.db").touch()  # an empty file is a new database: made from the template too
    with pytest.raises(ConfigError, match="is a directory"):
        preflight.check_writable_root(settings)
    shutil.copyfile(template, tmp_path / "root" / "mlflow.db")  # a database already there needs no template
    preflight.check_writable_root(settings)
    monkeypatch.setenv(TEMPLATE_ENV, str(template))
    (tmp_path / "root" / "mlflow.db").unlink()
    preflight.check_writable_root(settings)
