"""Follower: accepts heads that extend the last one seen, refuses rollbacks and forks, across restarts."""

from __future__ import annotations

import datetime as dt
import shutil
from pathlib import Path

import pytest
from test_chain_support import (  # noqa: F401  (fixtures)
    build,
    chain_fixture,
    forge,
    local_root_fixture,
    meta,
    payload,
    set_head,
    version_path,
)

from ml8s.chain import ChainStore, Follower, PromotionLog, PromotionReader, SigningKey, make_anchor
from ml8s.chain.follower import SeenHead
from ml8s.errors import ChainCorruptionError, ChainForkError, ChainRollbackError, ConfigError


def test_tracks_new_heads(chain: ChainStore) -> None:
    versions = build(chain, 2)
    follower = Follower(chain)
    assert follower.poll() == versions[2]
    assert follower.poll() is None
    for i in range(3):
        chain.commit(payload(f"n{i}"), meta(f"n{i}", step=100))
    assert follower.poll() == chain.head()
    assert follower.last is not None and follower.last.counter == 5


def test_refuses_rollback(chain: ChainStore, local_root: Path) -> None:
    versions = build(chain, 4)
    follower = Follower(chain)
    follower.poll()
    set_head(local_root, versions[2])
    with pytest.raises(ChainRollbackError):
        follower.poll()
    assert follower.last is not None and follower.last.block_hash == versions[4].block_hash  # keeps what it had


@pytest.mark.parametrize("extend", [False, True], ids=["sibling", "longer-fork"])
def test_refuses_fork(chain: ChainStore, local_root: Path, extend: bool) -> None:
    """The head seen is replaced by a sibling (and, with ``extend``, a longer history on top of it)."""
    versions = build(chain, 4)
    follower = Follower(chain)
    follower.poll()
    set_head(local_root, forge(local_root, versions[4], keep_original=True, new_payload=payload("alt")))
    if extend:
        ChainStore(chain.store, chain.name).commit(payload("on-fork"), meta("on-fork", step=99))
    with pytest.raises(ChainForkError):
        follower.poll()


def test_state_survives_a_restart(chain: ChainStore, local_root: Path, tmp_path: Path) -> None:
    versions = build(chain, 3)
    state = str(tmp_path / "head.json")
    Follower(chain, state_path=state).poll()
    set_head(local_root, versions[1])
    with pytest.raises(ChainRollbackError):
        Follower(ChainStore(chain.store, chain.name), state_path=state).poll()


def test_broken_history_is_refused(chain: ChainStore, local_root: Path) -> None:
    versions = build(chain, 3)
    seen = Follower(chain)
    seen.poll()
    chain.commit(payload("n"), meta("n", step=100))
    shutil.rmtree(version_path(local_root, versions[3].version_dir))
    restarted = Follower(ChainStore(chain.store, chain.name))  # a fresh reader: nothing cached
    restarted.last = seen.last
    with pytest.raises(ChainCorruptionError) as caught:
        restarted.poll()
    assert caught.value.check == "missing_parent"


def test_a_state_that_cannot_be_saved_is_a_named_error(
    chain: ChainStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full disk under the follower's state: CONFIG_ERROR naming the file, never a bare OSError (INTERNAL_ERROR,
    a dead polling follower); nothing is left behind and the saved state is kept."""
    import errno

    import ml8s.output_files

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    build(chain, 1)
    (tmp_path / "serve").mkdir()
    state = tmp_path / "serve" / "state.json"
    Follower(chain, state_path=str(state)).poll()
    saved = state.read_bytes()
    chain.commit(payload("n"), meta("n", step=100))
    PromotionLog(chain).decide("promote", chain.head(), "manual", None)
    with monkeypatch.context() as patched:  # os.fsync fails from here on: the store writes nothing meanwhile
        patched.setattr(ml8s.output_files.os, "fsync", full)
        with pytest.raises(ConfigError, match=r"cannot save the follower state .*state\.json: No space left"):
            Follower(chain, state_path=str(state)).poll()
        with pytest.raises(ConfigError, match="cannot save the promotion state"):
            PromotionReader(chain, state_path=str(state)).gated()
    assert sorted(p.name for p in state.parent.iterdir()) == ["state.json"] and state.read_bytes() == saved


def test_a_foreign_state_is_refused_with_a_newer_anchor_too(chain: ChainStore, tmp_path: Path) -> None:
    """The state file of another chain, given with an anchor of this one that is newer: still CONFIG_ERROR, never
    silently replaced by the anchor's head (and then overwritten with this chain's)."""
    build(chain, 3)
    state = tmp_path / "state.json"
    state.write_text(SeenHead(chain_name="other", counter=1, block_hash="ab" * 32).model_dump_json())
    anchor = make_anchor(chain, SigningKey.generate(), dt.timedelta(days=1), dt.datetime.now(dt.UTC))
    with pytest.raises(ConfigError, match="follows chain 'other'"):
        Follower(chain, state_path=str(state), anchor=anchor)
    assert "other" in state.read_text()


def test_a_sibling_head_seen_for_one_read_is_no_commit_that_landed_since(
    chain: ChainStore, local_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The follower's one head read names an orphan sibling of v3 (a lost race's leftover); chain.json names v3
    again for the evidence check's fresh read. v3, recorded as committed, is off the head the follower checked
    and not above it: committed_off_chain, not excused as a commit that landed after the read."""
    versions = build(chain, 3)
    orphan = forge(local_root, versions[3], keep_original=True, creator="lost-race")
    # what a lost race leaves: its version and the event sealed before its swap lost
    chain.audit.append("sealed", counter=3, block_hash=orphan.block_hash, version_dir=orphan.version_dir)
    reader = ChainStore(chain.store, chain.name)
    monkeypatch.setattr(reader, "head", lambda: reader.load(orphan.version_dir))
    with pytest.raises(ChainRollbackError) as refused:
        Follower(reader).poll()
    assert refused.value.check == "committed_off_chain"


