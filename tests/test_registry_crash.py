"""A process killed while MLflow's sqlite schema is being created never wedges the registry (defect 1).

The kill lands at a different point of the creation in each trial; after every trial the database
file is either absent or complete, and a normal ``ml8s run`` afterwards registers and verifies. A
half-made schema left by an older version is named with the exact fix, never a raw traceback.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import make_context, write_small_churn
from forked_cli import forked_ml8s
from mlflow_support import train_run

from ml8s.errors import RegistryError, RegistrySchemaError
from ml8s.registry.registration import register
from ml8s.registry.schema import TEMPLATE_ENV, ensure_schema

# The schema creation has begun: MLflow's own log line (creation in place), or ml8s's (in a temporary file).
SENTINELS = ("Creating initial MLflow database tables", "creating the MLflow schema")

# The real registration path in a child: bootstrap, then register (the first one creates the schema).
CHILD = """
import sys
from ml8s import log
from ml8s.pipeline.bootstrap import bootstrap
from ml8s.registry.registration import register
from ml8s.registry.schema import ensure_schema
data, root = sys.argv[1:3]
log.configure("INFO")
ctx = bootstrap({"DATA_ROOT": data, "TARGET_COLUMN": "churned", "PIPELINE_ROOT_URI": root, "EPOCHS": "1"})
register(ctx, ctx.open_store())
"""


@pytest.fixture(autouse=True)
def _migrations(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests are about creating the schema itself: no copy of the session's template."""
    monkeypatch.delenv(TEMPLATE_ENV, raising=False)


def _env(data: Path, root: Path) -> dict[str, str]:
    drop = ("FORCE_RERUN", "MLFLOW_TRACKING_URI", TEMPLATE_ENV)
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env.update(DATA_ROOT=str(data), TARGET_COLUMN="churned", PIPELINE_ROOT_URI=str(root), EPOCHS="1")
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parents[1]), env.get("PYTHONPATH", "")])
    return env


def _kill_during_creation(data: Path, root: Path, delay_s: float) -> bool:
    """Start a registration, SIGKILL it ``delay_s`` after the schema creation began; True if it was killed."""
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(data), str(root)],
        env=_env(data, root),
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
    )
    assert child.stderr is not None
    try:
        for line in child.stderr:
            if any(sentinel in line for sentinel in SENTINELS):
                time.sleep(delay_s)
                child.send_signal(signal.SIGKILL)
                break
    finally:
        child.wait(timeout=120)
    return child.returncode == -signal.SIGKILL


def _schema_state(db: Path) -> str:
    """``absent``, ``complete`` or ``partial`` (tables or migrations missing)."""
    if not db.exists():
        return "absent"
    import sqlalchemy
    from mlflow.store.db.utils import _all_tables_exist, _get_latest_schema_revision, _get_schema_version

    engine = sqlalchemy.create_engine(f"sqlite:///{db}")
    try:
        done = _all_tables_exist(engine) and _get_schema_version(engine) == _get_latest_schema_revision()
    finally:
        engine.dispose()
    return "complete" if done else "partial"


def test_kill_during_schema_creation_never_wedges_the_registry(tmp_path: Path) -> None:
    data = write_small_churn(tmp_path / "data", rows=120, files=1)
    root = tmp_path / "root"
    root.mkdir()
    states = []
    for delay_s in (0.1, 1.0):  # in the initial tables, then in the migrations (creation takes seconds)
        killed = _kill_during_creation(data, root, delay_s)
        state = _schema_state(root / "mlflow.db")
        states.append((delay_s, killed, state))
        assert state in ("absent", "complete"), states
    assert any(killed for _, killed, _ in states), f"no trial was killed mid-creation: {states}"

    env = _env(data, root)
    run = forked_ml8s(["run"], env, timeout=300)
    assert run.returncode == 0, run.stderr
    run_id = json.loads(run.stdout)["run_id"]
    verify = forked_ml8s(["verify", run_id], env, timeout=300)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert "PASS" in verify.stdout
    leftovers = sorted(p.name for p in root.iterdir() if p.name.startswith("mlflow.db") and p.name != "mlflow.db")
    assert leftovers == ["mlflow.db.lock"], leftovers


