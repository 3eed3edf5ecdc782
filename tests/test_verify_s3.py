"""Verification and the operator tools on an S3 pipeline root (moto): local data, ``s3://`` root, sqlite MLflow."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from test_verify import clean_env, ml8s

from ml8s.contract import layout


class S3Run(NamedTuple):
    env: dict[str, str]
    client: Any
    bucket: str
    run_id: str
    prefix: str  # the run's key prefix in the bucket


@pytest.fixture(scope="module")
def s3_run(moto_server: Any, tmp_path_factory: pytest.TempPathFactory) -> S3Run:
    from conftest import write_small_churn

    base = tmp_path_factory.mktemp("s3verify")
    bucket = moto_server.make_bucket()
    env = clean_env(
        **moto_server.env(),
        DATA_ROOT=str(write_small_churn(base / "data")),
        TARGET_COLUMN="churned",
        EPOCHS="2",
        PIPELINE_ROOT_URI=f"s3://{bucket}/root",
        MLFLOW_TRACKING_URI=f"sqlite:///{base}/mlflow.db",
    )
    done = ml8s(env, "run")
    assert done.returncode == 0, done.stderr
    run_id = json.loads(done.stdout)["run_id"]
    return S3Run(env, moto_server.client(), bucket, run_id, f"root/{layout.run_prefix(run_id)}")


def test_fresh_s3_run_verifies_and_bundles(s3_run: S3Run, tmp_path: Path) -> None:
    done = ml8s(s3_run.env, "verify", s3_run.run_id)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[0].endswith(f"s3://{s3_run.bucket}/{s3_run.prefix}")
    assert done.stdout.splitlines()[-1] == "RESULT: PASS (10 checks)"  # the 9 store and MLflow checks + chain
    bundle = tmp_path / "b.tar.gz"
    assert ml8s(s3_run.env, "audit", "bundle", s3_run.run_id, "-o", str(bundle)).returncode == 0
    assert ml8s(clean_env(), "audit", "verify", str(bundle)).returncode == 0
    listed = json.loads(ml8s(s3_run.env, "runs", "list", "--json").stdout)
    assert [(r["run_id"], r["status"], r["model_version"]) for r in listed] == [(s3_run.run_id, "complete", "1")]


def test_s3_root_verifies_with_the_manifests_mlflow_uri(s3_run: S3Run) -> None:
    """No MLFLOW_TRACKING_URI: an s3:// root has no default, but the manifest records the run's MLflow."""
    env = {k: v for k, v in s3_run.env.items() if k != "MLFLOW_TRACKING_URI"}
    done = ml8s(env, "verify", s3_run.run_id)
    assert done.returncode == 0 and "PASS  mlflow" in done.stdout, done.stdout


def test_s3_tampering_fails(s3_run: S3Run) -> None:
    client, bucket, key = s3_run.client, s3_run.bucket, f"{s3_run.prefix}/model/model.onnx"
    original = client.get_object(Bucket=bucket, Key=key)["Body"].read()
    flipped = bytearray(original)
    flipped[len(flipped) // 2] ^= 0xFF
    client.put_object(Bucket=bucket, Key=key, Body=bytes(flipped))
    client.put_object(Bucket=bucket, Key=f"{s3_run.prefix}/model/extra.bin", Body=b"x")
    try:
        done = ml8s(s3_run.env, "verify", s3_run.run_id, "--json")
    finally:
        client.put_object(Bucket=bucket, Key=key, Body=original)
        client.delete_object(Bucket=bucket, Key=f"{s3_run.prefix}/model/extra.bin")
    report = json.loads(done.stdout)
    assert done.returncode == 1
    # the chain holds the exported model too (2.1.0): its block no longer matches the flipped file
    assert {c["name"] for c in report["checks"] if c["status"] == "FAIL"} == {"artifacts", "chain", "unexpected_files"}
    assert ml8s(s3_run.env, "verify", s3_run.run_id).returncode == 0


def test_s3_tmp_cleanup_removes_tmp_objects_only(s3_run: S3Run) -> None:
    client, bucket = s3_run.client, s3_run.bucket
    for key in (f"{s3_run.prefix}/.tmp/features-w.parquet", "root/ml8s_incidents/.tmp/incident-w.json"):
        client.put_object(Bucket=bucket, Key=key, Body=b"stale")
    # S3 has no way to back-date LastModified: "older than 0 days", without the hour's floor, takes them.
    dry = json.loads(
        ml8s(s3_run.env, "tmp-cleanup", "--older-than-days", "0", "--allow-short-grace", "--dry-run", "--json").stdout
    )
    assert len(dry["removed"]) == 2
    young = json.loads(ml8s(s3_run.env, "tmp-cleanup", "--older-than-days", "1", "--json").stdout)
    assert young["removed"] == [] and young["kept"] == 2
    done = json.loads(ml8s(s3_run.env, "tmp-cleanup", "--older-than-days", "0", "--allow-short-grace", "--json").stdout)
    assert sorted(e["uri"] for e in done["removed"]) == sorted(
        f"s3://{bucket}/{key}"
        for key in (f"{s3_run.prefix}/.tmp/features-w.parquet", "root/ml8s_incidents/.tmp/incident-w.json")
    )
    keys = {o["Key"] for o in client.list_objects_v2(Bucket=bucket)["Contents"]}
    # but tmp-cleanup's own record of the entries it kept (ml8s/store/sightings.py), none now
    assert [k for k in keys if "/.tmp/" in k] == ["root/.tmp/ml8s-tmp-cleanup-seen.json"]
    record = json.loads(client.get_object(Bucket=bucket, Key="root/.tmp/ml8s-tmp-cleanup-seen.json")["Body"].read())
    assert record == {"sightings": []}
    assert ml8s(s3_run.env, "verify", s3_run.run_id).returncode == 0  # every final artifact is still there
