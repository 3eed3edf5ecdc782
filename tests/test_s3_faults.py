"""Faults on a real S3 server (radosgw): the endpoint stops between steps and in the middle of an
upload. Each gives one clear error, no partial final object, and a re-run heals once it is back."""

from __future__ import annotations

import io
import json
import os
import subprocess
import time
from pathlib import Path

import pytest
from forked_cli import ML8S, forked_ml8s

from ml8s.contract import layout
from ml8s.contract.epochs import read_epochs
from ml8s.errors import StoreError
from ml8s.store.s3 import S3Store

MiB = 1024 * 1024


def _env(endpoint: object, data: Path, root: str, tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "FLYTE_AWS_"))}
    env.pop("FORCE_RERUN", None)
    env.update(endpoint.env())  # type: ignore[attr-defined]
    env.update(
        DATA_ROOT=str(data),
        TARGET_COLUMN="churned",
        EPOCHS="2",
        PIPELINE_ROOT_URI=root,
        MLFLOW_TRACKING_URI=f"sqlite:///{tmp_path}/mlflow.db",
        AWS_MAX_ATTEMPTS="2",
    )
    return env


def _objects(endpoint: object, bucket: str) -> dict[str, bytes]:
    client = endpoint.client()  # type: ignore[attr-defined]
    listed = client.list_objects_v2(Bucket=bucket).get("Contents", [])
    return {o["Key"]: client.get_object(Bucket=bucket, Key=o["Key"])["Body"].read() for o in listed}


def _untimed(rel: str, body: bytes) -> object:
    """What of a run file must match the reference run: logs hold wall-clock times, which never do.

    Training's logs are published right after the features (the matrix of a large run is written while training
    runs), so a stop after the features may find them already uploaded."""
    if rel == layout.EPOCH_LOG:
        return [r.model_copy(update={"time_ms": None}) for r in read_epochs(body)[1]]
    if rel == layout.TENSORBOARD_EVENTS:  # fixed-size records: a whole file has the reference's length
        return len(body)
    return body


def test_endpoint_stopped_between_steps_then_rerun_heals(radosgw_server: object, tmp_path: Path) -> None:
    from conftest import write_small_churn

    data = write_small_churn(tmp_path / "data")
    reference = json.loads(
        forked_ml8s(["run"], _env(radosgw_server, data, str(tmp_path / "local"), tmp_path / "l"), check=True).stdout
    )
    local_run = tmp_path / "local" / layout.RUNS_DIR / reference["run_id"]
    bucket = radosgw_server.make_bucket()  # type: ignore[attr-defined]
    env = _env(radosgw_server, data, f"s3://{bucket}/root", tmp_path)
    prefix = f"root/{layout.RUNS_DIR}/{reference['run_id']}/"
    client = radosgw_server.client()  # type: ignore[attr-defined]
    proc = subprocess.Popen([ML8S, "run"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        schema = prefix + layout.FEATURE_SCHEMA
        while not any(o["Key"] == schema for o in client.list_objects_v2(Bucket=bucket).get("Contents", [])):
            assert proc.poll() is None, "the run ended before feature engineering finished"
            assert time.monotonic() < deadline
            time.sleep(0.01)
        radosgw_server.stop()  # type: ignore[attr-defined]
        _, stderr = proc.communicate(timeout=180)
    finally:
        radosgw_server.start()  # type: ignore[attr-defined]
    assert proc.returncode == 1, stderr
    last = stderr.strip().splitlines()[-1]
    assert last.startswith("ml8s: ") and "STORE" in last and radosgw_server.url in last  # type: ignore[attr-defined]
    stored = _objects(radosgw_server, bucket)
    assert prefix + layout.SUCCESS_MARKER not in stored
    for key, body in stored.items():  # whatever reached a final key is complete
        rel = key[len(prefix) :]
        if key.startswith(prefix) and not rel.startswith(layout.TMP_DIR):
            assert _untimed(rel, body) == _untimed(rel, (local_run / rel).read_bytes()), rel
    healed = json.loads(forked_ml8s(["run"], env, check=True).stdout)
    assert healed["run_id"] == reference["run_id"]
    stored = _objects(radosgw_server, bucket)
    for rel in (layout.FEATURE_MATRIX, layout.MODEL_NATIVE, layout.model_export("onnx"), layout.TRAINING_METADATA):
        assert stored[prefix + rel] == (local_run / rel).read_bytes(), rel


class _StopsServerMidway(io.RawIOBase):
    """A file whose reader stops the S3 server once ``after`` bytes have been read from it."""

    def __init__(self, path: str, server: object, after: int) -> None:
        self._file = open(path, "rb")  # closed in close()
        self._server, self._after, self._read = server, after, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        if self._read >= self._after and self._server is not None:
            self._server.stop()  # type: ignore[attr-defined]
            self._server = None
        n = self._file.readinto(buffer)
        self._read += n
        return n

    def close(self) -> None:
        self._file.close()
        super().close()


def test_endpoint_stopped_during_upload_leaves_old_object_intact(
    radosgw_server: object, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bucket = radosgw_server.make_bucket()  # type: ignore[attr-defined]
    store = S3Store(
        f"s3://{bucket}/faults",
        env={**radosgw_server.env(), "AWS_MAX_ATTEMPTS": "2"},  # type: ignore[attr-defined]
        multipart_threshold=5 * MiB,
        part_size=5 * MiB,
    )
    store.put_atomic("model.bin", b"old model", tmp_key=".tmp/model-w0.bin")
    big = tmp_path / "big.bin"
    big.write_bytes(os.urandom(24 * MiB))
    import ml8s.store.s3.writes as s3

    def opener(path: str, mode: str = "r", *args: object, **kwargs: object) -> object:
        if str(path) == str(big) and "b" in mode:
            return io.BufferedReader(_StopsServerMidway(str(big), radosgw_server, after=12 * MiB))
        return open(path, mode, *args, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr(s3, "open", opener, raising=False)
    try:
        with pytest.raises(StoreError) as caught:
            store.put_file_atomic("model.bin", str(big), tmp_key=".tmp/model-w1.bin")
    finally:
        radosgw_server.start()  # type: ignore[attr-defined]
    message = str(caught.value)
    assert radosgw_server.url in message and "model" in message  # type: ignore[attr-defined]
    assert store.get("model.bin") == b"old model"  # the final key was never touched
    monkeypatch.undo()
    result = store.put_file_atomic("model.bin", str(big), tmp_key=".tmp/model-w2.bin")
    assert result.size == 24 * MiB
    assert store.get("model.bin") == big.read_bytes()
