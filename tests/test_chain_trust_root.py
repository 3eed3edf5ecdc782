"""Issue 21, attack classes 1-3, as a store writer (no signing key of the current policy) would try them:
a pre-seeded or rewritten trust policy, an anchor by the attacker's key (1); a retired key signing after a
rotation, a deleted policy undoing it, an anchor by a retired key (2); readers that enforce differently, a
swapped chain, a rollback on a first start (3). Every one is refused, by every reader, with a named check."""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import shutil
from pathlib import Path

import pytest
from test_chain_signing import KEY_A, KEY_B, KEY_C, ROOT, ROOT_KEY, intruder
from test_chain_support import (  # noqa: F401  (fixtures)
    CHAIN,
    StoreSpec,
    forge,
    local_or_radosgw_spec,
    meta,
    open_spec,
    payload,
    rgw_spec_fixture,
    set_head,
    version_path,
)

from ml8s.chain import (
    ChainStore,
    ChainVersion,
    Follower,
    PayloadKind,
    ReadTrust,
    SigningKey,
    TrustedReader,
    adopt_policy,
    make_anchor,
    make_root,
    paths,
    verify_chain,
)
from ml8s.chain.anchor import Anchor, _bytes
from ml8s.chain.commit import _seal, payload_files
from ml8s.chain.root import KeySignature, load_root, root_json, trusted_key
from ml8s.chain.trust import SignedPolicy, TrustPolicy, policy_bytes, policy_file, policy_key
from ml8s.errors import (
    ChainCorruptionError,
    ChainError,
    ChainRollbackError,
    ConfigError,
    SigningRequiredError,
    UntrustedVersionError,
)
from ml8s.store import LocalStore

NOW = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)
DAY = dt.timedelta(days=1)
PINNED = ReadTrust(root=ROOT, require_signed=True)


def rooted(root: Path, name: str = CHAIN, versions: int = 2) -> ChainStore:
    """A chain whose policy 1 (key A) the pinned root signed, with ``versions`` versions by A."""
    chain = ChainStore(LocalStore(str(root)), name, signer=KEY_A, trust_root=ROOT)
    chain.init()
    adopt_policy(chain, [ROOT_KEY, KEY_A], [KEY_A.public_key], root=ROOT)
    for i in range(1, versions + 1):
        chain.commit(payload(f"{name}{i}"), meta(f"{name}{i}", step=i))
    return chain


def fresh(chain: ChainStore, signer: SigningKey | None = None) -> ChainStore:
    return ChainStore(chain.store, chain.name, signer=signer, trust_root=ROOT)


def refusals(chain: ChainStore, *, anchor: Anchor | None = None) -> tuple[set[str], str, str]:
    """What verify finds, and the checks a first-start follower and (no anchor: it checks none) a trusted
    reader refuse with."""
    report = verify_chain(fresh(chain), root=ROOT, require_signed=True, anchor=anchor, now=NOW)
    with pytest.raises(ChainCorruptionError) as followed:
        Follower(fresh(chain), trust=PINNED, anchor=anchor, clock=lambda: NOW).poll()
    if anchor is not None:
        return report.checks, followed.value.check, ""
    with pytest.raises(ChainCorruptionError) as read:
        TrustedReader(fresh(chain), trust=PINNED).head()
    return report.checks, followed.value.check, read.value.check


def self_signed(chain: ChainStore, version: int, key: SigningKey, previous: bytes = b"") -> bytes:
    """A schema-2 policy an intruder writes: trusting ``key``, signed by ``key`` alone."""
    policy = TrustPolicy.model_validate(
        {
            "chain_name": chain.name,
            "version": version,
            "keys": [{"key_id": key.key_id, "public_key": key.public_key}],
            "signed_from": 1,
            "previous_sha256": hashlib.sha256(previous).hexdigest() if previous else "",
            "schema": 2,
            "root_id": ROOT.root_id,
            "from_counter": chain.head().counter + 1,
        }
    )
    signature = KeySignature(key_id=key.key_id, signature=key.sign(policy_bytes(policy)))
    return policy_file(SignedPolicy(policy=policy, signatures=(signature,)))


