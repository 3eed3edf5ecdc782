"""Anchors pin the promotion log (issue 27): a store writer who deletes or rewrites the log's tail (a
promotion, or a rejection that kept a regression off the followers) is refused by every reader given an
anchor (verify --anchor, a first-start follower, predict --chain --anchor) and by a restarted follower's
own state, as ``promotion_rollback`` / ``promotion_fork``; anchors from before the pin still verify."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from serving_support import chain_at, weights_series
from serving_support import meta as weights_meta
from test_chain_signing import KEY_A, KEY_B, ROOT, ROOT_KEY
from test_chain_support import (  # noqa: F401  (fixtures)
    CHAIN,
    StoreSpec,
    build,
    local_or_radosgw_spec,
    meta,
    open_spec,
    payload,
    rgw_spec_fixture,
)
from test_chain_unsafe_reads import SPARSE, answers, ml8s_cli

from ml8s.chain import (
    Anchor,
    ChainStore,
    ChainVersion,
    PromotionLog,
    ReadTrust,
    SigningKey,
    adopt_policy,
    collect_garbage,
    make_anchor,
    verify_chain,
)
from ml8s.chain.anchor import Checkpoint, _bytes, read_anchor
from ml8s.chain.limits import RECORD_MAX_BYTES
from ml8s.chain.promotion import Decision, SignedDecision, decision_bytes, record_key
from ml8s.chain.promotion_pin import PromotionReader
from ml8s.errors import ChainCorruptionError, ChainForkError, ChainRollbackError, ConfigError
from ml8s.identity.hashing import canonical_bytes
from ml8s.serving import ClientConfig, InferenceClient
from ml8s.store import LocalStore
from ml8s.weights import commit_weights

KEY = SigningKey.generate()
NOW = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)
DAY = dt.timedelta(days=1)
NEWER_THAN_V1 = ("policy_version", "trust_root_id")


def _fresh(chain: ChainStore) -> ChainStore:
    return ChainStore(chain.store, chain.name)


def _plant_promotion_by_a(chain: ChainStore, sequence: int, version: ChainVersion, *, previous: str) -> None:
    """A store writer holding the retired key A puts decision ``sequence`` promoting ``version`` under policy 1."""
    forged = Decision(
        chain_name=CHAIN,
        sequence=sequence,
        action="promote",
        counter=version.counter,
        block_hash=version.block_hash,
        served_counter=version.counter,
        served_block_hash=version.block_hash,
        rule="manual",
        previous_sha256=previous,
        trust_policy_version=1,
    )
    signed = SignedDecision(decision=forged, signer_key_id=KEY_A.key_id, signature=KEY_A.sign(decision_bytes(forged)))
    assert chain.store.put_if_absent(record_key(chain, sequence), signed.model_dump_json().encode())


def _checks(chain: ChainStore, anchor: Anchor | None) -> set[str]:
    return verify_chain(_fresh(chain), anchor=anchor, now=NOW).checks


def test_verify_refuses_a_cut_promotion_log_against_the_anchor(spec: StoreSpec) -> None:
    """Signed chain: the writer cannot forge a decision, but can delete the newest ones."""
    chain = ChainStore(open_spec(spec), CHAIN, signer=KEY)
    chain.init()
    adopt_policy(chain, KEY, [KEY.public_key])
    for i in range(1, 4):
        chain.commit(payload(f"v{i}"), meta(f"v{i}", step=i))
    log = PromotionLog(chain)
    log.decide("promote", chain.get(1), "manual", KEY)
    log.decide("promote", chain.get(2), "manual", KEY)
    log.decide("reject", chain.get(3), "accuracy fell", KEY)  # v3 regressed: kept off the followers
    anchor = make_anchor(chain, KEY, DAY, NOW)
    assert (anchor.checkpoint.promotion_sequence, len(anchor.checkpoint.promotion_sha256)) == (3, 64)
    assert _checks(chain, anchor) == set()
    live = make_anchor(chain, KEY, DAY, dt.datetime.now(dt.UTC))
    chain.store.delete(record_key(chain, 3))  # the rejection undone: v3 is an undecided candidate again
    assert _checks(chain, None) == set()  # a consistent, shorter log: only the anchor tells
    assert _checks(chain, anchor) == {"promotion_rollback"}
    with pytest.raises(ChainCorruptionError, match="promotion_rollback"):  # GC refuses before deleting anything
        collect_garbage(_fresh(chain), dry_run=False, grace_s=0, anchor=live)
    chain.store.delete(record_key(chain, 2))
    assert _checks(chain, anchor) == {"promotion_rollback"}
    # The pin is signed: lowering it (or dropping it, as if the anchor were older) breaks the signature.
    lowered = anchor.model_copy(update={"checkpoint": anchor.checkpoint.model_copy(update={"promotion_sequence": 1})})
    assert "anchor_signature" in _checks(chain, lowered)


def _unsigned_gate(root: Path) -> ChainStore:
    """Four weights versions with no trust policy (anyone may write a decision), v3 promoted after v2."""
    chain = chain_at(f"file://{root}", "gate")
    for n, weights in enumerate(weights_series(5, torch.float32, 4)):
        commit_weights(chain, weights, weights_meta(f"gate-{n}"), interval=4)
    log = PromotionLog(chain)
    log.decide("promote", chain.get(2), "manual", None)
    log.decide("promote", chain.get(3), "manual", None)
    return chain


def _served(client: InferenceClient) -> int:
    client.refresh()
    assert client.version is not None
    return client.version.counter


def _fork_record_2(chain: ChainStore, root: Path) -> None:
    """Replace decision 2 (promote v3) by a valid-looking 'reject v3': the served version falls back to v2."""
    first = chain.store.get(record_key(chain, 1))
    decided = SignedDecision.model_validate_json(chain.store.get(record_key(chain, 2))).decision
    forged = decided.model_copy(
        update={
            "action": "reject",
            "served_counter": 2,
            "served_block_hash": chain.get(2).block_hash,
            "previous_sha256": hashlib.sha256(first).hexdigest(),
        }
    )
    (root / record_key(chain, 2)).unlink()
    assert chain.store.put_if_absent(record_key(chain, 2), SignedDecision(decision=forged).model_dump_json().encode())


def test_followers_refuse_a_cut_or_forked_log_by_anchor_and_by_their_own_state(tmp_path: Path) -> None:
    root = tmp_path / "root"
    chain = _unsigned_gate(root)
    anchor = make_anchor(chain, KEY, DAY, dt.datetime.now(dt.UTC))
    state = str(tmp_path / "node" / "state.json")
    (tmp_path / "node").mkdir()
    assert _served(InferenceClient(_fresh(chain), ClientConfig(state_path=state))) == 3
    saved = json.loads(Path(f"{state}.promotion.json").read_text())
    assert saved["sequence"] == 2 and len(saved["sha256"]) == 64
    kept = (root / record_key(chain, 2)).read_bytes()
    (root / record_key(chain, 2)).unlink()  # the promotion of v3 undone
    assert _served(InferenceClient(_fresh(chain), ClientConfig())) == 2  # no anchor, no state: the hole
    with pytest.raises(ChainRollbackError) as first_start:
        InferenceClient(_fresh(chain), ClientConfig(), anchor=anchor).refresh()
    assert first_start.value.check == "promotion_rollback" and "the anchor names decision 2" in str(first_start.value)
    with pytest.raises(ChainRollbackError) as restarted:
        InferenceClient(_fresh(chain), ClientConfig(state_path=state)).refresh()
    assert restarted.value.check == "promotion_rollback"
    chain.store.put_if_absent(record_key(chain, 2), kept)  # restored: served again as before
    assert _served(InferenceClient(_fresh(chain), ClientConfig(state_path=state), anchor=anchor)) == 3
    _fork_record_2(chain, root)
    assert _served(InferenceClient(_fresh(chain), ClientConfig())) == 2  # a consistent log without the pins
    assert _checks(chain, None) == set()
    with pytest.raises(ChainForkError) as forked:
        InferenceClient(_fresh(chain), ClientConfig(), anchor=anchor).refresh()
    assert forked.value.check == "promotion_fork"
    with pytest.raises(ChainForkError) as forked_restart:
        InferenceClient(_fresh(chain), ClientConfig(state_path=state)).refresh()
    assert forked_restart.value.check == "promotion_fork"
    assert "promotion_fork" in verify_chain(_fresh(chain), anchor=anchor).checks


def test_a_damaged_promotion_state_is_refused_never_reset(tmp_path: Path) -> None:
    chain = _unsigned_gate(tmp_path / "root")
    state = tmp_path / "state.json"
    assert _served(InferenceClient(_fresh(chain), ClientConfig(state_path=str(state)))) == 3
    pinned = Path(f"{state}.promotion.json")
    pinned.write_text('{"chain_name": "gate", "sequence": ')  # a clumsy edit: never read as "saw nothing"
    with pytest.raises(ConfigError, match="no promotion state"):
        InferenceClient(_fresh(chain), ClientConfig(state_path=str(state)))
    pinned.write_text('{"chain_name": "other", "sequence": 1}')
    with pytest.raises(ConfigError, match="follows chain 'other'"):
        InferenceClient(_fresh(chain), ClientConfig(state_path=str(state)))
    pinned.write_text('{"chain_name": "gate", "sequence": 2}')  # a state from before the sha256 was kept
    assert _served(InferenceClient(_fresh(chain), ClientConfig(state_path=str(state)))) == 3
    assert len(json.loads(pinned.read_text())["sha256"]) == 64  # completed: a fork at 2 is refused from now on


def test_predict_chain_refuses_a_cut_log_against_its_anchor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from ml8s.cli.main import main

    root = tmp_path / "root"
    chain = _unsigned_gate(root)
    anchor_path = tmp_path / "anchor.json"
    anchor_path.write_text(make_anchor(chain, KEY, DAY, dt.datetime.now(dt.UTC)).model_dump_json())
    for name, value in {"PIPELINE_ROOT_URI": f"file://{root}", "CHAIN_NAME": "gate", "MLFLOW_TRACKING_URI": ""}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("CHAIN_TRUST_ROOT", raising=False)
    monkeypatch.setenv("CHAIN_REQUIRE_SIGNED", "false")
    rows = tmp_path / "rows.csv"
    rows.write_text("a,b\n1,2\n")
    (root / record_key(chain, 2)).unlink()
    capsys.readouterr()
    code = main(["predict", "--chain", "gate", "--input", str(rows), "--anchor", str(anchor_path)])
    err = capsys.readouterr().err
    assert code == 1 and err.startswith("ml8s: CHAIN_ROLLBACK") and "promotion_rollback" in err, err
    assert len(err.splitlines()) == 1, err
    code = main(["predict", "--chain", "gate", "--input", str(rows), "--anchor", str(anchor_path), "--version", "3"])
    assert code == 1 and "promotion_rollback" in capsys.readouterr().err
    out = tmp_path / "serve"  # a first-start `ml8s follow --anchor` refuses it too, and serves nothing
    assert main(["follow", "--out", str(out), "--once", "--anchor", str(anchor_path)]) == 1
    err = capsys.readouterr().err
    assert "promotion_rollback" in err and "Traceback" not in err and not (out / "current").exists(), err


def test_anchors_from_before_the_pin_still_verify(tmp_path: Path) -> None:
    """An anchor file written before the promotion fields existed (they are absent, and were not signed)."""
    chain = _unsigned_gate(tmp_path / "root")
    point = make_anchor(chain, KEY, DAY, NOW).checkpoint
    old = {k: v for k, v in point.model_dump(mode="json").items() if not k.startswith("promotion_")}
    # what anchors signed then: the checkpoint, without policy_version and trust_root_id when unset
    signature = KEY.sign(canonical_bytes({k: v for k, v in old.items() if v or k not in NEWER_THAN_V1}))
    data = json.dumps({"checkpoint": old, "public_key": KEY.public_key, "signature": signature}).encode()
    anchor = read_anchor(data, where="an old anchor")
    assert anchor.checkpoint.promotion_sequence == 0
    assert _bytes(anchor.checkpoint) == _bytes(Checkpoint.model_validate(old))
    assert _checks(chain, anchor) == set()
    (tmp_path / "root" / record_key(chain, 2)).unlink()
    assert _checks(chain, anchor) == set()  # it pins no promotion: it cannot tell (a fresh anchor does)


# -- the promotion log's records are read as every chain record: bounded, regular files only (issue 21) ---------


def _gated_copy(tmp_path: Path) -> tuple[ChainStore, Path]:
    root = tmp_path / "root"
    chain = ChainStore(LocalStore(str(root)), CHAIN)
    build(chain, 2)
    log = PromotionLog(chain)
    log.decide("promote", chain.get(1), "manual", None)
    log.decide("promote", chain.get(2), "manual", None)
    return chain, root / record_key(chain, 2)


def _fifo(path: Path) -> list[Path]:
    path.unlink()
    os.mkfifo(path)
    return [path]


def _sparse(path: Path) -> list[Path]:
    with open(path, "r+b") as handle:
        handle.truncate(SPARSE)
    return []


def _linked(path: Path) -> list[Path]:
    """A link to a file holding the very same bytes: the store holds files, never pointers out of it."""
    target = path.parent.parent / "elsewhere.json"
    target.write_bytes(path.read_bytes())
    path.unlink()
    path.symlink_to(target)
    return []


@pytest.mark.parametrize("damage", [_fifo, _sparse, _linked], ids=["fifo", "sparse-64GiB", "symlink"])
def test_a_promotion_record_that_is_no_bounded_regular_file_is_a_named_refusal(
    damage: Callable[[Path], list[Path]], tmp_path: Path
) -> None:
    chain, record = _gated_copy(tmp_path)
    unblock = damage(record)
    report = answers(lambda: verify_chain(_fresh(chain)), unblock)
    assert not isinstance(report, BaseException), report
    assert "promotion" in report.checks
    refused = answers(lambda: PromotionReader(_fresh(chain)).gated(), unblock)
    assert isinstance(refused, ChainCorruptionError) and refused.check == "promotion", refused
    done = answers(lambda: ml8s_cli(record.parents[3], "chain", "verify"), unblock)
    assert not isinstance(done, BaseException)
    assert done.returncode == 1 and "promotion" in done.stdout + done.stderr and "Traceback" not in done.stderr
    assert "MemoryError" not in done.stderr


def test_an_oversized_promotion_record_on_radosgw(rgw_spec: StoreSpec) -> None:
    store = open_spec(rgw_spec)
    chain = ChainStore(store, CHAIN)
    build(chain, 1)
    PromotionLog(chain).decide("promote", chain.get(1), "manual", None)
    assert store.put_if_absent(record_key(chain, 2), b" " * (RECORD_MAX_BYTES + 1))
    refused = answers(lambda: PromotionReader(_fresh(chain)).gated())
    assert isinstance(refused, ChainCorruptionError) and refused.check == "promotion"
    assert str(RECORD_MAX_BYTES) in refused.reason
    assert "promotion" in verify_chain(_fresh(chain)).checks


def test_a_retired_key_decides_nothing_on_versions_committed_after_the_rotation(tmp_path: Path) -> None:
    """Rotation revokes for decisions as for blocks and anchors: after policy 2 = {B}, the retired A (a leaked
    old key, with store write access) cannot promote v3, a candidate committed under policy 2."""
    chain = ChainStore(LocalStore(str(tmp_path / "root")), CHAIN, signer=KEY_A, trust_root=ROOT)
    chain.init()
    adopt_policy(chain, [ROOT_KEY, KEY_A], [KEY_A.public_key], root=ROOT)
    for i in (1, 2):
        chain.commit(payload(f"r{i}"), meta(f"r{i}", step=i))
    PromotionLog(chain).decide("promote", chain.get(1), "manual", KEY_A)
    adopt_policy(chain, [KEY_A, KEY_B], [KEY_B.public_key], root=ROOT)
    ChainStore(chain.store, CHAIN, signer=KEY_B, trust_root=ROOT).commit(payload("r3"), meta("r3", step=3))
    first = chain.store.get(record_key(chain, 1))
    v3 = chain.get(3)
    assert v3.header.trust_policy_version == 2
    # Policy 1: what A may still sign under (its predecessor named policy 1 too).
    _plant_promotion_by_a(chain, 2, v3, previous=hashlib.sha256(first).hexdigest())
    fresh = ChainStore(chain.store, CHAIN, trust_root=ROOT)
    with pytest.raises(ChainCorruptionError, match="retired key decides nothing") as refused:
        PromotionReader(fresh).gated()
    assert refused.value.check == "promotion"
    assert "promotion" in verify_chain(fresh, root=ROOT).checks
    with pytest.raises(ChainCorruptionError, match="retired key"):
        InferenceClient(fresh, ClientConfig(), trust=ReadTrust(root=ROOT, require_signed=True)).refresh()
    (tmp_path / "root" / record_key(chain, 2)).unlink()  # the same decision by B, under policy 2: valid
    PromotionLog(ChainStore(chain.store, CHAIN, trust_root=ROOT)).decide("promote", v3, "manual", KEY_B)
    assert verify_chain(ChainStore(chain.store, CHAIN, trust_root=ROOT), root=ROOT).ok


def test_re_promoting_after_a_rotation_retires_the_old_key_for_decisions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The rotation step of docs/chain.md: `ml8s chain promote N` of the served version writes a decision under
    the new policy (not "already promoted"), after which A's decisions, even on old versions, are refused."""
    from ml8s.chain.root import root_json
    from ml8s.cli.main import main

    root = tmp_path / "root"
    chain = ChainStore(LocalStore(str(root)), CHAIN, signer=KEY_A, trust_root=ROOT)
    chain.init()
    adopt_policy(chain, [ROOT_KEY, KEY_A], [KEY_A.public_key], root=ROOT)
    for i in (1, 2):
        chain.commit(payload(f"p{i}"), meta(f"p{i}", step=i))
    PromotionLog(chain).decide("promote", chain.get(2), "manual", KEY_A)
    adopt_policy(chain, [KEY_A, KEY_B], [KEY_B.public_key], root=ROOT)
    (tmp_path / "b.pem").write_bytes(KEY_B.private_pem())
    (tmp_path / "trust-root.json").write_bytes(root_json(ROOT))
    env = {"PIPELINE_ROOT_URI": str(root), "CHAIN_NAME": CHAIN, "MLFLOW_TRACKING_URI": ""}
    env |= {"ML8S_SIGNING_KEY_FILE": str(tmp_path / "b.pem"), "CHAIN_TRUST_ROOT": str(tmp_path / "trust-root.json")}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("ML8S_SIGNING_KEY", raising=False)
    assert main(["chain", "promote", "2"]) == 0
    assert "already" not in capsys.readouterr().err
    assert main(["chain", "promote", "2"]) == 0  # under the newest policy already: nothing written
    assert "already the promoted version" in capsys.readouterr().err
    log = PromotionLog(ChainStore(chain.store, CHAIN, trust_root=ROOT))
    assert [d.decision.trust_policy_version for d in log.decisions()] == [1, 2]
    previous = hashlib.sha256(chain.store.get(record_key(chain, 2))).hexdigest()
    v1 = chain.get(1)  # committed under policy 1: A's forged promotion of it names policy 1
    _plant_promotion_by_a(chain, 3, v1, previous=previous)
    with pytest.raises(ChainCorruptionError, match="older than its predecessor"):
        PromotionReader(ChainStore(chain.store, CHAIN, trust_root=ROOT)).gated()


