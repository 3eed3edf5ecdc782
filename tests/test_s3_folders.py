"""S3 "folder" objects (issue 10): zero-byte keys ending in ``/``, as S3 consoles' "Create folder", Hadoop
s3a and rclone make them, are skipped by every reader of DATA_ROOT, on moto and on a real radosgw."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from forked_cli import forked_ml8s

from ml8s.contract import FingerprintRecord, layout
from ml8s.data.fingerprint import ObjectEntry, fingerprint_listing
from ml8s.errors import DataError

# What the tools leave under a prefix: the prefix itself, a sub-"folder", and a parent's marker.
FOLDERS = ("data/", "data/churn/", "data/churn/sub/")


def s3_env(endpoint: object, tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "FLYTE_AWS_"))}
    for name in ("FORCE_RERUN", "PIPELINE_ROOT_URI", "MLFLOW_TRACKING_URI", "STRICT_DATA_IDENTITY", "DATA_ROOT"):
        env.pop(name, None)
    env.update(endpoint.env())  # type: ignore[attr-defined]
    env.update(TARGET_COLUMN="churned", EPOCHS="1", PIPELINE_ROOT_URI=str(tmp_path / "root"))
    env.update(extra)
    return env


def test_folder_objects_run_end_to_end_and_verify(
    s3_server: object, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from conftest import write_small_churn

    from ml8s.audit import verify_run
    from ml8s.pipeline.bootstrap import bootstrap
    from ml8s.store import open_store

    data = write_small_churn(tmp_path / "data", rows=120)
    bucket = s3_server.make_bucket()  # type: ignore[attr-defined]
    client = s3_server.client()  # type: ignore[attr-defined]
    for path in sorted(data.iterdir()):
        client.put_object(Bucket=bucket, Key=f"data/churn/{path.name}", Body=path.read_bytes())
    env = s3_env(s3_server, tmp_path, DATA_ROOT=f"s3://{bucket}/data/churn")
    for key, value in env.items():
        monkeypatch.setenv(key, value)  # the S3 store reads its endpoint and credentials from the environment
    without = bootstrap(env)
    for key in FOLDERS:
        client.put_object(Bucket=bucket, Key=key, Body=b"")
    with_folders = bootstrap(env)
    assert [o.key for o in open_store(f"s3://{bucket}/data/churn").list("")] == ["part-000.csv", "part-001.csv"]
    assert with_folders.run_id == without.run_id  # folder keys are not data: same fingerprint, same RUN_ID
    assert [e.relative_path for e in with_folders.fingerprint.entries] == ["part-000.csv", "part-001.csv"]

    done = forked_ml8s(["run"], env, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    run_id = json.loads(done.stdout)["run_id"]
    assert run_id == without.run_id
    record = FingerprintRecord.model_validate_json(
        (tmp_path / "root" / layout.run_prefix(run_id) / layout.DATA_FINGERPRINT).read_bytes()
    )
    assert [f.relative_path for f in record.files] == ["part-000.csv", "part-001.csv"]
    report = verify_run(str(tmp_path / "root"), run_id, env, recheck_data=True)
    assert report.passed, [(c.name, c.reason, c.details) for c in report.checks if c.name in report.failed()]


def test_a_prefix_holding_only_folders_is_a_data_error(
    s3_server: object, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ml8s.data.sources import fingerprint_data

    bucket = s3_server.make_bucket()  # type: ignore[attr-defined]
    client = s3_server.client()  # type: ignore[attr-defined]
    for key in FOLDERS:
        client.put_object(Bucket=bucket, Key=key, Body=b"")
    for key, value in s3_server.env().items():  # type: ignore[attr-defined]
        monkeypatch.setenv(key, value)
    with pytest.raises(DataError, match="lists no objects"):
        fingerprint_data(f"s3://{bucket}/data/churn")


def test_listing_skips_the_prefix_itself_and_every_folder_key() -> None:
    objects = [
        ObjectEntry(key="", etag='"d41d8cd98f00b204e9800998ecf8427e"', size=0),  # "prefix/" seen from the prefix
        ObjectEntry(key="sub/", etag='"d41d8cd98f00b204e9800998ecf8427e"', size=0),
        ObjectEntry(key="a.csv", etag='"0cc175b9c0f1b6a831c399e269772661"', size=1),
    ]
    fingerprint = fingerprint_listing("s3://b/data", "", objects)
    assert [e.relative_path for e in fingerprint.entries] == ["a.csv"]
    prefixed = [ObjectEntry(key="data/", etag="x", size=0), ObjectEntry(key="data/a.csv", etag="y", size=1)]
    assert [e.relative_path for e in fingerprint_listing("s3://b/data", "data", prefixed).entries] == ["a.csv"]
    with pytest.raises(DataError, match="lists no objects"):
        fingerprint_listing("s3://b/data", "data", prefixed[:1])


def test_reader_skips_folder_entries_of_a_fingerprint_made_elsewhere(
    moto_server: object, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fingerprint passed in from elsewhere (a run spec as JSON) may list a folder key: the reader skips it."""
    from ml8s.data.fingerprint import FileEntry, Fingerprint
    from ml8s.data.sources import read_verified

    bucket = moto_server.make_bucket()  # type: ignore[attr-defined]
    client = moto_server.client()  # type: ignore[attr-defined]
    client.put_object(Bucket=bucket, Key="d/", Body=b"")
    client.put_object(Bucket=bucket, Key="d/sub/", Body=b"")
    client.put_object(Bucket=bucket, Key="d/a.csv", Body=b"x\n1\n")
    for key, value in moto_server.env().items():  # type: ignore[attr-defined]
        monkeypatch.setenv(key, value)
    etag = client.head_object(Bucket=bucket, Key="d/a.csv")["ETag"].strip('"')
    entries = (
        FileEntry(relative_path="", checksum="d41d8cd98f00b204e9800998ecf8427e", size=0),
        FileEntry(relative_path="a.csv", checksum=etag, size=4),
        FileEntry(relative_path="sub/", checksum="d41d8cd98f00b204e9800998ecf8427e", size=0),
    )
    fingerprint = Fingerprint(data_root=f"s3://{bucket}/d", fingerprint="0" * 64, entries=entries)
    assert [(e.relative_path, data) for e, data in read_verified(fingerprint)] == [("a.csv", b"x\n1\n")]