# -- class 1: the root lives outside the store -----------------------------------------------------------


def test_root_file_round_trips_and_is_checked(tmp_path: Path) -> None:
    path = tmp_path / "root.json"
    path.write_bytes(root_json(ROOT))
    assert load_root(str(path)) == ROOT and load_root(root_json(ROOT).decode()) == ROOT and load_root("") is None
    with pytest.raises(ConfigError, match="threshold 3 exceeds"):
        make_root([KEY_A.public_key, KEY_B.public_key], 3)
    with pytest.raises(ConfigError, match="no trust root"):
        load_root('{"keys": [], "threshold": 1}')
    forged = root_json(ROOT).replace(ROOT.keys[0].key_id.encode(), b"0" * 64)
    with pytest.raises(ConfigError, match="no trust root"):
        load_root(forged.decode())  # a key id that is not its key's
    with pytest.raises(ConfigError, match="expected a trust root file"):
        load_root(str(tmp_path / "missing.json"))


@pytest.mark.parametrize("public_key", ["ÿ" * 44, "\udcff" * 44, "not a key"])
def test_a_public_key_that_is_not_base64_is_named(public_key: str) -> None:
    """A character outside ASCII (chain root/trust --public-key 'ÿ') was a ValueError from base64: INTERNAL_ERROR."""
    with pytest.raises(ConfigError, match=r"^CONFIG_ERROR: public key '.*': not base64$"):
        make_root([public_key], 1)


def test_preseeded_policy_is_refused_and_the_operator_is_told(tmp_path: Path) -> None:
    """The intruder writes policy 1 before the operator's first ``chain trust``: with a pinned root it never
    chains, every reader refuses the chain, and the operator's adoption fails loudly instead of becoming 2."""
    chain = ChainStore(LocalStore(str(tmp_path)), CHAIN, signer=KEY_C)
    chain.init()
    chain.store.put_if_absent(policy_key(chain, 1), self_signed(chain, 1, KEY_C))
    chain.commit(payload("evil"), meta("evil"))
    checks, followed, read = refusals(chain)
    assert "trust_root" in checks and followed == read == "trust_root"
    with pytest.raises(ChainError, match="broken"):
        adopt_policy(fresh(chain), [ROOT_KEY, KEY_A], [KEY_A.public_key], root=ROOT)
    unpinned = verify_chain(fresh(chain))  # without a root it verifies, but says trust was taken on first use
    assert unpinned.ok and any("taken on first use" in line for line in unpinned.unchecked)


def test_rewritten_policy_with_an_attacker_key_is_refused(tmp_path: Path) -> None:
    chain = rooted(tmp_path)
    first = chain.store.get(policy_key(chain, 1))
    chain.store.put_if_absent(policy_key(chain, 2), self_signed(chain, 2, KEY_C, first))
    intruder(chain, "evil", signer=KEY_C, policy=2)
    checks, followed, read = refusals(chain)
    assert {"trust_policy", "trust_policy_missing"} <= checks and followed == read == "trust_policy"
    chain.store.delete(policy_key(chain, 1))  # replace the whole trust/ directory instead
    chain.store.delete(policy_key(chain, 2))
    chain.store.put_if_absent(policy_key(chain, 1), self_signed(chain, 1, KEY_C))
    checks, followed, read = refusals(chain)
    assert "trust_root" in checks and followed == read == "trust_root"


def test_anchor_by_an_attacker_key_is_refused(tmp_path: Path) -> None:
    chain = rooted(tmp_path)
    good = make_anchor(chain, KEY_A, DAY, NOW, ROOT)
    forged = Anchor(
        checkpoint=good.checkpoint, public_key=KEY_C.public_key, signature=KEY_C.sign(_bytes(good.checkpoint))
    )
    checks, followed, _ = refusals(chain, anchor=forged)
    assert "anchor_signature" in checks and followed == "anchor_signature"
    other_root = make_root([KEY_C.public_key], 1)  # an anchor made under another root is no anchor here
    moved = good.checkpoint.model_copy(update={"trust_root_id": other_root.root_id})
    rebound = Anchor(checkpoint=moved, public_key=KEY_A.public_key, signature=KEY_A.sign(_bytes(moved)))
    assert "anchor_root" in verify_chain(fresh(chain), root=ROOT, anchor=rebound, now=NOW).checks
    assert verify_chain(fresh(chain), root=ROOT, require_signed=True, anchor=good, now=NOW).ok


