"""Anchors (issue 12): a signed head checkpoint kept outside the store detects rollback, freeze, fork,
a forged head and a re-hashed rewrite, in verify and in the follower; the CLI writes and checks one."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_chain_support import CHAIN, forge, meta, payload, set_head, version_path

from ml8s.chain import (
    Anchor,
    ChainStore,
    ChainVersion,
    Follower,
    SigningKey,
    adopt_policy,
    make_anchor,
    paths,
    verify_chain,
)
from ml8s.chain.anchor import _bytes
from ml8s.chain.trust import policy_key
from ml8s.errors import ChainForkError, ChainRollbackError, ConfigError
from ml8s.store import LocalStore

KEY, OTHER = SigningKey.generate(), SigningKey.generate()
NOW = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)
DAY = dt.timedelta(days=1)


@pytest.fixture(name="signed")
def signed_fixture(tmp_path: Path) -> tuple[ChainStore, list[ChainVersion]]:
    chain = ChainStore(LocalStore(str(tmp_path)), CHAIN, signer=KEY)
    chain.init()
    adopt_policy(chain, KEY, [KEY.public_key])
    for i in range(1, 4):
        chain.commit(payload(f"v{i}"), meta(f"v{i}", step=i))
    return chain, chain.list()


def test_intact_chain_passes_its_anchor(signed: tuple[ChainStore, list[ChainVersion]]) -> None:
    chain, _ = signed
    anchor = make_anchor(chain, KEY, DAY, NOW)
    chain.commit(payload("v4"), meta("v4", step=4))  # the chain may grow past its anchor
    report = verify_chain(ChainStore(chain.store, CHAIN), anchor=anchor, now=NOW + DAY / 2)
    assert report.ok, report.findings
    assert not any("rollback" in line for line in report.unchecked)


def _rollback(root: Path, v: list[ChainVersion]) -> None:
    set_head(root, v[2])


def _rollback_and_delete(root: Path, v: list[ChainVersion]) -> None:
    set_head(root, v[2])
    import shutil

    shutil.rmtree(version_path(root, v[3].version_dir))
    for run in (root / paths.ROOT / CHAIN / paths.RUNS).iterdir():  # and the evidence in the index and trail
        run.unlink()
    for event in (root / paths.ROOT / CHAIN / paths.AUDIT).iterdir():
        event.unlink()


def _forged_head(root: Path, v: list[ChainVersion]) -> None:
    set_head(root, forge(root, v[3], keep_original=True, new_payload=payload("evil")))


def _rehashed_rewrite(root: Path, v: list[ChainVersion]) -> None:
    """v2 and v3 rewritten and re-hashed consistently, originals deleted: the blocks alone look fine."""
    v2 = forge(root, v[2], new_payload=payload("evil2"))
    set_head(root, forge(root, v[3], parent_block_hash=v2.block_hash))


@pytest.mark.parametrize(
    ("tamper", "check"),
    [
        (_rollback, "anchor_rollback"),
        (_rollback_and_delete, "anchor_rollback"),
        (_forged_head, "anchor_fork"),
        (_rehashed_rewrite, "anchor_fork"),
    ],
    ids=["one-step-rollback", "rollback-with-later-versions-deleted", "forged-head", "rehashed-rewrite"],
)
def test_tamper_against_the_anchor(signed: tuple[ChainStore, list[ChainVersion]], tamper: object, check: str) -> None:
    chain, versions = signed
    anchor = make_anchor(chain, KEY, DAY, NOW)
    follower = Follower(ChainStore(chain.store, CHAIN), anchor=anchor, clock=lambda: NOW)  # the anchor's time
    assert callable(tamper)
    tamper(Path(chain.store.root_uri.removeprefix("file://")), versions)
    report = verify_chain(ChainStore(chain.store, CHAIN), anchor=anchor, now=NOW)
    assert check in report.checks, report.findings
    with pytest.raises((ChainRollbackError, ChainForkError)):
        follower.poll()


def test_freeze_is_an_expired_anchor(signed: tuple[ChainStore, list[ChainVersion]]) -> None:
    chain, _ = signed
    anchor = make_anchor(chain, KEY, DAY, NOW)
    assert "anchor_expired" in verify_chain(chain, anchor=anchor, now=NOW + 2 * DAY).checks


def test_anchor_by_an_untrusted_key_or_edited(signed: tuple[ChainStore, list[ChainVersion]]) -> None:
    chain, _ = signed
    good = make_anchor(chain, KEY, DAY, NOW)
    checkpoint = good.checkpoint
    forged = Anchor(checkpoint=checkpoint, public_key=OTHER.public_key, signature=OTHER.sign(_bytes(checkpoint)))
    assert "anchor_signature" in verify_chain(chain, anchor=forged, now=NOW).checks
    with pytest.raises(ConfigError, match="not in the newest trust policy"):
        make_anchor(chain, OTHER, DAY, NOW)  # the CLI refuses to mint one
    edited = good.model_copy(update={"checkpoint": good.checkpoint.model_copy(update={"counter": 1})})
    assert "anchor_signature" in verify_chain(chain, anchor=edited, now=NOW).checks


def test_replaced_trust_policy_breaks_the_anchor(signed: tuple[ChainStore, list[ChainVersion]]) -> None:
    chain, _ = signed
    anchor = make_anchor(chain, KEY, DAY, NOW)
    chain.store.delete(policy_key(chain, 1))
    adopt_policy(ChainStore(chain.store, CHAIN), OTHER, [OTHER.public_key])  # an intruder's own first policy
    checks = verify_chain(ChainStore(chain.store, CHAIN), anchor=anchor, now=NOW).checks
    assert {"anchor_policy", "untrusted_key"} <= checks


def test_follower_state_survives_a_restart(signed: tuple[ChainStore, list[ChainVersion]], tmp_path: Path) -> None:
    chain, versions = signed
    state = str(tmp_path / "follower.json")
    assert Follower(ChainStore(chain.store, CHAIN), state_path=state).poll() == versions[-1]
    set_head(Path(chain.store.root_uri.removeprefix("file://")), versions[2])
    with pytest.raises(ChainRollbackError):
        Follower(ChainStore(chain.store, CHAIN), state_path=state).poll()


def test_a_running_follower_renewed_past_a_rolled_back_head_refuses_it(tmp_path: Path) -> None:
    """The follower serves v2; v3 is committed and anchored; a store writer sets the head back to v2. A fresh
    follower given the anchor refuses it, but the running one, renewed with that anchor, found the head it held
    unchanged and served on (poll None) as if it were fresh."""
    chain = ChainStore(LocalStore(str(tmp_path)), CHAIN, signer=KEY)
    chain.init()
    adopt_policy(chain, KEY, [KEY.public_key])
    for i in (1, 2):
        chain.commit(payload(f"v{i}"), meta(f"v{i}", step=i))
    follower = Follower(ChainStore(chain.store, CHAIN), clock=lambda: NOW)
    v2 = follower.poll()
    assert v2 is not None
    chain.commit(payload("v3"), meta("v3", step=3))
    anchor = make_anchor(chain, KEY, DAY, NOW)
    set_head(tmp_path, v2)
    follower.renew(anchor)
    with pytest.raises(ChainRollbackError, match="head at 2 after 3"):
        follower.poll()
    assert follower.current == v2


def test_cli_anchor_and_verify(tmp_path: Path) -> None:
    root, key = tmp_path / "root", tmp_path / "k.pem"
    key.write_bytes(KEY.private_pem())
    chain = ChainStore(LocalStore(str(root)), CHAIN, signer=KEY)
    chain.init()
    adopt_policy(chain, KEY, [KEY.public_key])
    chain.commit(payload("v1"), meta("v1"))
    after_v1 = chain.store.get(chain.key(paths.HEAD))
    chain.commit(payload("v2"), meta("v2"))
    env = {k: v for k, v in os.environ.items() if k != "CHAIN_NAME"}
    env |= {"PIPELINE_ROOT_URI": str(root), "ML8S_SIGNING_KEY_FILE": str(key)}
    ml8s = [str(Path(sys.executable).with_name("ml8s")), "chain"]
    anchor = tmp_path / "anchor.json"
    made = subprocess.run([*ml8s, "anchor", "--out", str(anchor), "--chain", CHAIN], env=env, capture_output=True)
    assert made.returncode == 0 and json.loads(made.stdout)["counter"] == 2, made.stderr
    verify = [*ml8s, "verify", "--anchor", str(anchor), "--chain", CHAIN, "--json"]
    assert subprocess.run(verify, env=env, capture_output=True).returncode == 0
    (root / paths.ROOT / CHAIN / paths.HEAD).write_bytes(after_v1)  # a one-step rollback
    rolled = subprocess.run(verify, env=env, capture_output=True, text=True)
    assert rolled.returncode == 1 and "anchor_rollback" in {f["check"] for f in json.loads(rolled.stdout)["findings"]}
