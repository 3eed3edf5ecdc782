"""A run already in the chain is never committed twice: sequentially, racing, or after a crash."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_chain_support import (  # noqa: F401  (fixtures)
    CHAIN,
    build,
    chain_fixture,
    local_root_fixture,
    meta,
    payload,
    race_worker,
    spawn_all,
)

from ml8s.chain import ChainStore, paths, runindex, verify_chain


def run_count(chain: ChainStore, name: str) -> int:
    return sum(v.header.full_config_hash == meta(name).full_config_hash for v in chain.list())


def test_same_run_twice_gives_one_version(chain: ChainStore) -> None:
    first = chain.commit(payload("r"), meta("r"))
    chain.commit(payload("other"), meta("other"))
    assert chain.commit(payload("r"), meta("r")) == first
    assert chain.commit_with_retry(payload("r"), meta("r")) == first
    assert run_count(chain, "r") == 1 and chain.head().counter == 2
    assert "already_committed" not in [e.event for e in chain.audit.events()]  # a plain re-run writes nothing


def test_a_rerun_writes_nothing(chain: ChainStore) -> None:
    first = chain.commit(payload("r"), meta("r"))
    before = chain.store.list("")
    assert ChainStore(chain.store, CHAIN).commit_with_retry(payload("r"), meta("r")) == first
    assert chain.store.list("") == before


def test_a_different_payload_for_the_same_run_is_recorded(chain: ChainStore) -> None:
    first = chain.commit(payload("r"), meta("r"))
    assert chain.commit(payload("not-deterministic"), meta("r")) == first
    assert "payload differs" in chain.audit.events()[-1].detail


def test_crash_between_swap_and_record(chain: ChainStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """The committer dies after its head swap won, before the run record: no duplicate later."""
    chain.init()

    def crash(*args: object) -> None:
        raise KeyboardInterrupt("killed")

    monkeypatch.setattr(runindex, "record", crash)
    with pytest.raises(KeyboardInterrupt):
        chain.commit(payload("r"), meta("r"))
    monkeypatch.undo()
    record = chain.key(paths.RUNS, f"{meta('r').full_config_hash}.json")
    assert not chain.store.exists(record)
    chain.commit(payload("x"), meta("x"))
    again = ChainStore(chain.store, CHAIN).commit_with_retry(payload("r"), meta("r"))
    assert again.counter == 1 and run_count(chain, "r") == 1
    assert chain.store.exists(record)  # repaired


def test_record_lost_later_is_recovered_from_the_chain(chain: ChainStore) -> None:
    build(chain, 3)
    chain.store.delete(chain.key(paths.RUNS, f"{meta('v2').full_config_hash}.json"))
    assert ChainStore(chain.store, CHAIN).commit(payload("v2"), meta("v2", step=20)).counter == 2


def test_racing_identical_runs_give_one_version(chain: ChainStore, local_root: Path) -> None:
    chain.init()
    outcomes = list(spawn_all(race_worker, [(("local", str(local_root)), "same", None, True) for _ in range(6)]))
    assert {o[0] for o in outcomes} == {"won"}, outcomes
    assert {(o[1], o[2]) for o in outcomes} == {(1, chain.head().block_hash)}
    assert run_count(chain, "same") == 1
    assert verify_chain(chain, strict_orphans=True).ok  # the losers' uploads are gone
