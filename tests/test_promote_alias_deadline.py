"""``ml8s chain promote`` moves MLflow's alias ``promoted`` after its decision is written. Its wait for the lock
file beside a sqlite registry was bounded by ALIAS_DEADLINE_SECONDS, but not the rest: a database another process
held (an open ``BEGIN EXCLUSIVE``) was waited for by sqlite's own busy timeout in the schema check, and a hung MLflow
server by MLflow's HTTP timeouts and retries. The whole move is now bounded by ALIAS_DEADLINE_SECONDS, as the run's
alias step; the warning names the database or server and the setting, and the decision stands.

No wall clock is asserted: the waits asked of sqlite are recorded, and MLflow's own bound is made 5 s without
retries, so without the fix the warning names sqlite's or MLflow's timeout, never the setting."""

from __future__ import annotations

import contextlib
import json
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from loopback_http import QuietHandler, loopback_server
from test_promotion import _cli_chain

from ml8s.chain import PromotionLog
from ml8s.cli.main import main

_HOLD = """
import sqlite3, sys
connection = sqlite3.connect(sys.argv[1], isolation_level=None)
connection.execute("BEGIN EXCLUSIVE")
print("held", flush=True)
sys.stdin.read()  # until the test closes it
"""


@contextlib.contextmanager
def _held(db: Path) -> Iterator[None]:
    """``db`` locked by another process, in an open ``BEGIN EXCLUSIVE`` transaction, until the block ends."""
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLD, str(db)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        yield
    finally:
        holder.communicate("", timeout=60)


def _busy_waits(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The busy timeout every sqlite connection asks for (sqlite's 5 s when none is given); each made 2 s at most
    here, so the test fails in seconds on the wait asked for without the fix."""
    real, asked = sqlite3.connect, []

    def connect(*args: object, timeout: float = 5.0, **kwargs: object) -> sqlite3.Connection:
        asked.append(timeout)
        return real(*args, timeout=min(timeout, 2.0), **kwargs)

    monkeypatch.setattr(sqlite3, "connect", connect)
    return asked


def test_promote_waits_on_a_database_held_by_another_process_only_within_the_deadline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "mlflow.db"
    with sqlite3.connect(db) as connection:  # a sqlite file: the move goes as far as the schema check
        connection.execute("CREATE TABLE t (a INTEGER)")
    before = db.read_bytes()
    chain = _cli_chain(tmp_path / "root", monkeypatch, f"sqlite:///{db}")
    monkeypatch.setenv("ALIAS_DEADLINE_SECONDS", "1")
    capsys.readouterr()
    with _held(db), pytest.MonkeyPatch.context() as patch:
        asked = _busy_waits(patch)
        assert main(["chain", "promote", "2"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["decision"]["counter"] == 2  # the decision stands
    assert [d.decision.counter for d in PromotionLog(chain).decisions()] == [2]
    assert asked and max(asked) <= 1, asked  # was sqlite's 5 s
    assert "ml8s: warning: the MLflow alias 'promoted' was not moved: REGISTRY_ERROR" in err, err
    assert f"the MLflow database {db} " in err and "ALIAS_DEADLINE_SECONDS=1 s" in err, err
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    assert db.read_bytes() == before
    # released: the same command reaches the schema (no MLflow database here), no lock named
    assert main(["chain", "promote", "2"]) == 0
    err = capsys.readouterr().err
    assert "REGISTRY_SCHEMA_INCOMPLETE" in err and "ALIAS_DEADLINE_SECONDS" not in err, err


@contextlib.contextmanager
def _hung_server(health: bool) -> Iterator[tuple[str, list[str]]]:
    """A loopback server that accepts every connection and never answers (with ``health``: but ``/health``)."""
    released, asked = threading.Event(), []

    class Hung(QuietHandler):
        def do_GET(self) -> None:
            asked.append(self.path)
            if health and self.path.startswith("/health"):
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"OK")
                return
            released.wait()

        do_POST = do_GET

    with loopback_server(Hung) as url:
        try:
            yield url, asked
        finally:
            released.set()


@pytest.mark.parametrize("health", [False, True], ids=["silent", "api-hung"])
def test_promote_waits_on_a_hung_mlflow_server_only_within_the_deadline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], health: bool
) -> None:
    """Silent: the server never answers at all (the probe's bound). API hung: ``/health`` answers, so the probe
    passes, and MLflow's client waited its own timeout (here 5 s, no retries; 120 s and seven retries by default)."""
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "5")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    with _hung_server(health) as (url, asked):
        chain = _cli_chain(tmp_path / "root", monkeypatch, url)
        monkeypatch.setenv("ALIAS_DEADLINE_SECONDS", "1")
        capsys.readouterr()
        assert main(["chain", "promote", "2"]) == 0
        out, err = capsys.readouterr()
        assert not health or [p for p in asked if p.startswith("/api/")], asked  # hung past the probe
    assert json.loads(out)["decision"]["counter"] == 2  # the decision stands
    assert [d.decision.counter for d in PromotionLog(chain).decisions()] == [2]
    assert "ml8s: warning: the MLflow alias 'promoted' was not moved: REGISTRY_ERROR" in err, err
    assert f"MLflow at {url}" in err and "ALIAS_DEADLINE_SECONDS=1 s" in err, err
    assert "timed out" not in err.lower() or "not done within" in err, err  # never MLflow's own timeout
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
