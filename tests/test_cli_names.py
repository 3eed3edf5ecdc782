"""The chain and model a command means without CHAIN_NAME or MLFLOW_MODEL_NAME in the shell: ``ml8s verify`` and
``ml8s audit bundle`` read them from the run's records, ``ml8s chain *`` takes the one chain under the root,
``ml8s chain log`` lists the chains when there are several, and ``ml8s chain tensorboard --serve`` serves the
versions' logs on loopback and stops with the command (no server left behind)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import NamedTuple

import pytest
from cli_support import ml8s_many
from conftest import write_small_churn
from forked_cli import ML8S, forked_ml8s

MODEL = "churn-named"  # a valid chain name: the chain is called as the model
_NAMING = ("CHAIN_NAME", "MLFLOW_MODEL_NAME", "MLFLOW_TRACKING_URI", "WARM_START", "FORCE_RERUN")


class Trained(NamedTuple):
    root: Path
    run_id: str
    env: dict[str, str]  # a shell that names no chain and no model


def _ml8s(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return forked_ml8s(args, env, timeout=300)


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Trained:
    """One run trained with MLFLOW_MODEL_NAME=churn-named; the environment it returns names nothing."""
    base = tmp_path_factory.mktemp("names")
    data, root = write_small_churn(base / "data", rows=120, files=1), base / "root"
    env = {k: v for k, v in os.environ.items() if k not in _NAMING}
    env.update(DATA_ROOT=str(data), TARGET_COLUMN="churned", PIPELINE_ROOT_URI=str(root))
    env.update(EPOCHS="2", HIDDEN_UNITS="8", BATCH_SIZE="64")
    done = _ml8s(env | {"MLFLOW_MODEL_NAME": MODEL}, "run")
    assert done.returncode == 0, done.stderr[-3000:]
    return Trained(root, json.loads(done.stdout)["run_id"], env)


def test_verify_and_bundle_find_the_runs_chain_and_model(trained: Trained, tmp_path: Path) -> None:
    bundle_path = str(tmp_path / "b.tar.gz")
    verified, bundle, checked = ml8s_many(
        [
            ("verify", trained.run_id, "--json"),
            ("audit", "bundle", trained.run_id, "-o", bundle_path),
            ("audit", "verify", bundle_path, "--json"),
        ],
        trained.env,
    )
    report = json.loads(verified.stdout)
    assert report["status"] == "PASS", [c for c in report["checks"] if c["status"] != "PASS"]
    (chain,) = [c for c in report["checks"] if c["name"] == "chain"]
    assert f"of chain '{MODEL}'" in chain["reason"] + " ".join(chain["details"])
    assert bundle.returncode == 0, bundle.stderr
    assert json.loads(checked.stdout)["status"] == "PASS"


def test_chain_commands_take_the_one_chain_under_the_root(trained: Trained) -> None:
    log, shown, listed, text, missing = ml8s_many(
        [
            ("chain", "log", "--json"),
            ("chain", "verify"),
            ("chain", "tensorboard", "--json"),
            ("chain", "tensorboard"),
            ("chain", "tensorboard", "7"),
        ],
        trained.env,
    )
    versions = json.loads(log.stdout)
    assert [v["counter"] for v in versions] == [1, 0] and versions[0]["run_id"] == trained.run_id
    assert shown.returncode == 0 and shown.stdout.startswith(f"PASS chain '{MODEL}'"), shown.stderr
    dirs = json.loads(listed.stdout)
    assert [(d["counter"], d["name"]) for d in dirs] == [(1, "v0000000001")]
    assert list(Path(dirs[0]["logdir"].removeprefix("file://")).rglob("events.out.tfevents.*"))
    assert text.stdout == f"v0000000001:{dirs[0]['logdir']}\n"
    assert missing.returncode == 1 and "has no version 7" in missing.stderr and "Traceback" not in missing.stderr


def test_several_chains_are_listed_and_a_run_is_checked_against_the_chain_asked(
    trained: Trained, tmp_path: Path
) -> None:
    # a second chain under the root (tests run in file order: the one-chain test above has run); the commands
    # run in order, in one process
    other, logged, table, ambiguous, versions, verified, wrong, bad = ml8s_many(
        [
            ("chain", "init", "--chain", "other-chain"),
            ("chain", "log", "--json"),
            ("chain", "log"),
            ("chain", "show"),
            ("chain", "log", "--chain", MODEL, "--json"),
            ("verify", trained.run_id, "--json"),
            ("verify", trained.run_id, "--chain", "other-chain", "--json"),
            ("verify", trained.run_id, "--chain", "../up"),
        ],
        trained.env,
    )
    assert other.returncode == 0, other.stderr
    listed = json.loads(logged.stdout)
    assert [c["chain"] for c in listed] == ["churn-named", "other-chain"]
    assert [c["head_counter"] for c in listed] == [1, 0]
    assert set(listed[0]) == {"chain", "head_counter", "head_semver", "head_block_hash", "uri"}
    lines = table.stdout.splitlines()
    assert lines[0].split() == ["CHAIN", "HEAD", "SEMVER", "BLOCK"] and len(lines) == 3
    assert ambiguous.returncode == 1 and "churn-named, other-chain; expected --chain NAME" in ambiguous.stderr
    assert json.loads(versions.stdout)[0]["run_id"] == trained.run_id
    # the run is still found in its own chain; --chain names another, which does not hold it
    assert json.loads(verified.stdout)["status"] == "PASS"
    (chain,) = [c for c in json.loads(wrong.stdout)["checks"] if c["name"] == "chain"]
    assert wrong.returncode == 1 and "is not in chain 'other-chain'" in chain["reason"] + " ".join(chain["details"])
    assert bad.returncode == 1 and bad.stderr.startswith("ml8s: CONFIG_ERROR: --chain '../up' is invalid")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _answers(url: str) -> bytes | None:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            body: bytes = response.read()
            return body
    except OSError:
        return None


def _has_run(runs: bytes) -> bool:
    """TensorBoard lists the version's logs as a run named after it (``v0000000001/.``: events at its top)."""
    return any(name.split("/")[0] == "v0000000001" for name in json.loads(runs))


