"""The inference client and the consumer: pinned and tracking, fast and slow paths, and every refusal
(tampered DELTA, wrong base, rolled-back head, fork, inconsistent weights) leaving the served model untouched."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
import torch
from serving_support import chain_at, meta, weights_series

from ml8s.chain import ChainStore, ChainVersion, PayloadBuilder, PayloadKind, RetryPolicy, WeightsFields, verify_chain
from ml8s.deltas import encode_delta, weights_hash
from ml8s.errors import (
    ChainForkError,
    ChainRollbackError,
    ChecksumError,
    DeltaBaseMismatchError,
    DeltaDtypeError,
    DeltaShapeError,
    NoModelGraphError,
    ServingError,
    WeightsError,
    WeightsMismatchError,
)
from ml8s.serving import ClientConfig, DeltaConsumer, DeltaProducer, InferenceClient
from ml8s.weights import WEIGHTS_DELTA, WeightsMode, weights_problems


def _published(tmp_path: Path, count: int, interval: int = 4) -> tuple[ChainStore, list[dict[str, torch.Tensor]]]:
    chain = chain_at(f"file://{tmp_path}/root")
    series = weights_series(11, torch.float32, count)
    producer = DeltaProducer(chain, interval=interval)
    for n, weights in enumerate(series):
        producer.publish_sync(weights, meta(f"w-{n}"))
    return chain, series


def _snapshot(client: InferenceClient) -> tuple[int, str, dict[str, torch.Tensor]]:
    served = client.served
    assert served is not None
    return served.info.counter, served.weights.weights_hash, {k: v.clone() for k, v in served.weights.tensors.items()}


def _untouched(client: InferenceClient, before: tuple[int, str, dict[str, torch.Tensor]]) -> None:
    counter, digest, tensors = _snapshot(client)
    assert (counter, digest) == before[:2]
    assert weights_hash(tensors) == digest
    assert all(torch.equal(tensors[k], before[2][k]) for k in tensors)


def test_tracking_takes_the_fast_path_then_the_slow_one(tmp_path: Path) -> None:
    chain, series = _published(tmp_path, 3, interval=4)
    client = InferenceClient(chain, ClientConfig())
    assert client.refresh() and client.version is not None and client.version.counter == 3
    assert client.stats.slow == 1 and not client.refresh()
    producer = DeltaProducer(chain, interval=4)
    for n, weights in enumerate(weights_series(12, torch.float32, 2), start=10):
        producer.publish_sync(weights, meta(f"w-{n}"))  # v4 a DELTA (fast: 3 -> 4), v5 the FULL anchor
    assert client.refresh() and client.version.counter == 5 and client.version.payload_kind == "full"
    assert client.stats.slow == 2
    producer.publish_sync(series[0], meta("w-20"))  # v6: a DELTA on v5
    assert client.refresh() and client.stats.fast == 1
    assert client.version.weights_hash == weights_hash(series[0]) == chain.head().header.weights_hash


def test_pinned_never_changes(tmp_path: Path) -> None:
    chain, series = _published(tmp_path, 3)
    client = InferenceClient(chain, ClientConfig(pinned=2))
    assert client.refresh()
    before = _snapshot(client)
    assert before[:2] == (2, weights_hash(series[1]))
    DeltaProducer(chain, interval=4).publish_sync(series[0], meta("later"))
    assert not client.refresh()
    _untouched(client, before)


def test_async_client_polls_and_swaps(tmp_path: Path) -> None:
    chain, series = _published(tmp_path, 2)

    async def scenario() -> tuple[int, int]:
        client = InferenceClient(chain, ClientConfig(poll_interval_s=0.05))
        await client.start()
        first = client.version.counter if client.version else -1
        await asyncio.to_thread(DeltaProducer(chain, interval=4).publish_sync, series[0], meta("async"))
        for _ in range(200):
            if client.version is not None and client.version.counter == 3:
                break
            await asyncio.sleep(0.05)
        await client.stop()
        with pytest.raises(NoModelGraphError, match="no model graph"):
            await client.predict([{"x": "1"}])
        return first, client.version.counter if client.version else -1

    assert asyncio.run(scenario()) == (2, 3)


def test_tampered_delta_is_refused(tmp_path: Path) -> None:
    chain, _ = _published(tmp_path, 2)
    client = InferenceClient(chain, ClientConfig())
    client.refresh()
    before = _snapshot(client)
    DeltaProducer(chain, interval=4).publish_sync(weights_series(13, torch.float32, 1)[0], meta("next"))
    head = chain.head()
    path = tmp_path / "root" / chain.version_key(head.version_dir, "payload", WEIGHTS_DELTA)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(ChecksumError, match="sha256"):
        client.refresh()
    _untouched(client, before)
    assert not verify_chain(chain, weights=weights_problems).ok


def test_consumer_refuses_a_delta_on_another_base(tmp_path: Path) -> None:
    chain, series = _published(tmp_path, 4)
    consumer = DeltaConsumer(chain)
    v1 = asyncio.run(consumer.get_checkpoint(1))
    assert v1 is not None and asyncio.run(consumer.get_checkpoint(99)) is None
    tensors = v1.weights.tensors
    assert asyncio.run(consumer.apply_delta_in_place(tensors, 3, 1)) is None  # v3 is a DELTA on v2, not on v1
    assert asyncio.run(consumer.apply_delta_in_place(tensors, 99, 1)) is None  # was CHAIN_VERSION_NOT_FOUND
    with pytest.raises(DeltaDtypeError, match=r"is a list; expected version 1's weights as torch tensors"):
        asyncio.run(consumer.apply_delta_in_place({**tensors, "extra": [0.0]}, 2, 1))  # was a pydantic error
    with pytest.raises(DeltaBaseMismatchError):  # the caller says v2, the tensors are v1's
        asyncio.run(consumer.apply_delta_in_place(tensors, 3, 2))
    assert weights_hash(tensors) == weights_hash(series[0])
    updated = asyncio.run(consumer.apply_delta_in_place(tensors, 2, 1))
    assert updated is not None and weights_hash(tensors) == weights_hash(series[1]) == updated.weights_hash
    latest = asyncio.run(consumer.discover_latest())
    assert latest is not None and latest.counter == 4
    below = asyncio.run(consumer.discover_latest(before=3))
    assert below is not None and below.counter == 2


def test_a_delta_applied_twice_is_refused_not_repeated(tmp_path: Path) -> None:
    """A DELTA is assignment: applied again to its own result it verified and returned success, the caller's
    claim that the tensors were the base never checked. The tensors' hash is the base's, or nothing is done."""
    chain, series = _published(tmp_path, 3)
    consumer = DeltaConsumer(chain)
    v1 = consumer.get_checkpoint_sync(1)
    assert v1 is not None
    tensors = v1.weights.tensors
    assert consumer.apply_delta_in_place_sync(tensors, 2, 1) is not None
    with pytest.raises(DeltaBaseMismatchError, match=r"not: they are already version 2's; expected weights hash"):
        consumer.apply_delta_in_place_sync(tensors, 2, 1)  # a retry after a timed-out call that did finish
    assert weights_hash(tensors) == weights_hash(series[1])
    # weights that agree with version 2 at every position its DELTA writes, and differ elsewhere
    changed = {name: t.clone() for name, t in series[1].items()}
    name = next(n for n in sorted(changed) if bool((changed[n] == series[0][n]).any()))
    flat = changed[name].view(-1)
    flat[int((flat == series[0][name].view(-1)).nonzero()[0])] += 1.0  # an element version 2's DELTA leaves alone
    with pytest.raises(DeltaBaseMismatchError, match=f"they hash to {weights_hash(changed)}"):
        consumer.apply_delta_in_place_sync(changed, 2, 1)
    assert weights_hash(changed) != weights_hash(series[1])  # nothing was changed


def test_rolled_back_head_is_refused(tmp_path: Path) -> None:
    chain, _ = _published(tmp_path, 3)
    client = InferenceClient(chain, ClientConfig())
    client.refresh()
    before = _snapshot(client)
    pointer = chain.read_head()
    assert pointer is not None
    chain.swap_head(chain.get(2), pointer[1])
    with pytest.raises(ChainRollbackError):
        client.refresh()
    _untouched(client, before)


def test_fork_is_refused(tmp_path: Path) -> None:
    chain, _ = _published(tmp_path, 3)
    client = InferenceClient(chain, ClientConfig())
    client.refresh()
    before = _snapshot(client)
    pointer = chain.read_head()
    assert pointer is not None
    chain.swap_head(chain.get(1), pointer[1])  # rewrite history from v1: v2', v3', v4'
    forger = DeltaProducer(ChainStore(chain.store, chain.name), interval=4)
    for n, weights in enumerate(weights_series(14, torch.float32, 3)):
        forger.publish_sync(weights, meta(f"fork-{n}"))
    with pytest.raises(ChainForkError):
        client.refresh()
    _untouched(client, before)


def test_inconsistent_weights_are_refused_and_reported(tmp_path: Path) -> None:
    """A committer records a weights hash its DELTA does not produce: verify names it, clients refuse it."""
    chain, series = _published(tmp_path, 2)
    client = InferenceClient(chain, ClientConfig())
    client.refresh()
    before = _snapshot(client)

    def lying(parent: ChainVersion) -> tuple[dict[str, bytes], WeightsFields]:
        delta = encode_delta(series[1], weights_series(15, torch.float32, 1)[0])
        fields = WeightsFields(
            payload_kind=PayloadKind.DELTA,
            weights_hash=weights_hash(series[0]),
            weights_full_counter=1,
            delta_base_counter=parent.counter,
            delta_base_block_hash=parent.block_hash,
        )
        return {WEIGHTS_DELTA: delta}, fields

    builder: PayloadBuilder = lying
    chain.commit_with_retry(builder, meta("liar"), RetryPolicy())
    with pytest.raises(WeightsMismatchError):
        client.refresh()
    _untouched(client, before)
    findings = verify_chain(chain, weights=weights_problems).findings
    assert [(f.check, f.counter) for f in findings] == [("weights_hash", 3)]


def test_non_float_and_shape_changes_fall_back_to_full(tmp_path: Path) -> None:
    chain, series = _published(tmp_path, 1)
    producer = DeltaProducer(chain, interval=10)
    ints = {"steps": torch.arange(5, dtype=torch.int64), **series[0]}
    assert producer.publish_sync(ints, meta("ints")).payload_kind == "full"
    assert chain.head().header.weights_hash == ""  # no weights hash: no DELTA may follow
    assert producer.publish_sync(series[0], meta("after-ints")).payload_kind == "full"
    wider = {**series[0], "block.0.bias": torch.zeros(49)}
    assert producer.publish_sync(wider, meta("wider")).payload_kind == "full"
    with pytest.raises(DeltaShapeError):
        producer.publish_sync(series[0], meta("narrower"), mode=WeightsMode.DELTA)
    assert verify_chain(chain, weights=weights_problems).ok
    with pytest.raises(DeltaDtypeError):  # a client cannot serve integer tensors: named, nothing served
        InferenceClient(chain, ClientConfig(pinned=2)).refresh()
    producer.publish_sync({**ints, "steps": torch.arange(6)}, meta("ints-2"))
    with pytest.raises(WeightsError, match="no weights hash"):  # no DELTA on a version without one
        producer.publish_sync(series[0], meta("d"), mode=WeightsMode.DELTA)


def test_missing_anchor_is_refused(tmp_path: Path) -> None:
    chain, _ = _published(tmp_path, 3)
    full = chain.get(1)
    os.remove(tmp_path / "root" / chain.version_key(full.version_dir, "payload", "model_native.safetensors"))
    client = InferenceClient(chain, ClientConfig())
    with pytest.raises(ChecksumError, match="missing"):
        client.refresh()
    assert client.served is None
    with pytest.raises(ServingError, match="no version is served"):
        client.predict_sync([])


def test_restarted_client_serves_the_head_it_checked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 21, class 3: a restarted tracking client whose saved head is unchanged serves the version its
    poll read and checked; a head flipped to an unsigned forgery right after that poll is never loaded."""
    from test_chain_signing import KEY_A, ROOT, ROOT_KEY, intruder

    from ml8s.chain import ReadTrust, adopt_policy

    chain = ChainStore(chain_at(f"file://{tmp_path}/root").store, "served", signer=KEY_A, trust_root=ROOT)
    adopt_policy(chain, [ROOT_KEY, KEY_A], [KEY_A.public_key], root=ROOT)
    producer = DeltaProducer(chain, interval=4)
    for n, weights in enumerate(weights_series(5, torch.float32, 2)):
        producer.publish_sync(weights, meta(f"signed-{n}"))
    checked = chain.head()
    trust = ReadTrust(root=ROOT, require_signed=True)
    config = ClientConfig(state_path=str(tmp_path / "state.json"))
    assert InferenceClient(ChainStore(chain.store, "served"), config, trust=trust).refresh()
    reader = ChainStore(chain.store, "served")
    real_head, reads = reader.head, []

    def flip_after_the_poll() -> ChainVersion:
        reads.append(1)
        if len(reads) == 1:
            return real_head()
        return intruder(chain, f"flip-{len(reads)}", signer=None, policy=0)  # the store writer's forgery

    monkeypatch.setattr(reader, "head", flip_after_the_poll)
    restarted = InferenceClient(reader, config, trust=trust)
    assert restarted.refresh() and restarted.version is not None
    assert (restarted.version.counter, restarted.version.block_hash) == (checked.counter, checked.block_hash)
    assert len(reads) == 1  # one head read: what it checked is what it loaded


def test_known_weights_of_the_version_asked_are_hashed_not_taken_on_trust(tmp_path: Path) -> None:
    """``get_checkpoint(N, known=N's weights)`` returned the caller's tensors as verified version N: edited in
    place since (a server that fine-tunes what it serves), they came back labelled with N's weights hash."""
    chain, series = _published(tmp_path, 3)
    consumer = DeltaConsumer(chain)
    v2 = consumer.get_checkpoint_sync(2)
    assert v2 is not None
    again = consumer.get_checkpoint_sync(2, known=v2.weights)  # untouched: served from the copy
    assert again is not None and weights_hash(again.weights.tensors) == weights_hash(series[1])
    name = sorted(v2.weights.tensors)[0]
    v2.weights.tensors[name].view(-1)[0] += 1.0
    with pytest.raises(WeightsMismatchError, match=r"version 2 \(v0000000002_.*\): the weights given as known hash"):
        consumer.get_checkpoint_sync(2, known=v2.weights)
    with pytest.raises(DeltaBaseMismatchError):  # a DELTA above them: its result hash refused them already
        consumer.get_checkpoint_sync(3, known=v2.weights)