def test_predict_version_n_on_a_gate_that_promoted_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """--version N reads version N even where the gate promoted nothing yet (the pins are still checked)."""
    from ml8s.cli.main import main

    root = tmp_path / "root"
    chain = chain_at(f"file://{root}", "gate")
    commit_weights(chain, weights_series(3, torch.float32, 1)[0], weights_meta("only"), interval=4)
    PromotionLog(chain).decide("reject", chain.get(1), "a first candidate rejected", None)
    for name, value in {"PIPELINE_ROOT_URI": f"file://{root}", "CHAIN_NAME": "gate", "MLFLOW_TRACKING_URI": ""}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("CHAIN_TRUST_ROOT", raising=False)
    monkeypatch.setenv("CHAIN_REQUIRE_SIGNED", "false")
    rows = tmp_path / "rows.csv"
    rows.write_text("a,b\n1,2\n")
    capsys.readouterr()
    assert main(["predict", "--chain", "gate", "--input", str(rows)]) == 1
    assert "no version promoted yet" in capsys.readouterr().err
    assert main(["predict", "--chain", "gate", "--input", str(rows), "--version", "1"]) == 1
    err = capsys.readouterr().err
    assert "no version promoted" not in err and "holds no" in err, err  # v1 itself was read: a bare payload


