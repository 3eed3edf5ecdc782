"""A tracking client under a committer storm (many processes committing weights to one chain), on the local
store and on radosgw: every model it serves is a chain version's weights, whole, and it ends on the head;
a pinned client never changes."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from s3_servers import S3Endpoint
from serving_support import REPO, chain_at

from ml8s.chain import ChainStore, verify_chain
from ml8s.deltas import weights_hash
from ml8s.serving import ClientConfig, InferenceClient

COMMITTERS = 8
EACH = 2


def _storm(root_uri: str, name: str, env: dict[str, str], tmp_path: Path) -> None:
    chain = chain_at(root_uri, name)
    subprocess.run(  # v1, so the pinned client has something to pin before the storm starts
        [sys.executable, "tests/serving_support.py", "storm", root_uri, name, "99", "1"], cwd=REPO, env=env, check=True
    )
    pinned = InferenceClient(chain, ClientConfig(pinned=1))
    pinned.refresh()
    pinned_before = pinned.version
    tracking = InferenceClient(ChainStore(chain.store, name), ClientConfig(state_path=str(tmp_path / "state.json")))
    logs = [open(tmp_path / f"committer-{i}.log", "w") for i in range(COMMITTERS)]
    procs = [
        subprocess.Popen(
            [sys.executable, "tests/serving_support.py", "storm", root_uri, name, str(i), str(EACH)],
            cwd=REPO,
            env=env,
            stdout=logs[i],
            stderr=subprocess.STDOUT,
        )
        for i in range(COMMITTERS)
    ]
    served: list[tuple[int, str]] = []
    try:
        while any(p.poll() is None for p in procs):
            if tracking.refresh():
                now = tracking.served
                assert now is not None
                assert weights_hash(now.weights.tensors) == now.info.weights_hash  # whole, never partial
                served.append((now.info.counter, now.info.weights_hash))
            time.sleep(0.05)
    finally:
        for proc in procs:
            proc.wait(timeout=300)
        for log in logs:
            log.close()
    assert [p.returncode for p in procs] == [0] * COMMITTERS, [Path(log.name).read_text()[-2000:] for log in logs]
    while tracking.refresh():
        served.append((tracking.version.counter, tracking.version.weights_hash) if tracking.version else (-1, ""))
    versions = {v.counter: v.header.weights_hash for v in chain.list()}
    assert len(versions) == 1 + 1 + COMMITTERS * EACH
    assert served and all(versions[counter] == digest for counter, digest in served)
    head = chain.head()
    assert tracking.version is not None and (tracking.version.counter, tracking.version.weights_hash) == (
        head.counter,
        head.header.weights_hash,
    )
    assert not pinned.refresh() and pinned.version == pinned_before
    kinds = {v.header.payload_kind for v in chain.list()[1:]}
    assert kinds == {"full", "delta"}
    report = verify_chain(chain)
    assert report.ok, report.findings


def test_storm_local(tmp_path: Path) -> None:
    _storm(f"file://{tmp_path}/root", "storm", dict(os.environ), tmp_path)


def test_storm_radosgw(radosgw_server: S3Endpoint, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bucket = radosgw_server.make_bucket()
    for key, value in radosgw_server.env().items():
        monkeypatch.setenv(key, value)
    _storm(f"s3://{bucket}/root", "storm", dict(os.environ), tmp_path)