def _rewrite_policies(chain: ChainStore, signer: SigningKey, keys: list[str]) -> None:
    """A store writer rewrites every policy file as its own, the same count, each trusting ``keys`` and signed by
    ``signer`` (no pinned root: policy 1 signs itself), chained by previous_sha256: every policy still checks."""
    import hashlib

    from ml8s.chain.root import KeySignature, trusted_key
    from ml8s.chain.trust import SignedPolicy, load_policies, policy_bytes, policy_file, policy_key

    previous = ""
    for original in load_policies(chain)[0]:
        trusted = tuple(sorted((trusted_key(k) for k in keys), key=lambda k: k.key_id))
        policy = original.model_copy(update={"keys": trusted, "previous_sha256": previous})
        data = policy_bytes(policy)
        signature = KeySignature(key_id=signer.key_id, signature=signer.sign(data))
        written = policy_file(SignedPolicy(policy=policy, signatures=(signature,)))
        chain.store.put_atomic(policy_key(chain, policy.version), written, tmp_key=f"tmp/policy-{policy.version}")
        previous = hashlib.sha256(written).hexdigest()


@pytest.mark.parametrize("restart", [False, True], ids=["polling", "restarted"])
def test_policies_rewritten_to_the_same_count_are_refused(tmp_path: Path, restart: bool) -> None:
    """Follower state kept how many policies were seen, not which: a store writer rewrote them (trust on first use:
    policy 1 signs itself) to trust its own key too, committed with that key, and the follower took the new head,
    the count unchanged. verify's anchor_policy names that; the follower now does too, by the sha256 it kept."""
    from test_chain_signing import KEY_A, KEY_B

    from ml8s.chain import adopt_policy
    from ml8s.errors import UntrustedVersionError
    from ml8s.store import LocalStore

    chain = ChainStore(LocalStore(str(tmp_path / "root")), "c", signer=KEY_A)
    chain.init()
    adopt_policy(chain, KEY_A, [KEY_A.public_key])
    chain.commit(payload("a1"), meta("a1"))
    state = str(tmp_path / "state.json")
    follower = Follower(chain, state_path=state)
    follower.poll()
    adopt_policy(chain, KEY_A, [KEY_A.public_key])  # a rotation is no rewrite: followed
    chain.commit(payload("a2"), meta("a2"))
    assert follower.poll() is not None
    _rewrite_policies(chain, KEY_B, [KEY_A.public_key, KEY_B.public_key])
    ChainStore(chain.store, "c", signer=KEY_B).commit(payload("evil"), meta("evil"))  # the store takes it
    reader = Follower(ChainStore(chain.store, "c"), state_path=state) if restart else follower
    with pytest.raises(UntrustedVersionError) as refused:
        reader.poll()
    assert refused.value.check == "trust_policy_replaced"
    assert "trust policy 2 (or one before it) is not the file seen before" in str(refused.value)
    assert reader.last is not None and reader.last.counter == 2  # the head it had is kept


def test_a_state_saved_before_policy_hashes_is_read_and_then_records_them(chain: ChainStore, tmp_path: Path) -> None:
    """An older follower's state (a count, no sha256) still loads; the next poll records the newest policy's hash."""
    from test_chain_signing import KEY_A

    from ml8s.chain import adopt_policy

    signed = ChainStore(chain.store, chain.name, signer=KEY_A)
    signed.init()
    adopt_policy(signed, KEY_A, [KEY_A.public_key])
    head = signed.commit(payload("a1"), meta("a1"))
    state = tmp_path / "state.json"
    state.write_text(
        f'{{"chain_name": "{chain.name}", "counter": {head.counter}, "block_hash": "{head.block_hash}", '
        '"policy_version": 1}'
    )
    follower = Follower(ChainStore(chain.store, chain.name), state_path=str(state))
    assert follower.poll() is None
    assert SeenHead.model_validate_json(state.read_text()).policy_sha256 == follower.reader.policy_sha256 != ""
