"""An MLflow server that is absent or hung fails ``ml8s run`` before training, in seconds and by name; a long
wait on MLflow while registering shows life in the log."""

from __future__ import annotations

import http.server
import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import write_small_churn
from forked_cli import forked_ml8s, forked_pyflyte

from ml8s.errors import RegistryError
from ml8s.identity.settings import PlatformSettings
from ml8s.mlflow_probe import require_answer
from ml8s.ops.registrations import registration_states
from ml8s.pipeline.preflight import check_tracking_reachable

REPO = Path(__file__).resolve().parent.parent


def _settings(uri: str) -> PlatformSettings:
    return PlatformSettings.load({"PIPELINE_ROOT_URI": "s3://ml8s-runs/team", "MLFLOW_TRACKING_URI": uri})


@pytest.fixture
def hung_port() -> Iterator[int]:
    """A loopback port that accepts connections and never answers."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        server.listen(8)
        yield server.getsockname()[1]


@pytest.fixture
def refused_port() -> int:
    with socket.create_server(("127.0.0.1", 0)) as server:
        return int(server.getsockname()[1])  # closed on return: nothing listens there now


@pytest.fixture(params=[200, 401, 404])
def answering_port(request: pytest.FixtureRequest) -> Iterator[int]:
    """A loopback HTTP server that answers every GET with ``request.param`` (an answer, whatever the status)."""
    status = int(request.param)

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(status)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"OK")

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def test_a_hung_server_fails_within_the_bound_without_its_password(hung_port: int) -> None:
    with pytest.raises(RegistryError) as caught:
        check_tracking_reachable(_settings(f"http://bot:s3cret@127.0.0.1:{hung_port}/"), timeout_s=0.5)
    message = str(caught.value)
    assert message.startswith(f"REGISTRY_ERROR: MLFLOW_TRACKING_URI='http://127.0.0.1:{hung_port}/': no answer to ")
    assert f"GET http://127.0.0.1:{hung_port}/health within 0.5 s (TimeoutError" in message, message
    assert "s3cret" not in message and "bot" not in message and "nothing was written" in message


def test_a_server_trickling_its_answer_fails_within_the_bound() -> None:
    """The socket timeout bounds each wait for the next bytes, not the answer: a server (a proxy) sending its
    headers a byte every 0.1 s held the probe, then the command, for hours whatever the bound."""
    stop = threading.Event()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.wfile.write(b"HTTP/1.1 200 OK\r\nX-Pad: ")
            while not stop.wait(0.1):
                try:
                    self.wfile.write(b"x")
                    self.wfile.flush()
                except OSError:  # the probe gave up and closed
                    return

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url, caught = f"http://127.0.0.1:{server.server_address[1]}", []

    def probe() -> None:
        with pytest.raises(RegistryError) as raised:
            check_tracking_reachable(_settings(url), timeout_s=0.5)
        caught.append(str(raised.value))

    asking = threading.Thread(target=probe, daemon=True)
    asking.start()
    asking.join(60)  # a hang guard only: without the bound on the whole answer, it waits for hours
    stop.set()
    server.shutdown()
    server.server_close()
    assert caught and f"no answer to GET {url}/health within 0.5 s (TimeoutError" in caught[0], caught


def test_an_absent_server_fails_by_name(refused_port: int) -> None:
    with pytest.raises(RegistryError, match=r"ConnectionRefusedError"):
        check_tracking_reachable(_settings(f"https://127.0.0.1:{refused_port}/mlflow"), timeout_s=0.6)


def test_a_server_that_starts_within_the_bound_is_waited_for(refused_port: int) -> None:
    started = threading.Event()

    def start_late() -> None:
        time.sleep(0.6)
        server = http.server.ThreadingHTTPServer(("127.0.0.1", refused_port), http.server.BaseHTTPRequestHandler)
        started.set()
        server.handle_request()  # one request: the probe's (answered 501, an answer)
        server.server_close()

    thread = threading.Thread(target=start_late, daemon=True)
    thread.start()
    check_tracking_reachable(_settings(f"http://127.0.0.1:{refused_port}"), timeout_s=30)
    assert started.is_set()
    thread.join(timeout=30)


def test_any_http_answer_is_a_server(answering_port: int) -> None:
    check_tracking_reachable(_settings(f"http://127.0.0.1:{answering_port}"), timeout_s=5)


def test_a_server_uri_that_is_no_url_is_a_registry_error() -> None:
    """'https://[::1' (a tampered manifest's, which verify asks) raised urlsplit's ValueError: an INTERNAL_ERROR."""
    with pytest.raises(RegistryError, match=r"https://\[::1/x is no URL \(Invalid IPv6 URL\)"):
        require_answer("https://bot:s3cret@[::1/x")


@pytest.mark.parametrize("uri", ["sqlite:////nonexistent/dir/m.db", "databricks", "postgresql://u@127.0.0.1:1/db"])
def test_other_tracking_uris_are_not_probed(uri: str) -> None:
    check_tracking_reachable(_settings(uri), timeout_s=0.01)  # no network: nothing listens at any of these


def test_ml8s_run_with_an_absent_server_fails_before_any_write(tmp_path: Path, refused_port: int) -> None:
    data = write_small_churn(tmp_path / "data", rows=120, files=1)
    env = {k: v for k, v in os.environ.items() if k not in ("FORCE_RERUN", "CHAIN_NAME", "MLFLOW_MODEL_NAME")}
    env.update(DATA_ROOT=str(data), TARGET_COLUMN="churned", PIPELINE_ROOT_URI=str(tmp_path / "root"))
    env.update(MLFLOW_TRACKING_URI=f"http://127.0.0.1:{refused_port}", EPOCHS="1", MLFLOW_HTTP_REQUEST_TIMEOUT="1")
    done = forked_ml8s(["run"], env, timeout=300)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(f"ml8s: REGISTRY_ERROR: MLFLOW_TRACKING_URI='http://127.0.0.1:{refused_port}'"), last
    assert "within 1 s (ConnectionRefusedError" in last, last  # MLflow's own bound on a request, where set
    assert "[snapshot]" not in done.stderr and "[train]" not in done.stderr
    assert not (tmp_path / "root" / "ml8s_training_runs").exists()


def test_pyflyte_run_with_an_absent_server_fails_before_any_write(tmp_path: Path, refused_port: int) -> None:
    """The workflow asked MLflow first at registration: it snapshotted, engineered the features and trained, then
    failed. As ``ml8s run``, it fails in the first task of the training branch, before any write."""
    data = write_small_churn(tmp_path / "data", rows=120, files=1)
    env = {k: v for k, v in os.environ.items() if k not in ("FORCE_RERUN", "CHAIN_NAME", "MLFLOW_MODEL_NAME")}
    env.update(DATA_ROOT=str(data), TARGET_COLUMN="churned", PIPELINE_ROOT_URI=str(tmp_path / "root"))
    env.update(MLFLOW_TRACKING_URI=f"http://127.0.0.1:{refused_port}", EPOCHS="1", MLFLOW_HTTP_REQUEST_TIMEOUT="1")
    env.update(HOME=str(tmp_path / "home"), TMPDIR=str(tmp_path))  # a Flyte local cache of its own
    done = forked_pyflyte(["run", "workflows/training.py", "training_pipeline"], env, cwd=REPO, timeout=300)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(f"ml8s: REGISTRY_ERROR: MLFLOW_TRACKING_URI='http://127.0.0.1:{refused_port}'"), last
    assert "[snapshot]" not in done.stderr and "[train]" not in done.stderr
    assert not (tmp_path / "root" / "ml8s_training_runs").exists() and done.stdout == ""


def test_an_answer_is_remembered_and_a_silence_is_not(refused_port: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "0.3")
    uri = f"http://127.0.0.1:{refused_port}"
    with pytest.raises(RegistryError, match=rf"^REGISTRY_ERROR: MLflow at {uri}: no answer to GET {uri}/health"):
        require_answer(uri)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", refused_port), http.server.BaseHTTPRequestHandler)
    thread = threading.Thread(target=server.handle_request, daemon=True)  # answers one request, then stops
    thread.start()
    require_answer(uri)  # asked again (a silence is not remembered): answered this time
    thread.join(timeout=30)
    server.server_close()
    require_answer(uri)  # nothing listens now: the answer is remembered, nothing is asked


def test_runs_list_asks_a_silent_server_once_for_all_its_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "0.3")
    accepted: list[socket.socket] = []
    with socket.create_server(("127.0.0.1", 0)) as server:
        server.settimeout(0.1)

        def accept() -> None:
            while server.fileno() >= 0:
                try:
                    accepted.append(server.accept()[0])  # kept open, never answered
                except OSError:
                    continue

        threading.Thread(target=accept, daemon=True).start()
        uri = f"http://127.0.0.1:{server.getsockname()[1]}"
        ref = {"tracking_uri": uri, "model_name": "m", "model_version": "1", "mlflow_run_id": "r"}
        states = registration_states({"aaaaaaaaaaaa": ref, "bbbbbbbbbbbb": ref, "cccccccccccc": ref}, {})
    assert len(set(states.values())) == 1 and len(accepted) == 1, (states, len(accepted))
    assert states["aaaaaaaaaaaa"].startswith(f"unconfirmed: REGISTRY_ERROR: MLflow at {uri}: no answer to GET ")
    for connection in accepted:
        connection.close()
