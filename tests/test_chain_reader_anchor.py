"""Issue 21 review: every reader given --anchor checks the chain against it before it acts. ``chain reproduce``
took none: a rollback whose run index and audit trail were erased too was re-trained as the chain's history."""

from __future__ import annotations

import datetime as dt
import shutil
from pathlib import Path

import pytest
from test_chain_support import CHAIN, meta, payload, set_head, version_path

from ml8s.chain import ChainStore, Follower, SigningKey, adopt_policy, make_anchor, paths, verify_chain
from ml8s.chain.root import KeySignature, trusted_key
from ml8s.chain.trust import SignedPolicy, policy_bytes, policy_file, policy_key
from ml8s.cli.main import main
from ml8s.errors import UntrustedVersionError
from ml8s.store import LocalStore

KEY = SigningKey.generate()
WRITER = SigningKey.generate()  # a store writer's own key: no policy of the operator lists it


def _erase_the_newest(root: Path, chain: ChainStore) -> None:
    """Head back to v2; v3, its run record, claim and audit events deleted: only an anchor can tell."""
    newest = chain.head()
    set_head(root, chain.get(newest.counter - 1))
    shutil.rmtree(version_path(root, newest.version_dir))
    base = root / paths.ROOT / CHAIN
    for record in (base / paths.RUNS).glob(f"{newest.header.full_config_hash}*"):
        record.unlink()
    for event in (base / paths.AUDIT).iterdir():
        if newest.block_hash in event.read_text() or newest.version_dir in event.read_text():
            event.unlink()


def test_reproduce_refuses_a_rollback_against_its_anchor_before_training(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "root"
    chain = ChainStore(LocalStore(str(root)), CHAIN, signer=KEY)
    chain.init()
    adopt_policy(chain, KEY, [KEY.public_key])
    for i in range(1, 4):
        chain.commit(payload(f"v{i}"), meta(f"v{i}", step=i))
    anchor = tmp_path / "anchor.json"
    anchor.write_text(make_anchor(chain, KEY, dt.timedelta(days=1), dt.datetime.now(dt.UTC)).model_dump_json())
    _erase_the_newest(root, chain)
    for name, value in {"PIPELINE_ROOT_URI": str(root), "CHAIN_NAME": CHAIN, "CHAIN_REQUIRE_SIGNED": "false"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("CHAIN_TRUST_ROOT", raising=False)
    capsys.readouterr()
    code = main(["chain", "reproduce", "--from", "0", "--anchor", str(anchor)])
    err = capsys.readouterr().err
    assert main(["chain", "verify"]) == 0  # without the anchor, a consistent shorter chain
    capsys.readouterr()
    assert code == 1 and "anchor_rollback" in err and "training run" not in err, err
    assert "Traceback" not in err


def test_an_inference_client_built_without_trust_honours_the_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/chain.md: InferenceClient loads CHAIN_TRUST_ROOT and CHAIN_REQUIRE_SIGNED like every reader. Built by
    an application without ``trust=``, it served an unsigned chain that ``ml8s follow`` refuses."""
    import torch
    from serving_support import chain_at, weights_series
    from serving_support import meta as weights_meta

    from ml8s.errors import UntrustedVersionError
    from ml8s.serving import ClientConfig, InferenceClient
    from ml8s.weights import commit_weights

    chain = chain_at(f"file://{tmp_path / 'root'}", "plain")
    commit_weights(chain, weights_series(7, torch.float32, 1)[0], weights_meta("plain-1"), interval=4)
    monkeypatch.delenv("CHAIN_TRUST_ROOT", raising=False)
    monkeypatch.setenv("CHAIN_REQUIRE_SIGNED", "true")
    with pytest.raises(UntrustedVersionError) as refused:
        InferenceClient(ChainStore(chain.store, "plain"), ClientConfig()).refresh()
    assert refused.value.check in {"unsigned", "trust_root_missing"}
    monkeypatch.setenv("CHAIN_REQUIRE_SIGNED", "false")
    client = InferenceClient(ChainStore(chain.store, "plain"), ClientConfig())
    assert client.refresh() and client.version is not None and client.version.counter == 1


def test_a_delta_consumer_built_without_trust_honours_the_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DeltaConsumer, the other serving reader, takes CHAIN_REQUIRE_SIGNED from the settings too: built without
    ``trust=`` it rebuilt an unsigned version that ``ml8s follow`` and the inference client refuse."""
    import torch
    from serving_support import chain_at, weights_series
    from serving_support import meta as weights_meta

    from ml8s.errors import UntrustedVersionError
    from ml8s.serving import DeltaConsumer
    from ml8s.weights import commit_weights

    chain = chain_at(f"file://{tmp_path / 'root'}", "plain")
    commit_weights(chain, weights_series(7, torch.float32, 1)[0], weights_meta("plain-1"), interval=4)
    monkeypatch.delenv("CHAIN_TRUST_ROOT", raising=False)
    monkeypatch.setenv("CHAIN_REQUIRE_SIGNED", "true")
    with pytest.raises(UntrustedVersionError) as refused:
        DeltaConsumer(ChainStore(chain.store, "plain")).get_checkpoint_sync(1)
    assert refused.value.check in {"unsigned", "trust_root_missing"}
    monkeypatch.setenv("CHAIN_REQUIRE_SIGNED", "false")
    served = DeltaConsumer(ChainStore(chain.store, "plain")).get_checkpoint_sync(1)
    assert served is not None and served.info.counter == 1


def test_a_follower_refuses_a_policy_replaced_since_its_anchor(tmp_path: Path) -> None:
    """No root pinned: a store writer replaces policy 1 with one it self-signs that keeps the committer's key and
    adds its own, then commits with that key. verify --anchor names it (anchor_policy); so does an anchored
    follower, instead of serving the writer's version."""
    chain = ChainStore(LocalStore(str(tmp_path)), CHAIN, signer=KEY)
    chain.init()
    adopt_policy(chain, KEY, [KEY.public_key])
    chain.commit(payload("v1"), meta("v1"))
    anchor = make_anchor(chain, KEY, dt.timedelta(days=1), dt.datetime.now(dt.UTC))
    follower = Follower(ChainStore(chain.store, CHAIN), anchor=anchor)
    follower.poll()
    policy = SignedPolicy.model_validate_json(chain.store.get(policy_key(chain, 1))).policy
    keys = tuple(sorted((trusted_key(KEY.public_key), trusted_key(WRITER.public_key)), key=lambda k: k.key_id))
    replaced = policy.model_copy(update={"keys": keys})
    signature = KeySignature(key_id=WRITER.key_id, signature=WRITER.sign(policy_bytes(replaced)))
    (tmp_path / policy_key(chain, 1)).chmod(0o644)
    (tmp_path / policy_key(chain, 1)).write_bytes(policy_file(SignedPolicy(policy=replaced, signatures=(signature,))))
    ChainStore(chain.store, CHAIN, signer=WRITER).commit(payload("evil"), meta("evil"))
    assert "anchor_policy" in verify_chain(ChainStore(chain.store, CHAIN), anchor=anchor).checks
    for reader in (follower, Follower(ChainStore(chain.store, CHAIN), anchor=anchor)):
        with pytest.raises(UntrustedVersionError) as refused:
            reader.poll()
        assert refused.value.check == "anchor_policy"
    assert follower.current is not None and follower.current.counter == 1