def _half_made(db: Path) -> None:
    """What an older ml8s left when killed inside MLflow's last migration: every table created, the
    revision not yet stamped (MLflow then reports an out-of-date schema and `mlflow db upgrade` fails)."""
    import sqlalchemy
    from alembic.script import ScriptDirectory
    from mlflow.store.db.utils import _get_alembic_config, _initialize_tables

    script = ScriptDirectory.from_config(_get_alembic_config(""))
    (head,) = script.get_heads()
    before_head = script.get_revision(head).down_revision
    engine = sqlalchemy.create_engine(f"sqlite:///{db}")
    sqlalchemy.event.listen(engine, "connect", lambda c, _: c.execute("PRAGMA synchronous=OFF"))  # test speed
    _initialize_tables(engine)
    with engine.begin() as connection:
        connection.execute(sqlalchemy.text("UPDATE alembic_version SET version_num = :v"), {"v": before_head})
    engine.dispose()


def test_half_made_schema_from_an_older_version_is_named_with_the_fix(tmp_path: Path) -> None:
    ctx = make_context(write_small_churn(tmp_path / "data", rows=60, files=1), tmp_path / "root")
    db = tmp_path / "root" / "mlflow.db"
    db.parent.mkdir(parents=True, exist_ok=True)
    _half_made(db)
    before = db.read_bytes()

    with pytest.raises(RegistrySchemaError) as caught:
        register(ctx, ctx.open_store())

    message = str(caught.value)
    assert isinstance(caught.value, RegistryError)
    assert message.startswith("REGISTRY_SCHEMA_INCOMPLETE: ")
    assert str(db) in message and "incomplete" in message
    assert "no runs and no registered models" in message
    assert f"mv {db} {db}.incomplete" in message
    assert "\n" not in message
    assert db.read_bytes() == before, "the database is left as found"

    os.replace(db, f"{db}.incomplete")  # the fix the message names
    train_run(ctx)  # registration logs the run's model: it needs the run's artifacts
    assert register(ctx, ctx.open_store()).model_version == "1"


@pytest.mark.parametrize("models", [0, 1])
def test_a_database_of_a_newer_mlflow_is_named_not_sent_to_upgrade(
    tmp_path: Path, mlflow_schema_template: Path, models: int
) -> None:
    """A schema revision this MLflow's migrations do not know: the message said `mlflow db upgrade` (which fails on
    it) or, empty, that a process was killed creating it and to move it aside."""
    import shutil
    import sqlite3

    db = tmp_path / "mlflow.db"
    shutil.copyfile(mlflow_schema_template, db)
    with contextlib.closing(sqlite3.connect(db)) as connection:
        connection.execute("UPDATE alembic_version SET version_num = 'ffffffffffff'")
        if models:
            connection.execute("INSERT INTO registered_models (name, creation_time) VALUES ('m', 0)")
        connection.commit()
    before = db.read_bytes()
    with pytest.raises(RegistrySchemaError) as caught:
        ensure_schema(f"sqlite:///{db}")
    message = str(caught.value)
    assert "was written by a newer MLflow than this one" in message and "revision ffffffffffff" in message
    assert f"holds 0 run(s) and {models} registered model(s)" in message
    assert "mlflow db upgrade sqlite" not in message and "killed" not in message and "\n" not in message
    assert db.read_bytes() == before


