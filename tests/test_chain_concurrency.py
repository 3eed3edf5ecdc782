"""Many processes commit to one chain: a linear history, exactly one winner per parent, nothing left behind.

Real processes (spawn), on the local backend and on radosgw, whose conditional PUTs are atomic (moto's
are not: it is kept for protocol cases, test_chain_s3.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_chain_support import (  # noqa: F401  (fixtures)
    CHAIN,
    StoreSpec,
    commit_worker,
    local_root_fixture,
    open_spec,
    race_worker,
    rgw_spec_fixture,
    spawn_all,
)

from ml8s.chain import ChainStore, collect_garbage, verify_chain

PROCESSES, COMMITS = 16, 5
# radosgw: 16 processes x 3 commits still race for every counter (each process retries against 15 others), at
# about half the time of 5 (53 s against 96 s alone on two cores: every attempt is several S3 requests).
RADOSGW_COMMITS = 3


def contend(spec: StoreSpec, *, verify_while_committing: bool = False, commits: int = COMMITS) -> ChainStore:
    chain = ChainStore(open_spec(spec), CHAIN)
    chain.init()
    results = {}
    for worker, done in spawn_all(commit_worker, [(spec, w, commits) for w in range(PROCESSES)], timeout=180):
        results[worker] = done
        if verify_while_committing:  # readers see a consistent chain while commits land and losers roll back
            during = verify_chain(chain, payloads=False)
            assert during.ok, during.findings
            assert not collect_garbage(chain).items  # dry run, default grace: nothing is old enough

    failed = {w: r for w, r in results.items() if isinstance(r, str)}
    assert not failed, failed
    counters = sorted(c for done in results.values() for c, _ in done)
    assert counters == list(range(1, PROCESSES * commits + 1))  # every commit got its own counter
    report = verify_chain(chain, payloads=False)
    assert report.ok, report.findings
    assert len(report.chain) == PROCESSES * commits + 1 and report.incomplete == ()
    gc = collect_garbage(chain, grace_s=0, dry_run=False)
    assert verify_chain(chain, strict_orphans=True).ok, gc
    events = [e.event for e in chain.audit.events()]
    assert events.count("committed") == PROCESSES * commits
    assert all(e.rolled_back for e in chain.audit.events() if e.event == "conflict")
    return chain


def race(spec: StoreSpec, racers: int) -> None:
    chain = ChainStore(open_spec(spec), CHAIN)
    genesis = chain.init()
    outcomes = list(spawn_all(race_worker, [(spec, f"racer-{i}", genesis.block_hash, False) for i in range(racers)]))
    winners = [o for o in outcomes if o[0] == "won"]
    assert len(winners) == 1, outcomes
    assert {o[0] for o in outcomes} - {"won"} <= {"NotFastForwardError", "ConflictError"}, outcomes
    report = verify_chain(chain, strict_orphans=True)  # strict: not one loser's object is left
    assert report.ok and len(report.chain) == 2 and report.incomplete == (), report
    assert chain.head().block_hash == winners[0][2]


def test_sixteen_processes_local(local_root: Path) -> None:
    contend(("local", str(local_root)), verify_while_committing=True)


def test_exactly_one_winner_local(local_root: Path) -> None:
    race(("local", str(local_root)), 8)


def test_sixteen_processes_radosgw(rgw_spec: StoreSpec) -> None:
    contend(rgw_spec, commits=RADOSGW_COMMITS)


def test_exactly_one_winner_radosgw(rgw_spec: StoreSpec) -> None:
    race(rgw_spec, 8)


@pytest.mark.parametrize("racers", [4])
def test_racing_inits_make_one_genesis(local_root: Path, racers: int) -> None:
    spec = ("local", str(local_root))
    outcomes = list(spawn_all(race_worker, [(spec, f"r{i}", None, True) for i in range(racers)]))
    assert {o[0] for o in outcomes} == {"won"}
    chain = ChainStore(open_spec(spec), CHAIN)
    report = verify_chain(chain, strict_orphans=True)
    assert report.ok and len(report.chain) == racers + 1
