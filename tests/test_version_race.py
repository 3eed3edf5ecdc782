"""A version committed between a reader's head read (its poll) and its lookup of that version: the walk from the
older head said "has no version N". ``DeltaConsumer`` (get_checkpoint, apply_delta_in_place) and WARM_START=N now
read the head again (every check of a poll on it) and find N, and still refuse a version the fresh head's checks
refuse. The interleaving is forced by a hook right after the poll, never by a race."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from serving_support import meta, weights_series
from test_chain_signing import intruder
from test_promotion import _chain

from ml8s.chain import ChainStore, ChainVersion, Follower, ReadTrust
from ml8s.errors import UntrustedVersionError, WarmStartNotFoundError
from ml8s.lineage.parent import find_parent
from ml8s.serving import DeltaConsumer
from ml8s.weights import WeightsMode, commit_weights, rebuild_weights


def _after_first_poll(monkeypatch: pytest.MonkeyPatch, act: Callable[[], None]) -> list[int]:
    """Run ``act`` once, right after the first poll read and checked the head (before the reader's lookup)."""
    real, calls = Follower.poll, []

    def poll_then_commit(self: Follower) -> ChainVersion | None:
        found = real(self)
        calls.append(1)
        if len(calls) == 1:
            act()
        return found

    monkeypatch.setattr(Follower, "poll", poll_then_commit)
    return calls


def _commit(chain: ChainStore, seed: int = 23) -> Callable[[], None]:
    def act() -> None:
        commit_weights(chain, weights_series(seed, torch.float32, 1)[0], meta(f"late-{seed}"), interval=4)

    return act


def _forge(chain: ChainStore, name: str) -> Callable[[], None]:
    def act() -> None:
        intruder(chain, name, signer=None, policy=0)  # a store writer without the key: no signature

    return act


def _consumer(chain: ChainStore) -> DeltaConsumer:
    return DeltaConsumer(ChainStore(chain.store, chain.name), trust=ReadTrust())


def test_a_consumer_rebuilds_a_version_committed_after_its_poll(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    chain = _chain(tmp_path / "root", "late", signed=True)
    consumer = _consumer(chain)
    calls = _after_first_poll(monkeypatch, _commit(chain))
    served = consumer.get_checkpoint_sync(5)  # was None: "has no version 5 (head v4)"
    assert calls and served is not None and served.info.counter == 5
    assert consumer.follower.current is not None and consumer.follower.current.counter == 5
    assert consumer.get_checkpoint_sync(6) is None  # above the head read again too: still no such version


def test_a_delta_committed_after_the_poll_applies_in_place(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    chain = _chain(tmp_path / "root", "delta", signed=True)
    consumer = _consumer(chain)
    held = rebuild_weights(chain, chain.get(4))
    tensors = {name: tensor.clone() for name, tensor in held.tensors.items()}
    late = weights_series(11, torch.float32, 5)[4]  # the series' next hop

    def act() -> None:
        commit_weights(chain, late, meta("delta-5"), interval=4, mode=WeightsMode.DELTA)

    _after_first_poll(monkeypatch, act)
    applied = consumer.apply_delta_in_place_sync(tensors, 5, 4)  # was None: the slow path for a DELTA at hand
    assert applied is not None and applied.version.counter == 5
    assert applied.weights_hash == chain.get(5).header.weights_hash


def test_a_version_forged_after_the_consumers_poll_is_refused_not_served(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    chain = _chain(tmp_path / "root", "forged", signed=True)
    consumer = _consumer(chain)
    _after_first_poll(monkeypatch, _forge(chain, "forged"))
    with pytest.raises(UntrustedVersionError):
        consumer.get_checkpoint_sync(5)


def test_warm_start_n_finds_a_version_committed_after_its_poll(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    chain = _chain(tmp_path / "root", "warm", signed=True)
    calls = _after_first_poll(monkeypatch, _commit(chain))
    parent, head = find_parent(ChainStore(chain.store, "warm"), 5, ReadTrust())  # was WarmStartNotFoundError
    assert calls and parent is not None and head is not None
    # the head returned is the one read again: v5 is no stale parent of an older head
    assert parent.counter == head.counter == 5 and parent.block_hash == chain.get(5).block_hash
    says = r"WARM_START=6: CHAIN_VERSION_NOT_FOUND: chain 'warm' has no version 6 \(head v5\)"
    with pytest.raises(WarmStartNotFoundError, match=says):
        find_parent(ChainStore(chain.store, "warm"), 6, ReadTrust())


def test_warm_start_n_forged_after_the_poll_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    chain = _chain(tmp_path / "root", "wforged", signed=True)
    _after_first_poll(monkeypatch, _forge(chain, "wforged"))
    with pytest.raises(UntrustedVersionError):
        find_parent(ChainStore(chain.store, "wforged"), 5, ReadTrust())
