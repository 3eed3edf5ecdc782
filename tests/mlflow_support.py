"""Support for the MLflow and inference tests: a trained run without MLflow, a real `mlflow server`, raw rows."""

from __future__ import annotations

import csv
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from ml8s.context.run import RunContext
from ml8s.contract import layout

MLFLOW = str(Path(sys.executable).with_name("mlflow"))


def train_run(ctx: RunContext) -> None:
    """Steps 2-5 of a run (snapshot, features, training, export), published into ARTIFACT_ROOT: no MLflow,
    no manifest, no marker, exactly as registration finds a run."""
    from ml8s.context import publish
    from ml8s.pipeline.export import export
    from ml8s.pipeline.features import compute_features
    from ml8s.pipeline.snapshot import snapshot
    from ml8s.training.fit import train

    spec, store = ctx.spec, ctx.open_store()
    snapshot(ctx, store)
    with tempfile.TemporaryDirectory(prefix="ml8s-test-run-") as tmp:
        features, model, exported = (os.path.join(tmp, name) for name in ("features", "model", "export"))
        compute_features(spec, features)
        publish.publish(ctx, store, publish.local_files(features, publish.FEATURES))
        summary = train(spec, features, model)
        publish.publish(ctx, store, publish.local_files(model, publish.TRAINED + publish.TRAINING_LOGS))
        export(spec, summary, features, model, exported)
        publish.publish(ctx, store, publish.local_files(exported, publish.exported(spec.params.model_format)))


def copy_run(source_root: Path, run_id: str, target_root: Path) -> None:
    """Copy one run's ARTIFACT_ROOT into another pipeline root."""
    shutil.copytree(source_root / layout.run_prefix(run_id), target_root / layout.run_prefix(run_id))


def copy_root_as_recorded_there(source_root: Path, target_root: Path) -> None:
    """Copy a pipeline root whose runs then read as completed at ``target_root``: each run's manifest names the
    target (a copy kept as it is names its old root, which the gate refuses: RECORDED_AT_ANOTHER_ROOT)."""
    shutil.copytree(source_root, target_root)
    for manifest in sorted((target_root / layout.RUNS_DIR).glob(f"*/{layout.MANIFEST}")):
        manifest.write_text(manifest.read_text().replace(f"{source_root}/", f"{target_root}/"))


def artifact_dir(root: Path, run_id: str) -> Path:
    return root / layout.run_prefix(run_id)


def raw_rows(data: Path) -> list[dict[str, str]]:
    """Every row of the data's CSV files (the target column included: predicting ignores it)."""
    rows: list[dict[str, str]] = []
    for part in sorted(data.glob("*.csv")):
        with part.open(newline="") as handle:
            rows += list(csv.DictReader(handle))
    return rows


def write_rows(path: Path, rows: list[dict[str, str]]) -> Path:
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]), lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    return path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_until_answers(url: str, process: subprocess.Popen[bytes], log: Path, timeout_s: float = 180.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{process.args} exited with {process.returncode}:\n{log.read_text()[-4000:]}")
        try:
            with urllib.request.urlopen(url, timeout=2) as answer:
                if answer.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.3)
    raise RuntimeError(f"{url} did not answer within {timeout_s}s:\n{log.read_text()[-4000:]}")


def stop(process: subprocess.Popen[bytes]) -> None:
    """Stop a process this test started in its own session, and its workers."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:  # a server draining idle keep-alive connections: it holds nothing we need
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=30)


def mlflow_server(directory: Path, *, wait: bool = True) -> Iterator[str]:
    """A real tracking server on loopback (sqlite backend, proxied artifact store), stopped afterwards.

    ``wait=False`` yields as soon as it is started: a caller whose first request comes later (a run that
    trains first) lets the MLflow client's own retries bridge the boot.
    """
    directory.mkdir(parents=True, exist_ok=True)
    template = os.environ.get("ML8S_MLFLOW_SCHEMA_TEMPLATE", "")
    if template:  # the session's empty database at this MLflow's head revision: the server runs no migration
        shutil.copyfile(template, directory / "server.db")
    port, log = free_port(), directory / "server.log"
    command = [MLFLOW, "server", "--backend-store-uri", f"sqlite:///{directory}/server.db"]
    command += ["--artifacts-destination", str(directory / "artifacts"), "--host", "127.0.0.1", "--port", str(port)]
    command += ["--workers", "1"]
    # Its GenAI job runner (huey consumer processes) serves no tracking or registry request: off, not started.
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    with log.open("wb") as out:
        process = subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, cwd=directory, start_new_session=True, env=env
        )
    try:
        if wait:
            wait_until_answers(f"http://127.0.0.1:{port}/health", process, log)
        yield f"http://127.0.0.1:{port}"
    finally:
        stop(process)