def test_policy_needs_a_threshold_of_old_and_new_keys(tmp_path: Path) -> None:
    chain = rooted(tmp_path, versions=0)
    adopt_policy(chain, [KEY_A, KEY_B], [KEY_A.public_key, KEY_B.public_key], threshold=2, root=ROOT)
    with pytest.raises(ChainError, match="signed by 1 of its own keys, its threshold is 2"):
        adopt_policy(chain, [KEY_A], [KEY_A.public_key, KEY_B.public_key], threshold=2, root=ROOT)
    with pytest.raises(ChainError, match="not signed by 2 key"):
        adopt_policy(chain, [KEY_A, KEY_C], [KEY_C.public_key], root=ROOT)  # one of the two old keys: not enough
    adopt_policy(chain, [ROOT_KEY, KEY_C], [KEY_C.public_key], root=ROOT)  # the root re-issues (recovery)
    assert verify_chain(fresh(chain), root=ROOT).ok


# -- class 2: rotation revokes ------------------------------------------------------------------------------


def rotated(tmp_path: Path) -> tuple[ChainStore, ChainVersion]:
    """Policy 2 = {B} adopted after v2 (signed by A and B); the head v2 was A's last."""
    chain = rooted(tmp_path)
    adopt_policy(chain, [KEY_A, KEY_B], [KEY_B.public_key], root=ROOT)
    return chain, chain.head()


def test_retired_key_signs_nothing_after_the_rotation(tmp_path: Path) -> None:
    chain, head = rotated(tmp_path)
    anchor = make_anchor(chain, KEY_B, DAY, NOW, ROOT)
    follower = Follower(fresh(chain), trust=PINNED, anchor=anchor, clock=lambda: NOW)
    follower.poll()
    intruder(chain, "old-key", signer=KEY_A, policy=1)  # A still holds its key; it names the policy it was in
    checks, followed, _ = refusals(chain, anchor=anchor)
    assert "retired_policy" in checks and followed == refusals(chain)[2] == "retired_policy"
    with pytest.raises(UntrustedVersionError) as caught:
        follower.poll()
    assert caught.value.check == "retired_policy" and follower.current == head


def test_block_naming_an_older_policy_than_its_parent(tmp_path: Path) -> None:
    chain, _ = rotated(tmp_path)
    fresh(chain, KEY_B).commit(payload("b1"), meta("b1", step=9))
    forged = intruder(chain, "old-policy", signer=KEY_A, policy=1)
    checks = verify_chain(fresh(chain), root=ROOT).checks
    assert "retired_policy" in checks
    with pytest.raises(UntrustedVersionError) as caught:
        TrustedReader(fresh(chain), trust=PINNED).fetch_payload(forged, "model.bin")
    assert caught.value.check == "retired_policy"


def test_deleted_policy_is_a_finding_never_an_undo(tmp_path: Path) -> None:
    chain, _ = rotated(tmp_path)
    anchor = make_anchor(chain, KEY_B, DAY, NOW, ROOT)  # issued after the rotation
    state = str(tmp_path / "follower.json")
    Follower(fresh(chain), state_path=state, trust=PINNED).poll()
    chain.store.delete(policy_key(chain, 2))  # undo the rotation: A commits again through the normal path
    again = fresh(chain, KEY_A).commit(payload("again"), meta("again", step=9))
    assert again.header.trust_policy_version == 1
    assert "anchor_policy" in verify_chain(fresh(chain), root=ROOT, anchor=anchor, now=NOW).checks
    with pytest.raises(UntrustedVersionError) as caught:  # a restarted follower remembers policy 2
        Follower(fresh(chain), state_path=state, trust=PINNED).poll()
    assert caught.value.check == "trust_policy_missing"
    with pytest.raises(ChainCorruptionError) as anchored:  # a first start: the anchor saw policy 2
        Follower(fresh(chain), anchor=anchor, trust=PINNED, clock=lambda: NOW).poll()
    assert anchored.value.check == "trust_policy_missing"