def test_missing_table_is_named_and_a_garbage_file_is_a_registry_error(tmp_path: Path) -> None:
    import sqlalchemy

    uri = f"sqlite:///{tmp_path}/mlflow.db"
    ensure_schema(uri)  # absent: created complete, nothing left beside it
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mlflow.db"]
    engine = sqlalchemy.create_engine(uri)
    with engine.begin() as connection:
        connection.execute(sqlalchemy.text("DROP TABLE scheduler_leases"))
    engine.dispose()
    with pytest.raises(RegistrySchemaError, match=r"missing tables \['scheduler_leases'\]"):
        ensure_schema(uri)

    (tmp_path / "mlflow.db").write_bytes(b"not sqlite at all" * 100)
    with pytest.raises(RegistryError, match="cannot be read as sqlite") as caught:
        ensure_schema(uri)
    assert "\n" not in str(caught.value)


_KILLED_WRITER = """
import os, sqlite3, sys
connection = sqlite3.connect(sys.argv[1], isolation_level=None)
connection.execute("PRAGMA journal_mode=DELETE")
connection.execute("PRAGMA cache_size=1")  # pages spill into the database file before the commit, as MLflow's do
connection.execute("BEGIN IMMEDIATE")
connection.execute("UPDATE experiments SET name = name || '-half-written'")
connection.execute("CREATE TABLE ml8s_killed_writer (x BLOB)")
for _ in range(20):
    connection.execute("INSERT INTO ml8s_killed_writer VALUES (zeroblob(20000))")
os.kill(os.getpid(), 9)  # mid-transaction: the rollback journal stays behind, hot
"""


def test_a_writer_killed_mid_transaction_leaves_no_wedge(tmp_path: Path) -> None:
    """MLflow killed inside a write leaves `mlflow.db-journal`; the schema check must let SQLite roll it back
    (a read-only open cannot, and every later run failed with "attempt to write a readonly database")."""
    data = write_small_churn(tmp_path / "data", rows=120, files=1)
    root = tmp_path / "root"
    env = _env(data, root)
    first = forked_ml8s(["run"], env, timeout=300)
    assert first.returncode == 0, first.stderr
    db = root / "mlflow.db"
    killed = subprocess.run([sys.executable, "-c", _KILLED_WRITER, str(db)], capture_output=True, timeout=60)
    assert killed.returncode == -signal.SIGKILL
    assert (root / "mlflow.db-journal").stat().st_size > 0, "the killed writer left no hot journal"

    second = forked_ml8s(["run"], {**env, "EPOCHS": "3"}, timeout=300)
    assert second.returncode == 0, second.stderr
    for run_id in (json.loads(first.stdout)["run_id"], json.loads(second.stdout)["run_id"]):
        verify = forked_ml8s(["verify", run_id], env, timeout=300)
        assert verify.returncode == 0, verify.stdout + verify.stderr
    import sqlite3

    with sqlite3.connect(db) as connection:  # the killed transaction was rolled back, not half kept
        tables = {row[0] for row in connection.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        names = [row[0] for row in connection.execute("SELECT name FROM experiments")]
    assert "ml8s_killed_writer" not in tables and not any(n.endswith("-half-written") for n in names)


def test_a_percent_encoded_sqlite_path_is_the_file_mlflow_opens(tmp_path: Path) -> None:
    """SQLAlchemy (so MLflow) opens sqlite:////srv/my%20runs/mlflow.db as "/srv/my runs/mlflow.db"; ml8s checked,
    locked and created "my%20runs": a run trained, then failed at registration (No such file or directory)."""
    from ml8s.identity.uri import sqlite_path

    (tmp_path / "my runs").mkdir()
    uri = f"sqlite:///{tmp_path}/my%20runs/mlflow.db"
    assert sqlite_path(uri) == f"{tmp_path}/my runs/mlflow.db"
    assert sqlite_path(f"sqlite:///{tmp_path}/100%25.db?mode=rw") == f"{tmp_path}/100%.db"
    ensure_schema(uri)  # created complete, where MLflow will look
    assert sorted(p.name for p in (tmp_path / "my runs").iterdir()) == ["mlflow.db"]
