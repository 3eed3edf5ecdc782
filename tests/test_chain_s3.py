"""The chain on S3 (moto): the protocol through the real S3Store, its 412s and its unknown outcomes.

moto's conditional PUT is not atomic, so the concurrency tests run on radosgw (test_chain_concurrency.py);
here moto checks the request-level behaviour: keys, preconditions, lost responses, a missing bucket.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import urllib3
from botocore.exceptions import ReadTimeoutError
from test_chain_support import (  # noqa: F401  (fixtures)
    CHAIN,
    HookStore,
    StoreSpec,
    meta,
    moto_spec_fixture,
    open_spec,
    payload,
)

import ml8s.chain.commit as commit_module
from ml8s.chain import ChainStore, collect_garbage, gc, paths, verify_chain
from ml8s.errors import ConflictError, StoreError
from ml8s.store import S3Store


def test_chain_on_s3(moto_spec: StoreSpec) -> None:
    chain = ChainStore(open_spec(moto_spec), CHAIN)
    genesis = chain.init()
    versions = [chain.commit(payload(f"s{i}"), meta(f"s{i}", step=i)) for i in range(3)]
    assert chain.list() == [genesis, *versions]
    assert chain.fetch_payload(versions[1], "model.bin") == payload("s1")["model.bin"]
    keys = {i.key for i in chain.store.list(chain.key("versions"))}
    assert chain.version_key(versions[2].version_dir, "block.pb") in keys
    assert chain.version_key(versions[2].version_dir, "payload", "config.json") in keys
    assert verify_chain(chain, strict_orphans=True).ok
    assert collect_garbage(chain, grace_s=0, dry_run=False).items == ()
    assert chain.commit(payload("s1"), meta("s1", step=1)) == versions[1]  # the run index, on S3


def test_gc_records_its_sightings_on_s3_and_never_collects_them(moto_spec: StoreSpec) -> None:
    """On S3 the record is saved with an ETag compare-and-swap; it is neither collected nor reported."""
    chain = ChainStore(open_spec(moto_spec), CHAIN)
    chain.init()
    leftover, record = chain.key(paths.TMP, "w-crashed"), chain.key(paths.TMP, gc.SEEN_NAME)
    chain.store.put_if_absent(leftover, b"partial")
    first = collect_garbage(chain, dry_run=False)
    assert first.items == () and first.kept_recent == (leftover,)
    (seen,) = json.loads(chain.store.get(record))["sightings"]
    assert seen["key"] == leftover
    later = collect_garbage(chain, dry_run=False, now=seen["first_seen"] + gc.TMP_GRACE_MIN_S + gc.DEFAULT_GRACE_S)
    assert [(i.path, i.deleted) for i in later.items] == [(leftover, True)] and later.kept_recent == ()
    assert [i.key for i in chain.store.list(chain.key(paths.TMP))] == [record]
    assert json.loads(chain.store.get(record)) == {"sightings": []}
    assert verify_chain(chain, strict_orphans=True).ok


def test_lost_swap_is_a_conflict_and_rolled_back(moto_spec: StoreSpec) -> None:
    store = open_spec(moto_spec)
    chain, rival = ChainStore(store, CHAIN), ChainStore(store, CHAIN)
    chain.init()

    def rival_first(key: str, data: bytes, token: str | None) -> None:
        rival.commit(payload("rival"), meta("rival"))

    with pytest.raises(ConflictError):  # the real If-Match 412 from the server
        ChainStore(HookStore(store, rival_first), CHAIN).commit(payload("me"), meta("me"))
    assert verify_chain(chain, strict_orphans=True).ok and chain.head().counter == 1


def _lose_response(store: S3Store, *, send_first: bool) -> list[int]:
    """Make the next conditional PUT of chain.json time out, after (or instead of) reaching the server."""
    calls: list[int] = []

    def before_send(request: Any, **_: Any) -> None:
        if not request.url.split("?")[0].endswith("/chain.json") or request.method != "PUT" or calls:
            return
        calls.append(1)
        if send_first:
            body = request.body if isinstance(request.body, bytes) else request.body.read()
            urllib3.PoolManager().request("PUT", request.url, body=body, headers=dict(request.headers))
        raise ReadTimeoutError(endpoint_url=request.url)

    store._once.meta.events.register("before-send.s3.PutObject", before_send)
    return calls


@pytest.mark.parametrize("landed", [True, False], ids=["landed", "not-landed"])
def test_swap_with_a_lost_response(moto_spec: StoreSpec, monkeypatch: pytest.MonkeyPatch, landed: bool) -> None:
    """Landed: the store reads back its own bytes and reports success. Not landed: the chain sees an unknown
    outcome, finds the head unchanged and sends the swap again. Either way: won, once."""
    monkeypatch.setattr(commit_module, "RESOLVE_DELAY_S", 0.0)
    store = open_spec(moto_spec)
    assert isinstance(store, S3Store)
    chain = ChainStore(store, CHAIN)
    chain.init()
    calls = _lose_response(store, send_first=landed)
    version = chain.commit(payload("me"), meta("me"))
    assert calls == [1] and chain.head() == version
    events = [e.event for e in chain.audit.events()]
    assert ("unknown_outcome_resolved" in events) is not landed
    assert verify_chain(chain, strict_orphans=True).ok


def test_missing_bucket(moto_spec: StoreSpec) -> None:
    _, uri, env = moto_spec
    chain = ChainStore(S3Store(uri.replace("s3://", "s3://no-such-bucket-"), env=env), CHAIN)
    with pytest.raises(StoreError, match="does not exist"):
        chain.init()