def test_anchor_by_a_retired_key_is_refused(tmp_path: Path) -> None:
    chain, _ = rotated(tmp_path)
    with pytest.raises(ConfigError, match="not in the newest trust policy"):
        make_anchor(chain, KEY_A, DAY, NOW, ROOT)
    point = make_anchor(chain, KEY_B, DAY, NOW, ROOT).checkpoint
    retired = Anchor(checkpoint=point, public_key=KEY_A.public_key, signature=KEY_A.sign(_bytes(point)))
    checks, followed, _ = refusals(chain, anchor=retired)
    assert "anchor_signature" in checks and followed == "anchor_signature"


def test_commit_racing_a_rotation_loses_before_its_swap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    chain = rooted(tmp_path)
    committer = fresh(chain, KEY_A)
    real = committer.write_version

    def rotate_meanwhile(*args: object, **kwargs: object) -> None:
        monkeypatch.setattr(committer, "write_version", real)
        adopt_policy(fresh(chain), [KEY_A, KEY_B], [KEY_B.public_key], root=ROOT)
        real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(committer, "write_version", rotate_meanwhile)
    with pytest.raises(SigningRequiredError, match="not in trust policy 2"):
        committer.commit_with_retry(payload("late"), meta("late", step=5))
    assert verify_chain(fresh(chain), root=ROOT, require_signed=True).ok


# -- class 3: one reader, the same rules ---------------------------------------------------------------------


def test_swapped_chain_signed_by_the_same_key_is_refused(tmp_path: Path) -> None:
    mine = rooted(tmp_path / "a")
    theirs = rooted(tmp_path / "b", name="other", versions=3)
    base = tmp_path / "a" / paths.ROOT
    shutil.rmtree(base / CHAIN / paths.VERSIONS)
    shutil.copytree(tmp_path / "b" / paths.ROOT / "other" / paths.VERSIONS, base / CHAIN / paths.VERSIONS)
    set_head(tmp_path / "a", theirs.head())
    checks, followed, read = refusals(mine)
    assert "chain_name" in checks and followed == read == "chain_name"


def test_first_start_follower_refuses_a_rolled_back_head(tmp_path: Path) -> None:
    chain = rooted(tmp_path, versions=3)
    below = chain.list()[-2]
    set_head(tmp_path, below)
    with pytest.raises(ChainRollbackError) as caught:
        Follower(fresh(chain), trust=PINNED).poll()  # no state, no anchor: the run index and trail say so
    assert caught.value.check == "committed_off_chain"
    assert "committed_off_chain" in verify_chain(fresh(chain), root=ROOT).checks


def test_follower_serves_what_it_checked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The head flips between a poll and the load: the follower's ``current`` is the checked one, read once."""
    chain = rooted(tmp_path)
    checked = chain.head()
    state = str(tmp_path / "f.json")
    Follower(fresh(chain), state_path=state, trust=PINNED).poll()
    reader = fresh(chain)
    follower = Follower(reader, state_path=state, trust=PINNED)
    reads: list[int] = []
    real = reader.head

    def counting() -> ChainVersion:
        reads.append(1)
        return real()

    monkeypatch.setattr(reader, "head", counting)
    assert follower.poll() is None and follower.current == checked and len(reads) == 1
    forged = intruder(chain, "flip", signer=None, policy=0)
    with pytest.raises(UntrustedVersionError) as caught:
        follower.poll()
    assert caught.value.check == "unsigned" and follower.current == checked != forged


