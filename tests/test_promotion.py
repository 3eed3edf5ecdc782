"""The promotion gate: a signed, hash-linked log of decisions that followers, ``predict --chain`` and verify
read; forged, cut or rolled-back logs are refused. (The pipeline's metric rule: tests/test_promotion_rule.py.)"""

from __future__ import annotations

import contextlib
import hashlib
import json
from pathlib import Path

import pytest
import torch
from serving_support import chain_at, meta, weights_series
from test_chain_signing import KEY_A, ROOT, ROOT_KEY, intruder

from ml8s.chain import ChainStore, ChainVersion, PromotionLog, ReadTrust, SigningKey, adopt_policy, verify_chain
from ml8s.chain.commit import _seal, payload_files
from ml8s.chain.models import WeightsFields
from ml8s.chain.promotion import SignedDecision, decision_bytes, record_key
from ml8s.chain.root import KeySignature, trusted_key
from ml8s.chain.trust import SignedPolicy, policy_bytes, policy_file, policy_key
from ml8s.cli.main import main
from ml8s.errors import ChainCorruptionError, ChainForkError, ChainRollbackError, SigningRequiredError
from ml8s.serving import ClientConfig, FollowOptions, InferenceClient, follow
from ml8s.store import ObjectInfo, open_store
from ml8s.weights import WEIGHTS_FULL, commit_weights

KEY, OTHER = SigningKey.generate(), SigningKey.generate()


def _chain(root: Path, name: str, *, signed: bool) -> ChainStore:
    """Four weights versions; with ``signed``, a trust policy of KEY and every block signed by it."""
    chain = chain_at(f"file://{root}", name)
    if signed:
        adopt_policy(chain, KEY, [KEY.public_key])
        chain = ChainStore(chain.store, name, signer=KEY)
    for n, weights in enumerate(weights_series(11, torch.float32, 4)):
        commit_weights(chain, weights, meta(f"{name}-{n}"), interval=4)
    return chain


def _served(client: InferenceClient) -> int:
    assert client.version is not None
    return client.version.counter


def test_followers_serve_the_promoted_version_not_the_head(tmp_path: Path) -> None:
    chain = _chain(tmp_path / "root", "gate", signed=True)
    client = InferenceClient(ChainStore(chain.store, "gate"), ClientConfig(state_path=str(tmp_path / "state.json")))
    client.refresh()
    assert _served(client) == 4  # no decision yet: no gate, the head is served as before
    log = PromotionLog(chain)
    log.decide("promote", chain.get(2), "manual", KEY)
    log.decide("reject", chain.get(3), "accuracy fell", KEY)
    client.refresh()
    assert _served(client) == 2  # the gate: candidates 3 and 4 are not served
    assert [(d.decision.action, d.decision.served_counter) for d in log.decisions()] == [
        ("promote", 2),
        ("reject", 2),
    ]
    log.decide("promote", chain.get(4), "manual", KEY)
    assert client.refresh() and _served(client) == 4
    report = verify_chain(ChainStore(chain.store, "gate"))
    assert report.ok, report.findings


def test_an_unsigned_or_foreign_decision_is_refused_on_a_signed_chain(tmp_path: Path) -> None:
    chain = _chain(tmp_path / "root", "gate", signed=True)
    with pytest.raises(SigningRequiredError):
        PromotionLog(chain).decide("promote", chain.get(1), "manual", None)
    with pytest.raises(SigningRequiredError):
        PromotionLog(chain).decide("promote", chain.get(1), "manual", OTHER)
    PromotionLog(chain).decide("promote", chain.get(1), "manual", KEY)
    key = record_key(chain, 1)
    signed = SignedDecision.model_validate_json(chain.store.get(key))
    head = chain.get(4)  # a forger promotes the head instead of v1
    forged = signed.decision.model_copy(
        update={"counter": 4, "block_hash": head.block_hash, "served_counter": 4, "served_block_hash": head.block_hash}
    )
    resigned = SignedDecision(decision=forged, signer_key_id=OTHER.key_id, signature=OTHER.sign(decision_bytes(forged)))
    kept = SignedDecision(decision=forged, signer_key_id=KEY.key_id, signature=signed.signature)
    for bad, why in ((resigned, "not signed by a key of trust policy 1"), (kept, "not signed by a key")):
        record = tmp_path / "root" / key
        record.chmod(0o644)
        record.write_bytes(bad.model_dump_json().encode())
        with pytest.raises(ChainCorruptionError, match=why):
            PromotionLog(ChainStore(chain.store, "gate")).decisions()
        report = verify_chain(ChainStore(chain.store, "gate"))
        assert "promotion" in report.checks
        client = InferenceClient(ChainStore(chain.store, "gate"), ClientConfig())
        with pytest.raises(ChainCorruptionError):
            client.refresh()  # a forged decision never moves a follower


