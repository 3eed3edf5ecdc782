"""The whole pipeline on S3 (SPEC §3, issue "S3 backend"): moto and radosgw, S3 data and S3 roots.

Each run is its own process (``ml8s run``) configured only by the environment, as on a cluster.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path

import pytest
from forked_cli import forked_ml8s

from ml8s.contract import layout

SAME_AS_LOCAL = (
    "features/feature_matrix.parquet",
    "features/feature_schema.json",
    "metrics.json",
    "model/model.onnx",
    "model/model_native.safetensors",
    "success.marker",
    "training_metadata.json",
)


def upload(endpoint: object, bucket: str, prefix: str, data: Path) -> None:
    client = endpoint.client()  # type: ignore[attr-defined]
    for path in sorted(data.rglob("*")):
        if path.is_file():
            client.put_object(Bucket=bucket, Key=f"{prefix}/{path.relative_to(data)}", Body=path.read_bytes())


def run(env: dict[str, str], *args: str, check: bool = True, fresh: bool = False) -> subprocess.CompletedProcess[str]:
    """``ml8s run *args`` in a fork of a warm interpreter (forked_cli), or in a fresh process when ``fresh``."""
    proc = forked_ml8s(["run", *args], env, timeout=600, fresh=fresh)
    if check and proc.returncode != 0:
        pytest.fail(f"ml8s run exited {proc.returncode}:\n{proc.stderr[-4000:]}")
    return proc


def base_env(endpoint: object, tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "FLYTE_AWS_"))}
    env.pop("FORCE_RERUN", None)
    env.update(endpoint.env())  # type: ignore[attr-defined]
    env.update(TARGET_COLUMN="churned", EPOCHS="2", MLFLOW_TRACKING_URI=f"sqlite:///{tmp_path}/mlflow.db")
    env.update(extra)
    return env


def s3_objects(endpoint: object, bucket: str, prefix: str) -> dict[str, bytes]:
    client = endpoint.client()  # type: ignore[attr-defined]
    out = {}
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix + "/"):
        for item in page.get("Contents", []):
            body = client.get_object(Bucket=bucket, Key=item["Key"])["Body"].read()
            out[item["Key"][len(prefix) + 1 :]] = body
    return out


@pytest.fixture(scope="module")
def local_reference(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The same data run locally: the bytes every S3 run must reproduce."""
    from conftest import write_small_churn

    base = tmp_path_factory.mktemp("local")
    data = write_small_churn(base / "data")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "FLYTE_AWS_"))}
    env.update(DATA_ROOT=str(data), TARGET_COLUMN="churned", EPOCHS="2", PIPELINE_ROOT_URI=str(base / "root"))
    env.pop("FORCE_RERUN", None)
    manifest = json.loads(run(env, fresh=True).stdout)  # its own hash seed: the S3 runs are forks of another
    return data, base / "root" / layout.RUNS_DIR / manifest["run_id"]


def test_s3_data_and_root_end_to_end(s3_server: object, local_reference: tuple[Path, Path], tmp_path: Path) -> None:
    data, local_run = local_reference
    bucket = s3_server.make_bucket()  # type: ignore[attr-defined]
    upload(s3_server, bucket, "data/churn", data)
    env = base_env(s3_server, tmp_path, DATA_ROOT=f"s3://{bucket}/data/churn", PIPELINE_ROOT_URI=f"s3://{bucket}/pipe")
    manifest = json.loads(run(env).stdout)
    prefix = f"pipe/{layout.RUNS_DIR}/{manifest['run_id']}"
    stored = s3_objects(s3_server, bucket, prefix)
    assert not [k for k in stored if k.startswith(layout.TMP_DIR)], "tmp objects left behind"
    for rel in SAME_AS_LOCAL:
        assert stored[rel] == (local_run / rel).read_bytes(), rel
    snapshot = json.loads(stored[layout.CONFIG_SNAPSHOT])
    assert snapshot["canonical_config"]["data_root"] == f"s3://{bucket}/data/churn"
    assert snapshot["full_config_hash"].startswith(manifest["run_id"])

    # Re-run: the gate returns the same manifest and nothing is rewritten.
    client = s3_server.client()  # type: ignore[attr-defined]
    etags = {o["Key"]: (o["ETag"], o["LastModified"]) for o in client.list_objects_v2(Bucket=bucket)["Contents"]}
    assert json.loads(run(env).stdout) == manifest
    after = {o["Key"]: (o["ETag"], o["LastModified"]) for o in client.list_objects_v2(Bucket=bucket)["Contents"]}
    assert after == etags

    # FORCE_RERUN regenerates and reproduces.
    forced = json.loads(run({**env, "FORCE_RERUN": "true"}).stdout)
    assert forced["force_rerun"]["reproduced"] is True
    assert s3_objects(s3_server, bucket, prefix)[layout.TRAINING_METADATA] == stored[layout.TRAINING_METADATA]