def test_policies_rewritten_between_a_poll_and_its_check_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No root pinned; the follower saw policy 1. A store writer puts a head signed by its own key C naming a
    policy 2, and rewrites trust/ (policy 1 self-signed by C adding C, policy 2 by C) right after the poll read
    the policies (checked against what the follower saw) and before the head's check reloaded them for the policy
    2 it names: the reload was taken as is, and C's head accepted. It must only add to the policies read."""
    chain = ChainStore(LocalStore(str(tmp_path)), CHAIN, signer=KEY_A)
    chain.init()
    adopt_policy(chain, KEY_A, [KEY_A.public_key])
    chain.commit(payload("p1"), meta("p1"))
    follower = Follower(fresh(chain), trust=ReadTrust())
    follower.poll()
    seen = follower.current
    forged = _seal(chain.head(), meta("evil"), payload_files(payload("evil")), 2, KEY_C, chain_name=CHAIN)
    chain.write_version(forged, payload("evil"), [])
    set_head(tmp_path, forged)
    policy = SignedPolicy.model_validate_json(chain.store.get(policy_key(chain, 1))).policy
    first = policy.model_copy(
        update={"keys": tuple(sorted({*policy.keys, trusted_key(KEY_C.public_key)}, key=lambda k: k.key_id))}
    )
    first_file = policy_file(SignedPolicy(policy=first, signatures=(_signed_by(KEY_C, first),)))
    update = {"previous_sha256": hashlib.sha256(first_file).hexdigest(), "from_counter": forged.counter}
    second = first.model_copy(update={"version": 2, "keys": (trusted_key(KEY_C.public_key),), **update})
    real = TrustedReader.fresh_policies

    def then_rewritten(reader: TrustedReader) -> list[TrustPolicy]:
        policies = real(reader)
        (tmp_path / policy_key(chain, 1)).chmod(0o644)
        (tmp_path / policy_key(chain, 1)).write_bytes(first_file)
        (tmp_path / policy_key(chain, 2)).write_bytes(
            policy_file(SignedPolicy(policy=second, signatures=(_signed_by(KEY_C, second),)))
        )
        return policies

    monkeypatch.setattr(TrustedReader, "fresh_policies", then_rewritten)
    with pytest.raises(UntrustedVersionError) as caught:
        follower.poll()
    assert caught.value.check == "trust_policy_replaced" and follower.current == seen != forged


def _signed_by(key: SigningKey, policy: TrustPolicy) -> KeySignature:
    return KeySignature(key_id=key.key_id, signature=key.sign(policy_bytes(policy)))


# -- class 3 through the CLI: ml8s follow and ml8s predict --chain honour the same settings -------------------