def test_a_decision_must_name_a_block_on_the_chain_and_follow_its_predecessor(tmp_path: Path) -> None:
    chain = _chain(tmp_path / "root", "plain", signed=False)
    log = PromotionLog(chain)
    log.decide("promote", chain.get(1), "manual", None)
    data = chain.store.get(record_key(chain, 1))
    first, linked = SignedDecision.model_validate_json(data), hashlib.sha256(data).hexdigest()
    off = {"block_hash": "ab" * 32, "served_block_hash": "ab" * 32}
    elsewhere = first.decision.model_copy(update={"sequence": 2, "previous_sha256": linked, **off})
    chain.store.put_if_absent(record_key(chain, 2), SignedDecision(decision=elsewhere).model_dump_json().encode())
    with pytest.raises(ChainCorruptionError, match="the chain holds"):
        PromotionLog(ChainStore(chain.store, "plain")).decisions()
    (tmp_path / "root" / record_key(chain, 2)).unlink()
    unlinked = first.decision.model_copy(update={"sequence": 2})  # previous_sha256 left empty: not linked
    chain.store.put_if_absent(record_key(chain, 2), SignedDecision(decision=unlinked).model_dump_json().encode())
    with pytest.raises(ChainCorruptionError, match="previous"):
        PromotionLog(ChainStore(chain.store, "plain")).decisions()


def test_a_cut_or_rolled_back_log_is_refused(tmp_path: Path) -> None:
    chain = _chain(tmp_path / "root", "plain", signed=False)
    log = PromotionLog(chain)
    for counter in (1, 2, 3):
        log.decide("promote", chain.get(counter), "manual", None)
    state = str(tmp_path / "follower-state.json")
    client = InferenceClient(ChainStore(chain.store, "plain"), ClientConfig(state_path=state))
    client.refresh()
    assert _served(client) == 3
    (tmp_path / "root" / record_key(chain, 2)).unlink()  # a decision in the middle removed
    assert "promotion" in verify_chain(ChainStore(chain.store, "plain")).checks
    (tmp_path / "root" / record_key(chain, 3)).unlink()  # and the newest: the log now ends at 1
    restarted = InferenceClient(ChainStore(chain.store, "plain"), ClientConfig(state_path=state))
    with pytest.raises(ChainRollbackError, match="saw decision 3"):
        restarted.refresh()  # a restarted follower remembers how far the log went


def test_a_first_start_refuses_a_log_cut_in_the_middle_as_verify_does(tmp_path: Path) -> None:
    """A store writer removes decision 2 (promote v2) and leaves 3 (reject v3): read alone, the log ends at 1
    and a follower with no state or anchor served v1, the writer's choice, while verify FAILs the cut log."""
    chain = _chain(tmp_path / "root", "gate", signed=True)
    log = PromotionLog(chain)
    log.decide("promote", chain.get(1), "manual", KEY)
    log.decide("promote", chain.get(2), "manual", KEY)
    log.decide("reject", chain.get(3), "accuracy fell", KEY)
    (tmp_path / "root" / record_key(chain, 2)).unlink()
    assert "promotion" in verify_chain(ChainStore(chain.store, "gate")).checks
    client = InferenceClient(ChainStore(chain.store, "gate"), ClientConfig(), trust=ReadTrust())
    with pytest.raises(ChainCorruptionError, match="decision 2 is missing but 3 exists") as refused:
        client.refresh()
    assert refused.value.check == "promotion" and client.version is None


def _cli_chain(root: Path, monkeypatch: pytest.MonkeyPatch, tracking_uri: str = "") -> ChainStore:
    """An unsigned four-version chain 'cli' under ``root``, and the environment of an ``ml8s chain`` command on it
    (no signing key, MLflow at ``tracking_uri``)."""
    chain = _chain(root, "cli", signed=False)
    env = {"PIPELINE_ROOT_URI": f"file://{root}", "CHAIN_NAME": "cli", "MLFLOW_TRACKING_URI": tracking_uri}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("ML8S_SIGNING_KEY", raising=False)
    monkeypatch.delenv("ML8S_SIGNING_KEY_FILE", raising=False)
    return chain