def test_a_restarted_follower_removes_the_state_files_a_kill_left(tmp_path: Path) -> None:
    """A kill between writing a state file and renaming it over the old one leaves ``{state}*.tmp``: the
    next start removes them (never the states themselves, nor anything that is not its own)."""
    from ml8s.serving import ModelDirectory

    out = tmp_path / "serve"
    state = Path(ModelDirectory(str(out)).state_path)
    state.write_text("{}")
    Path(f"{state}.promotion.json").write_text("{}")
    left = [Path(f"{state}.4242.tmp"), Path(f"{state}.promotion.json.tmp")]
    for path in left:
        path.write_text("{")
    (out / "operator-notes.tmp").write_text("mine")
    ModelDirectory(str(out))
    assert not any(path.exists() for path in left)
    assert state.exists() and Path(f"{state}.promotion.json").exists() and (out / "operator-notes.tmp").exists()


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (b'{"checkpoint": ', "the document: Invalid JSON"),
        (b"[]", "the document: Input should be"),
        (b'{"checkpoint": {}, "public_key": "", "signature": ""}', "checkpoint.chain_name: Field required"),
    ],
)
def test_an_anchor_that_is_not_one_says_what_is_wrong(data: bytes, problem: str) -> None:
    with pytest.raises(ConfigError, match=f"--anchor a.json is no ml8s chain anchor \\({problem}") as caught:
        read_anchor(data, where="--anchor a.json")
    assert "\n" not in str(caught.value)