@pytest.fixture(name="pinned_env")
def pinned_env_fixture(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """CHAIN_TRUST_ROOT and CHAIN_REQUIRE_SIGNED set as an operator would, for in-process CLI calls."""
    (tmp_path / "root.json").write_bytes(root_json(ROOT))
    monkeypatch.setenv("CHAIN_TRUST_ROOT", str(tmp_path / "root.json"))
    monkeypatch.setenv("CHAIN_REQUIRE_SIGNED", "true")
    monkeypatch.setenv("PIPELINE_ROOT_URI", str(tmp_path / "store"))
    monkeypatch.setenv("CHAIN_NAME", CHAIN)
    (tmp_path / "rows.csv").write_text("a,b\n1,2\n")
    return tmp_path


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    from ml8s.cli.main import main

    capsys.readouterr()
    code = main(list(args))
    return code, capsys.readouterr().err


def test_cli_readers_refuse_an_unsigned_forgery(pinned_env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    chain = rooted(pinned_env / "store")
    intruder(chain, "forged", signer=None, policy=0)
    out = pinned_env / "serve"
    code, err = _cli(capsys, "follow", "--out", str(out), "--once")
    assert code == 1 and "CHAIN_UNTRUSTED" in err and "unsigned" in err and not (out / "current").exists()
    rows = str(pinned_env / "rows.csv")
    code, err = _cli(capsys, "predict", "--chain", CHAIN, "--input", rows)
    assert code == 1 and err.startswith("ml8s: CHAIN_UNTRUSTED") and len(err.splitlines()) == 1, err
    code, err = _cli(capsys, "predict", "--chain", CHAIN, "--version", "1", "--input", rows)
    assert code == 1 and "CHAIN_UNTRUSTED" in err, err  # an older version is read from the checked head only


def test_cli_readers_refuse_a_rollback(pinned_env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    chain = rooted(pinned_env / "store", versions=3)
    set_head(pinned_env / "store", chain.list()[-2])
    rows = str(pinned_env / "rows.csv")
    code, err = _cli(capsys, "predict", "--chain", CHAIN, "--input", rows)
    assert code == 1 and err.startswith("ml8s: CHAIN_ROLLBACK") and "committed_off_chain" in err, err
    code, err = _cli(capsys, "follow", "--out", str(pinned_env / "serve"), "--once")
    assert code == 1 and "CHAIN_ROLLBACK" in err, err


def test_cli_without_a_root_says_trust_on_first_use(pinned_env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rooted(pinned_env / "store")
    os.environ.pop("CHAIN_TRUST_ROOT")
    code, err = _cli(capsys, "predict", "--chain", CHAIN, "--input", str(pinned_env / "rows.csv"), "--allow-unsigned")
    assert "taken on first use" in err  # said plainly; then the rows fail (no model in this payload)
    assert code == 1
    code, err = _cli(capsys, "predict", "--chain", CHAIN, "--input", str(pinned_env / "rows.csv"))
    assert code == 1 and "trust_root_missing" in err, err  # CHAIN_REQUIRE_SIGNED=true refuses it


# -- the store-writer attacks on radosgw too: every check is the store's API, never a file path ----------------


def test_store_writer_attacks_on_every_backend(spec: StoreSpec, tmp_path: Path) -> None:
    store = open_spec(spec)
    chain = ChainStore(store, CHAIN, signer=KEY_A, trust_root=ROOT)
    chain.init()
    store.put_if_absent(policy_key(chain, 1), self_signed(chain, 1, KEY_C))  # class 1: pre-seeded policy 1
    with pytest.raises(ChainError, match="broken"):
        adopt_policy(fresh(chain), [ROOT_KEY, KEY_A], [KEY_A.public_key], root=ROOT)
    assert "trust_root" in verify_chain(fresh(chain), root=ROOT).checks
    store.delete(policy_key(chain, 1))
    adopt_policy(fresh(chain), [ROOT_KEY, KEY_A], [KEY_A.public_key], root=ROOT)
    for i in (1, 2):
        fresh(chain, KEY_A).commit(payload(f"s{i}"), meta(f"s{i}", step=i))
    state = str(tmp_path / "follower.json")
    Follower(fresh(chain), state_path=state, trust=PINNED).poll()
    adopt_policy(fresh(chain), [KEY_A, KEY_B], [KEY_B.public_key], root=ROOT)  # class 2: rotate, then A again
    Follower(fresh(chain), state_path=state, trust=PINNED).poll()  # the follower sees policy 2
    intruder(chain, "retired", signer=KEY_A, policy=1)
    with pytest.raises(UntrustedVersionError) as retired:
        Follower(fresh(chain), state_path=state, trust=PINNED).poll()
    assert retired.value.check == "retired_policy"
    assert "retired_policy" in verify_chain(fresh(chain), root=ROOT).checks
    store.delete(policy_key(chain, 2))  # ... and undo the rotation: a finding, never an undo
    with pytest.raises(UntrustedVersionError) as deleted:
        Follower(fresh(chain), state_path=state, trust=PINNED).poll()
    assert deleted.value.check == "trust_policy_missing"
    good = chain.list()[-2]  # class 3: roll the head back below what the index and trail recorded
    head = store.get_versioned(chain.key(paths.HEAD))
    chain.swap_head(chain.load(chain.list()[-3].version_dir), head.token)
    with pytest.raises(ChainRollbackError) as rolled:
        Follower(fresh(chain), trust=ReadTrust(root=ROOT)).poll()  # a first start, no state
    assert rolled.value.check == "committed_off_chain" and good.counter == 2


def test_gc_checks_the_pinned_root_like_every_reader(tmp_path: Path) -> None:
    """GC verifies before it deletes: with the pinned root, a chain whose trust an intruder pre-seeded is
    refused (nothing deleted, not even a stale loser); without one it is collected and says nothing more."""
    from ml8s.chain import collect_garbage

    chain = ChainStore(LocalStore(str(tmp_path)), CHAIN, signer=KEY_C)
    chain.init()
    chain.store.put_if_absent(policy_key(chain, 1), self_signed(chain, 1, KEY_C))
    chain.commit(payload("evil"), meta("evil"))
    chain.store.put_if_absent(chain.key(".tmp") + "/stale", b"x")  # garbage GC would delete
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    with pytest.raises(ChainCorruptionError) as refused:
        collect_garbage(fresh(chain), dry_run=False, grace_s=0, trust=PINNED, allow_short_grace=True)
    assert "trust_policy" in str(refused.value)  # the pre-seeded policy does not chain to the root
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before
    report = collect_garbage(fresh(chain), dry_run=True, grace_s=0, allow_short_grace=True)  # trust on first use
    assert [item.kind for item in report.items] == ["stale_tmp"]


def test_reproduce_refuses_a_forged_history_before_training(
    pinned_env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An auditor's reproduce reads the chain as every reader does: an unsigned forgery is refused up front,
    never re-trained and reported on as if it were the chain's history."""
    chain = rooted(pinned_env / "store")
    intruder(chain, "forged", signer=None, policy=0)
    code, err = _cli(capsys, "chain", "reproduce", "--from", "0")
    assert code == 1 and "ml8s: CHAIN_CORRUPTION: version 3" in err, err
    assert "training run" not in err  # refused before the first re-training


def test_forged_genesis_head_with_a_payload_is_refused(pinned_env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Genesis is exempt from signatures because it holds nothing: a store writer's counter-0 block holding a
    model, made the head (run index and trail deleted), is no genesis, for verify and every reader alike."""
    root = pinned_env / "store"
    chain = rooted(root)
    genesis = chain.list()[0]
    (version_path(root, genesis.version_dir) / paths.PAYLOAD).mkdir()  # forge() copies a payload directory
    forged = forge(root, genesis, keep_original=True, new_payload=payload("evil"), payload_kind=PayloadKind.FULL)
    set_head(root, forged)
    for part in (paths.RUNS, paths.AUDIT):
        shutil.rmtree(root / paths.ROOT / CHAIN / part)
    assert "genesis" in verify_chain(fresh(chain), root=ROOT, require_signed=True).checks
    with pytest.raises(UntrustedVersionError) as followed:
        Follower(fresh(chain), trust=PINNED).poll()
    with pytest.raises(UntrustedVersionError) as read:
        TrustedReader(fresh(chain), trust=PINNED).head()
    assert followed.value.check == read.value.check == "genesis"
    code, err = _cli(capsys, "predict", "--chain", CHAIN, "--input", str(pinned_env / "rows.csv"))
    assert code == 1 and err.startswith("ml8s: CHAIN_UNTRUSTED") and "genesis" in err, err


def test_the_pipelines_decision_reads_the_log_against_the_pinned_root(
    small_data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run killed between its commit and its decision; a store writer (no key of the root's) then rewrites
    trust/ as a self-signed policy 1 of their own key and writes a decision on that version ("reject"). The re-run's
    promote step read the log without the pinned root (CHAIN_TRUST_ROOT): the forged decision passed as trust on
    first use and was taken as the decision already made, so the version was never decided. It is refused."""
    from conftest import make_context

    from ml8s.chain import PromotionLog
    from ml8s.pipeline.chain_commit import ChainCommit
    from ml8s.pipeline.promote import promote

    monkeypatch.setenv("ML8S_SIGNING_KEY", KEY_A.private_pem().decode())
    ctx = make_context(small_data, tmp_path / "root", chain_trust_root=root_json(ROOT).decode())
    chain = rooted(tmp_path / "root", name=ctx.settings.chain_name, versions=1)
    version = chain.head()
    chain.store.delete(policy_key(chain, 1))
    chain.store.put_if_absent(policy_key(chain, 1), self_signed(chain, 1, KEY_C))
    forged = ChainStore(chain.store, chain.name, signer=KEY_C)  # unpinned, as the attacker's tools read it
    PromotionLog(forged).decide("reject", forged.get(1), "forged: keep what is served", KEY_C)
    commit = ChainCommit.of(chain.name, version)
    with pytest.raises(ChainError, match="root"):
        promote(ctx, ctx.open_store(), commit)
