"""A tracking client under a committer storm (many processes committing weights to one chain), on the local
store and on radosgw: every model it serves is a chain version's weights, whole, and it ends on the head;
a pinned client never changes."""

from __future__ import annotations

import os
import time
from multiprocessing.process import BaseProcess
from pathlib import Path

import pytest
from process_support import process_context, reap
from s3_servers import S3Endpoint
from serving_support import chain_at, storm_process

from ml8s.chain import ChainStore, verify_chain
from ml8s.deltas import weights_hash
from ml8s.serving import ClientConfig, InferenceClient

COMMITTERS = 8
EACH = 2


def _storm(root_uri: str, name: str, env: dict[str, str], tmp_path: Path) -> None:
    chain = chain_at(root_uri, name)
    context = process_context()  # each committer is a process of its own, forked warm (torch imported once)

    def committer(idx: int, count: int) -> BaseProcess:
        log = str(tmp_path / f"committer-{idx}.log")
        return context.Process(target=storm_process, args=(root_uri, name, idx, count, env, log))

    first = committer(99, 1)  # v1, so the pinned client has something to pin before the storm starts
    first.start()
    reap([first], timeout=300)
    assert first.exitcode == 0, (tmp_path / "committer-99.log").read_text()[-2000:]
    pinned = InferenceClient(chain, ClientConfig(pinned=1))
    pinned.refresh()
    pinned_before = pinned.version
    tracking = InferenceClient(ChainStore(chain.store, name), ClientConfig(state_path=str(tmp_path / "state.json")))
    procs = [committer(i, EACH) for i in range(COMMITTERS)]
    for proc in procs:
        proc.start()
    served: list[tuple[int, str]] = []
    try:
        while any(p.is_alive() for p in procs):
            if tracking.refresh():
                now = tracking.served
                assert now is not None
                assert weights_hash(now.weights.tensors) == now.info.weights_hash  # whole, never partial
                served.append((now.info.counter, now.info.weights_hash))
            time.sleep(0.05)
    finally:
        reap(procs, timeout=300)
    logs = [(tmp_path / f"committer-{i}.log").read_text()[-2000:] for i in range(COMMITTERS)]
    assert [p.exitcode for p in procs] == [0] * COMMITTERS, logs
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