def test_tensorboard_serve_answers_on_loopback_and_stops_with_the_command(trained: Trained) -> None:
    port = _free_port()
    args = ["chain", "tensorboard", "--chain", MODEL, "--serve", "--port", str(port), "--json"]
    server = subprocess.Popen([ML8S, *args], env=trained.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        started = json.loads("".join(iter(server.stdout.readline, "}\n")) + "}")
        assert started["url"] == f"http://127.0.0.1:{port}/" and started["versions"] == [1]
        runs = None
        deadline = time.monotonic() + 120  # a start-up budget on a loaded machine, not a timing assertion
        while runs is None and time.monotonic() < deadline and server.poll() is None:
            runs = _answers(f"http://127.0.0.1:{port}/data/runs")
            time.sleep(0.5)
        assert runs is not None, "TensorBoard never answered on 127.0.0.1"
        deadline = time.monotonic() + 120  # TensorBoard finds the runs after its first scan of the logs
        while not _has_run(runs) and time.monotonic() < deadline:
            time.sleep(0.5)
            runs = _answers(f"http://127.0.0.1:{port}/data/runs") or b"[]"
        assert _has_run(runs), runs
    finally:
        server.send_signal(signal.SIGTERM)
        _, stderr = server.communicate(timeout=60)
    assert server.returncode == 143, stderr
    assert "INTERRUPTED" in stderr and "Traceback" not in stderr
    with pytest.raises(ProcessLookupError):
        os.kill(started["pid"], 0)  # TensorBoard stopped with the command
    assert _answers(f"http://127.0.0.1:{port}/") is None


def test_tensorboard_serve_on_a_taken_port_is_one_named_error(trained: Trained) -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = str(taken.getsockname()[1])
        done = _ml8s(trained.env, "chain", "tensorboard", "--chain", MODEL, "--serve", "--port", port, "--json")
    assert done.returncode == 1 and done.stdout == "", done.stdout  # no URL of a server that never started
    assert done.stderr.startswith(f"ml8s: CONFIG_ERROR: --host 127.0.0.1 --port {port}: cannot listen there")
    for bad in ("0", "70000"):
        refused = _ml8s(trained.env, "chain", "tensorboard", "--chain", MODEL, "--serve", "--port", bad)
        assert refused.returncode == 1 and f"--port {bad}: expected a port number" in refused.stderr
