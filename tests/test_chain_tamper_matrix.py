"""The tamper matrix of issue 12, in one place: each way someone who can write the store may tamper with a
signed, anchored chain is detected and named by ``verify_chain`` and refused, with a named error, by a
follower.

The chain: genesis, trust policy 1 (the anchor key), v1..v3 signed; an anchor of v3. The follower either
starts from that anchor (an inference node that knows the chain up to v3) or, for the cases that change
nothing above its head, is a fresh node joining after the tampering, which checks every version.
The tampering itself reuses the forgeries of the anchor and signing tests.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from pathlib import Path

import pytest
from test_chain_anchor import DAY, KEY, NOW, _forged_head, _rehashed_rewrite, _rollback
from test_chain_signing import KEY_B, ROOT, ROOT_KEY, intruder
from test_chain_support import CHAIN, meta, payload

from ml8s.chain import (
    Anchor,
    ChainStore,
    ChainVersion,
    Follower,
    ReadTrust,
    adopt_policy,
    make_anchor,
    paths,
    verify_chain,
)
from ml8s.errors import (
    ChainCorruptionError,
    ChainEvidenceError,
    ChainForkError,
    ChainFrozenError,
    ChainRollbackError,
    UntrustedVersionError,
)
from ml8s.store import LocalStore

Tamper = Callable[[ChainStore, list[ChainVersion]], None]


def _root(chain: ChainStore) -> Path:
    return Path(chain.store.root_uri.removeprefix("file://"))


def _outside_key(chain: ChainStore, _: list[ChainVersion]) -> None:
    intruder(chain, "evil", signer=KEY_B, policy=1)  # signed, naming policy 1, by a key it does not list


def _forged(chain: ChainStore, versions: list[ChainVersion]) -> None:
    _forged_head(_root(chain), versions)


def _rolled_back(chain: ChainStore, versions: list[ChainVersion]) -> None:
    _rollback(_root(chain), versions)


def _rewritten(chain: ChainStore, versions: list[ChainVersion]) -> None:
    _rehashed_rewrite(_root(chain), versions)


def _frozen(chain: ChainStore, versions: list[ChainVersion]) -> None:
    """Nothing is changed: the head stays at the anchored v3 while time passes the anchor's expiry."""


def _run_index_deleted(chain: ChainStore, _: list[ChainVersion]) -> None:
    for info in chain.store.list(chain.key(paths.RUNS)):
        chain.store.delete(info.key)


def _audit_deleted(chain: ChainStore, _: list[ChainVersion]) -> None:
    for info in chain.store.list(chain.key(paths.AUDIT)):
        chain.store.delete(info.key)


# (tampering, what verify names, the follower's error and its check (None: its class names it), the
# follower starts from the anchor, time of the check)
CASES: dict[str, tuple[Tamper, str, type[ChainCorruptionError], str | None, bool, dt.datetime]] = {
    "key-outside-the-policy": (_outside_key, "untrusted_key", UntrustedVersionError, "untrusted_key", True, NOW),
    "forged-head": (_forged, "anchor_fork", ChainForkError, None, True, NOW),
    "rollback": (_rolled_back, "anchor_rollback", ChainRollbackError, None, True, NOW),
    "freeze": (_frozen, "anchor_expired", ChainFrozenError, "anchor_expired", True, NOW + 2 * DAY),
    "rehashed-rewrite": (_rewritten, "anchor_fork", ChainForkError, None, True, NOW),
    "run-index-deleted": (_run_index_deleted, "run_index", ChainEvidenceError, "run_index", False, NOW),
    "audit-events-deleted": (_audit_deleted, "audit_missing", ChainEvidenceError, "audit_missing", False, NOW),
}


@pytest.fixture(name="anchored")
def anchored_fixture(tmp_path: Path) -> tuple[ChainStore, list[ChainVersion], Anchor]:
    chain = ChainStore(LocalStore(str(tmp_path / "root")), CHAIN, signer=KEY)
    chain.init()
    adopt_policy(chain, [ROOT_KEY, KEY], [KEY.public_key], root=ROOT)
    for i in range(1, 4):
        chain.commit(payload(f"v{i}"), meta(f"v{i}", step=i))
    return chain, chain.list(), make_anchor(chain, KEY, DAY, NOW, ROOT)


def test_untampered_chain_passes_both(anchored: tuple[ChainStore, list[ChainVersion], Anchor]) -> None:
    chain, versions, anchor = anchored
    report = verify_chain(ChainStore(chain.store, CHAIN), anchor=anchor, now=NOW, require_signed=True, root=ROOT)
    assert report.ok, report.findings
    trust = ReadTrust(root=ROOT, require_signed=True)
    follower = Follower(ChainStore(chain.store, CHAIN), trust=trust, clock=lambda: NOW)
    assert follower.poll() == versions[-1]
    assert follower.fetch_payload(versions[-1], "model.bin") == payload("v3")["model.bin"]


@pytest.mark.parametrize("case", list(CASES))
def test_tampering_is_named_by_verify_and_refused_by_the_follower(
    anchored: tuple[ChainStore, list[ChainVersion], Anchor], case: str
) -> None:
    chain, versions, anchor = anchored
    tamper, check, error, follower_check, from_anchor, now = CASES[case]
    tamper(chain, versions)

    report = verify_chain(ChainStore(chain.store, CHAIN), anchor=anchor, now=now)
    assert check in report.checks, report.findings
    with pytest.raises(ChainCorruptionError):
        report.raise_for_findings()

    follower = Follower(ChainStore(chain.store, CHAIN), anchor=anchor if from_anchor else None, clock=lambda: now)
    before = follower.last
    with pytest.raises(error) as refused:
        follower.poll()
    assert type(refused.value) is error and refused.value.code == error.code
    if follower_check is not None:
        assert refused.value.check == follower_check
    assert follower.last == before  # it keeps what it had