def test_local_data_s3_root_equals_local_run(
    s3_server: object, local_reference: tuple[Path, Path], tmp_path: Path
) -> None:
    data, local_run = local_reference
    bucket = s3_server.make_bucket()  # type: ignore[attr-defined]
    env = base_env(s3_server, tmp_path, DATA_ROOT=str(data), PIPELINE_ROOT_URI=f"s3://{bucket}/root")
    manifest = json.loads(run(env).stdout)
    assert manifest["run_id"] == local_run.name
    stored = s3_objects(s3_server, bucket, f"root/{layout.RUNS_DIR}/{manifest['run_id']}")
    for rel in (*SAME_AS_LOCAL, layout.CONFIG_SNAPSHOT, layout.DATA_FINGERPRINT):
        assert stored[rel] == (local_run / rel).read_bytes(), rel
    # the MLflow model's files live with the run (sqlite tracking URI), not beside the database or in ./mlruns
    logged = s3_objects(s3_server, bucket, "root/mlruns")
    assert any(key.endswith("/MLmodel") for key in logged), sorted(logged)[:5]
    assert not (tmp_path / "mlruns").exists()


def test_s3_data_local_root(s3_server: object, local_reference: tuple[Path, Path], tmp_path: Path) -> None:
    data, local_run = local_reference
    bucket = s3_server.make_bucket()  # type: ignore[attr-defined]
    upload(s3_server, bucket, "d", data)
    env = base_env(s3_server, tmp_path, DATA_ROOT=f"s3://{bucket}/d", PIPELINE_ROOT_URI=str(tmp_path / "root"))
    manifest = json.loads(run(env).stdout)
    run_dir = tmp_path / "root" / layout.RUNS_DIR / manifest["run_id"]
    for rel in SAME_AS_LOCAL:
        assert (run_dir / rel).read_bytes() == (local_run / rel).read_bytes(), rel


def test_s3_fingerprint_equals_hand_computed_listing(s3_server: object, tmp_path: Path) -> None:
    bucket = s3_server.make_bucket()  # type: ignore[attr-defined]
    client = s3_server.client()  # type: ignore[attr-defined]
    bodies = {"in/b.csv": b"x,y\n1,2\n", "in/a.csv": b"x,y\n3,4\n", "in/sub/c.csv": b"x,y\n5,6\n"}
    for key, body in bodies.items():
        client.put_object(Bucket=bucket, Key=key, Body=body)
    client.put_object(Bucket=bucket, Key="in/emptydir/", Body=b"")  # a "folder" key: skipped
    listed = {o["Key"]: o for o in client.list_objects_v2(Bucket=bucket, Prefix="in/")["Contents"]}
    tokens = sorted(f"{k[3:]}:{listed[k]['ETag'].strip(chr(34))}:{listed[k]['Size']}" for k in bodies)
    expected = hashlib.sha256("|".join(tokens).encode()).hexdigest()
    env = base_env(s3_server, tmp_path, DATA_ROOT=f"s3://{bucket}/in/", PIPELINE_ROOT_URI=str(tmp_path))
    proc = forked_ml8s(["identity"], env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["data_fingerprint"] == expected
    assert report["canonical_config"]["data_root"] == f"s3://{bucket}/in"


def test_s3_object_changed_after_fingerprint_fails(
    s3_server: object, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from conftest import write_small_churn

    from ml8s.errors import DataChangedError
    from ml8s.pipeline.bootstrap import bootstrap
    from ml8s.pipeline.snapshot import snapshot

    bucket = s3_server.make_bucket()  # type: ignore[attr-defined]
    upload(s3_server, bucket, "d", write_small_churn(tmp_path / "data", rows=60))
    env = base_env(s3_server, tmp_path, DATA_ROOT=f"s3://{bucket}/d", PIPELINE_ROOT_URI=str(tmp_path / "root"))
    for key, value in env.items():
        monkeypatch.setenv(key, value)  # S3Store reads credentials from the environment
    ctx = bootstrap(env)
    client = s3_server.client()  # type: ignore[attr-defined]
    client.put_object(Bucket=bucket, Key="d/part-001.csv", Body=b"a,churned\n1,yes\n")
    with pytest.raises(DataChangedError, match=r"part-001\.csv"):
        snapshot(ctx, ctx.open_store())
    assert not (tmp_path / "root" / layout.RUNS_DIR).exists()