def test_cli_promote_reject_and_what_follow_and_log_show(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "root"
    _cli_chain(root, monkeypatch)
    assert main(["chain", "promote", "2", "--reason", "checked by hand"]) == 0
    assert main(["chain", "reject", "3"]) == 0
    assert main(["chain", "reject", "2"]) == 1  # the served version is no candidate
    assert "is the version followers serve" in capsys.readouterr().err
    out = tmp_path / "serve"
    assert main(["follow", "--out", str(out), "--once"]) == 0
    assert json.loads((out / "current" / "ml8s_version.json").read_text())["counter"] == 2
    capsys.readouterr()
    assert main(["chain", "log", "--json"]) == 0
    shown = {v["counter"]: v["promotion"] for v in json.loads(capsys.readouterr().out)}
    assert shown == {4: "candidate", 3: "rejected", 2: "promoted", 1: "candidate", 0: ""}
    assert main(["chain", "promotions"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and "PROMOTE" in lines[0] and "checked by hand" in lines[0] and "REJECT" in lines[1]
    assert main(["chain", "promote", "4"]) == 0
    capsys.readouterr()
    assert main(["chain", "promote", "4"]) == 0  # already promoted: stdout is still the decision in force
    again = capsys.readouterr()
    assert json.loads(again.out)["decision"]["counter"] == 4 and "already the promoted version" in again.err
    assert main(["follow", "--out", str(out), "--once"]) == 0
    assert json.loads((out / "current" / "ml8s_version.json").read_text())["counter"] == 4
    assert main(["chain", "verify"]) == 0


def test_rejecting_an_old_version_of_a_chain_with_no_decision_keeps_its_head_served(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A chain with no decision serves its head (v4). ``ml8s chain reject 2`` wrote a first decision that serves
    nothing: new followers and ``predict --chain`` stopped serving v4 ("no version promoted yet"), and
    ``reject 4`` was let through. The head is recorded as promoted first; rejecting it is refused."""
    root = tmp_path / "root"
    chain = _cli_chain(root, monkeypatch)
    assert main(["chain", "reject", "4"]) == 1
    assert "v4 is the version followers serve (the chain has no promotion decision" in capsys.readouterr().err
    assert not PromotionLog(chain).decisions()
    assert main(["chain", "reject", "2"]) == 0
    decisions = [d.decision for d in PromotionLog(chain).decisions()]
    assert [(d.action, d.counter, d.served_counter) for d in decisions] == [("promote", 4, 4), ("reject", 2, 4)]
    assert "the head that followers served" in decisions[0].rule
    out = tmp_path / "serve"
    assert main(["follow", "--out", str(out), "--once"]) == 0
    assert json.loads((out / "current" / "ml8s_version.json").read_text())["counter"] == 4
    PromotionLog(chain).keep_head_served(chain.get(3), None)  # only ever the first decision
    assert len(PromotionLog(chain).decisions()) == 2
    assert main(["chain", "verify"]) == 0


def test_a_gate_that_promoted_nothing_serves_nothing(tmp_path: Path) -> None:
    chain = _chain(tmp_path / "root", "none", signed=False)
    PromotionLog(chain).decide("reject", chain.get(1), "a first candidate rejected", None)
    held = follow(
        ChainStore(open_store(f"file://{tmp_path}/root"), "none"), FollowOptions(out=str(tmp_path / "o"), once=True)
    )
    assert held is None and not (tmp_path / "o" / "current").exists()


def test_a_running_follower_checks_decisions_against_its_pinned_root(tmp_path: Path) -> None:
    """The head stays put (so a poll checks no policy); a store writer rewrites policy 1 as self-signed by its
    own key and appends a decision by that key promoting the rejected v3. With a root pinned, that policy is
    not the chain's: the decision is refused and the promoted v2 stays served."""
    chain = chain_at(f"file://{tmp_path}/root", "gate")
    chain = ChainStore(chain.store, "gate", signer=KEY_A, trust_root=ROOT)
    adopt_policy(chain, [ROOT_KEY, KEY_A], [KEY_A.public_key], root=ROOT)
    for n, weights in enumerate(weights_series(11, torch.float32, 3)):
        commit_weights(chain, weights, meta(f"gate-{n}"), interval=4)
    log = PromotionLog(chain)
    log.decide("promote", chain.get(2), "manual", KEY_A)
    log.decide("reject", chain.get(3), "accuracy fell", KEY_A)
    client = InferenceClient(
        ChainStore(chain.store, "gate"), ClientConfig(), trust=ReadTrust(root=ROOT, require_signed=True)
    )
    client.refresh()
    assert _served(client) == 2
    v3, previous = chain.get(3), hashlib.sha256(chain.store.get(record_key(chain, 2))).hexdigest()
    forged = log.decisions()[-1].decision.model_copy(
        update={"sequence": 3, "action": "promote", "served_counter": 3, "served_block_hash": v3.block_hash}
    )
    forged = forged.model_copy(update={"previous_sha256": previous})
    policy = SignedPolicy.model_validate_json(chain.store.get(policy_key(chain, 1))).policy
    rewritten = policy.model_copy(update={"keys": (trusted_key(OTHER.public_key),)})
    signature = KeySignature(key_id=OTHER.key_id, signature=OTHER.sign(policy_bytes(rewritten)))
    (tmp_path / "root" / policy_key(chain, 1)).chmod(0o644)
    (tmp_path / "root" / policy_key(chain, 1)).write_bytes(
        policy_file(SignedPolicy(policy=rewritten, signatures=(signature,)))
    )
    record = SignedDecision(decision=forged, signer_key_id=OTHER.key_id, signature=OTHER.sign(decision_bytes(forged)))
    chain.store.put_if_absent(record_key(chain, 3), record.model_dump_json().encode())
    with pytest.raises(ChainCorruptionError, match="pinned root") as refused:
        client.refresh()
    # the decision is checked against the follower's own policies, refused as the head would be (trust_root)
    assert refused.value.check == "trust_root" and _served(client) == 2
    assert "promotion" in verify_chain(ChainStore(chain.store, "gate"), root=ROOT).checks


def test_a_running_follower_holds_decisions_to_the_policies_it_saw(tmp_path: Path) -> None:
    """No root pinned: the follower's state keeps the sha256 of the policy it saw. The head stays put (a poll then
    checks no policy) while a store writer rewrites policy 1, self-signed, to add its own key beside KEY, and
    appends a decision by that key promoting the rejected v3. The running follower refuses it as a restarted one
    does (trust_policy_replaced), and keeps serving v2 (it served v3 before)."""
    chain = _chain(tmp_path / "root", "gate", signed=True)
    log = PromotionLog(chain)
    log.decide("promote", chain.get(2), "manual", KEY)
    log.decide("reject", chain.get(3), "accuracy fell", KEY)
    client = InferenceClient(
        ChainStore(chain.store, "gate"), ClientConfig(state_path=str(tmp_path / "state.json")), trust=ReadTrust()
    )
    client.refresh()
    assert _served(client) == 2
    policy = SignedPolicy.model_validate_json(chain.store.get(policy_key(chain, 1))).policy
    keys = sorted({trusted_key(KEY.public_key), trusted_key(OTHER.public_key)}, key=lambda k: k.key_id)
    rewritten = policy.model_copy(update={"keys": tuple(keys)})
    signature = KeySignature(key_id=OTHER.key_id, signature=OTHER.sign(policy_bytes(rewritten)))
    (tmp_path / "root" / policy_key(chain, 1)).chmod(0o644)
    (tmp_path / "root" / policy_key(chain, 1)).write_bytes(
        policy_file(SignedPolicy(policy=rewritten, signatures=(signature,)))
    )
    v3, previous = chain.get(3), hashlib.sha256(chain.store.get(record_key(chain, 2))).hexdigest()
    forged = log.decisions()[-1].decision.model_copy(
        update={
            "sequence": 3,
            "action": "promote",
            "served_counter": 3,
            "served_block_hash": v3.block_hash,
            "previous_sha256": previous,
        }
    )
    record = SignedDecision(decision=forged, signer_key_id=OTHER.key_id, signature=OTHER.sign(decision_bytes(forged)))
    chain.store.put_if_absent(record_key(chain, 3), record.model_dump_json().encode())
    with pytest.raises(ChainCorruptionError) as refused:
        client.refresh()
    assert refused.value.check == "trust_policy_replaced" and _served(client) == 2


def test_the_promoted_block_is_the_one_served_when_the_head_flips(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The follower's one head read names an orphan sibling of the promoted v3 (the weights of v1); the decision
    is then checked against a second read naming the real head (the records and events of v3 and v4 deleted, so
    the follower's evidence check has nothing to object). The version served is found from the head the
    follower checked, so it must be the very block the decision names: ChainForkError, nothing served."""
    chain = _chain(tmp_path / "root", "flip", signed=False)
    PromotionLog(chain).decide("promote", chain.get(3), "manual", None)
    base = tmp_path / "root" / chain.prefix
    for later in (chain.get(3), chain.get(4)):
        (base / "runs" / f"{later.header.full_config_hash}.json").unlink()
        for event in (base / "audit").iterdir():
            if later.version_dir in event.read_text():
                event.unlink()
    v1 = chain.get(1)
    weights = {WEIGHTS_FULL: chain.fetch_payload(v1, WEIGHTS_FULL)}
    fields = WeightsFields(weights_hash=v1.header.weights_hash, weights_full_counter=3)
    orphan = _seal(chain.get(2), meta("orphan"), payload_files(weights), weights=fields)
    chain.write_version(orphan, weights, [])
    reader = ChainStore(chain.store, "flip")
    real, reads = reader.head, []

    def flipping() -> ChainVersion:
        reads.append(1)
        return reader.load(orphan.version_dir) if len(reads) == 1 else real()

    monkeypatch.setattr(reader, "head", flipping)
    client = InferenceClient(reader, ClientConfig(), trust=ReadTrust())
    with pytest.raises(ChainForkError, match="the promotion decision names"):
        client.refresh()
    assert client.served is None


@pytest.mark.parametrize(
    ("data", "problem"),
    [(b'{"decision": ', "Invalid JSON"), (b"[]", "should be"), (b'{"decision": {}}', "decision.")],
)
def test_a_malformed_decision_record_says_what_is_wrong(tmp_path: Path, data: bytes, problem: str) -> None:
    chain = chain_at(f"file://{tmp_path / 'root'}", "plain")
    chain.store.put_if_absent(record_key(chain, 1), data)
    with pytest.raises(ChainCorruptionError, match=f"is no promotion decision \\(.*{problem}") as caught:
        PromotionLog(chain).decisions()
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("verb", ["promote", "reject"])
def test_a_reason_that_is_not_utf8_is_a_usage_error_and_nothing_is_decided(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], verb: str
) -> None:
    """An argument's non-UTF-8 bytes reach Python as lone surrogates: the decision could not be serialized
    (INTERNAL_ERROR PydanticSerializationError, exit 2 with a crash report) instead of a usage error."""
    chain = chain_at(f"file://{tmp_path / 'root'}", "plain")
    commit_weights(chain, weights_series(11, torch.float32, 1)[0], meta("plain-0"), interval=4)
    monkeypatch.setenv("PIPELINE_ROOT_URI", f"file://{tmp_path / 'root'}")
    monkeypatch.setenv("CHAIN_NAME", "plain")
    with pytest.raises(SystemExit) as exited:
        main(["chain", verb, "1", "--reason", "by hand \udcff"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "argument --reason" in err and "not UTF-8" in err and "INTERNAL_ERROR" not in err
    assert PromotionLog(chain).decisions() == []


def _damaged_sqlite(path: Path) -> Path:
    """A SQLite file whose header (what the settings check) is sound and whose later pages are not."""
    import sqlite3

    with contextlib.closing(sqlite3.connect(path)) as db:
        for n in range(40):  # the schema table outgrows its first page: reading it reaches the damage
            db.execute(f"CREATE TABLE t{n}_{'x' * 60} (a INTEGER, b TEXT)")
        db.commit()
    with path.open("r+b") as handle:
        handle.seek(4096)
        handle.write(b"\xff" * (path.stat().st_size - 4096))
    return path


def test_cli_promote_with_a_damaged_registry_keeps_the_decision_and_names_the_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """SQLAlchemy's DatabaseError (a damaged or locked sqlite registry) escaped the alias move: INTERNAL_ERROR,
    exit 2, after the decision was already written. The decision stands; the alias is named as not moved."""
    root = tmp_path / "root"
    _cli_chain(root, monkeypatch, f"sqlite:///{_damaged_sqlite(tmp_path / 'mlflow.db')}")
    assert main(["chain", "promote", "2"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["decision"]["counter"] == 2
    assert "alias 'promoted' was not moved: REGISTRY_ERROR" in err and "malformed" in err
    assert "INTERNAL_ERROR" not in err and "Traceback" not in err


def test_cli_promote_names_a_registry_it_could_not_move_escaped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The alias warning printed its error raw: the registry's path (from MLFLOW_TRACKING_URI) colored the terminal
    and a newline in it made a line of its own ('ml8s: forged ...'). Escaped as error lines are."""
    folder = tmp_path / "db\x1b[31m\nml8s: forged"
    folder.mkdir()
    _cli_chain(tmp_path / "root", monkeypatch, f"sqlite:///{_damaged_sqlite(folder / 'mlflow.db')}")
    assert main(["chain", "promote", "2"]) == 0
    err = capsys.readouterr().err
    assert "\x1b" not in err and [line for line in err.splitlines() if line.startswith("ml8s: f")] == []
    assert "ml8s: warning: the MLflow alias 'promoted' was not moved: REGISTRY_ERROR: MLflow database " in err
    assert "/db\\x1b[31m\n  ml8s: forged/mlflow.db" in err


def test_cli_promote_creates_no_mlflow_database_where_there_is_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Looking for the version to alias opened MLflow on the root's default sqlite:/// file, which created a
    whole empty registry there (seconds of migrations) to find nothing in it."""
    root = tmp_path / "root"
    _cli_chain(root, monkeypatch)
    assert main(["chain", "promote", "3"]) == 0
    assert json.loads(capsys.readouterr().out)["decision"]["counter"] == 3
    assert not (root / "mlflow.db").exists()


def test_cli_reject_on_a_gateless_chain_never_records_a_forged_head_as_served(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A signed chain with no decision yet; a store writer (no key) appends an unsigned head. ``ml8s chain reject 1``
    first records the head followers served as promoted: it took chain.head() unchecked, so the operator's key signed
    a promotion of the forged version. The head is read as followers read it, and the command is refused."""
    chain = _chain(tmp_path / "root", "cli", signed=True)
    for key, value in {"PIPELINE_ROOT_URI": f"file://{tmp_path / 'root'}", "CHAIN_NAME": "cli"}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("ML8S_SIGNING_KEY", KEY.private_pem().decode())
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "")
    intruder(chain, "forged", signer=None, policy=1)
    assert main(["chain", "reject", "1"]) == 1
    assert PromotionLog(ChainStore(chain.store, "cli")).decisions() == []


def test_cli_promote_signs_no_forged_version_and_is_not_stopped_by_a_forged_head(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A store writer (no key) appends an unsigned head to a signed chain. ``ml8s chain promote`` of that version
    signed a promotion of it with the operator's key once the chain had a decision; and on a chain with none,
    promoting a good version (the way back to serving it) failed on the forged head. The version promoted is read
    as followers read it, and the head only tells whether that version is already served."""
    chain = _chain(tmp_path / "root", "cli", signed=True)
    for key, value in {"PIPELINE_ROOT_URI": f"file://{tmp_path / 'root'}", "CHAIN_NAME": "cli"}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("ML8S_SIGNING_KEY", KEY.private_pem().decode())
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "")
    good = chain.head().counter
    forged = intruder(chain, "forged", signer=None, policy=1).counter
    assert main(["chain", "promote", str(forged)]) == 1
    assert "CHAIN_UNTRUSTED" in capsys.readouterr().err
    assert main(["chain", "promote", str(good)]) == 0
    assert main(["chain", "promote", str(forged)]) == 1  # now gated: the head is not read at all
    decisions = PromotionLog(ChainStore(chain.store, "cli")).decisions()
    assert [d.decision.counter for d in decisions] == [good]


def test_a_first_start_takes_decisions_appended_while_it_reads_the_log_for_no_cut(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A first start reads the log, then lists it for a cut. Two decisions appended in between (two runs deciding,
    or one run's first reject, written after the decision keeping the head served) were taken for a record after
    a missing one: a legitimate log refused as cut (ChainCorruptionError), by followers and verify alike."""
    chain = _chain(tmp_path / "root", "gate", signed=True)
    PromotionLog(chain).decide("promote", chain.get(1), "manual", KEY)
    reading = ChainStore(chain.store, "gate")
    listing, appended = reading.objects, []

    def appended_meanwhile(prefix: str) -> list[ObjectInfo]:
        if prefix.endswith("promotions") and not appended:
            appended.append(PromotionLog(chain).decide("promote", chain.get(2), "manual", KEY))
            appended.append(PromotionLog(chain).decide("reject", chain.get(3), "accuracy fell", KEY))
        return listing(prefix)

    monkeypatch.setattr(reading, "objects", appended_meanwhile)
    client = InferenceClient(reading, ClientConfig(), trust=ReadTrust())
    client.refresh()
    assert len(appended) == 2 and _served(client) == 2
