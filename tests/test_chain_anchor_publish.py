"""Anchors published in MLflow (issue 12): ``ml8s chain anchor --publish mlflow`` tags the registered model
and the head run's version, ``--anchor mlflow:MODEL[/N]`` reads them back, and audit bundles embed the
latest published anchor and check the chain against it, offline too: a rollback after the anchor was
published is a FAIL naming ``anchor_rollback``.

One ``ml8s run`` of its own (its MLflow registry gets tags no other test expects).
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
from pathlib import Path
from typing import NamedTuple

import pytest
from test_chain_anchor import DAY, KEY
from test_chain_support import meta, payload
from test_verify import clean_env, ml8s

from ml8s.audit import build_bundle, verify_bundle, verify_run, write_bundle
from ml8s.audit.anchor_tags import ANCHOR_TAG, load_anchor, publish_anchor, read_published
from ml8s.audit.bundle_open import open_bundle
from ml8s.audit.chain_proof import ANCHOR
from ml8s.chain import Anchor, ChainStore, make_anchor, paths
from ml8s.errors import ConfigError, RegistryError, VerificationFailedError
from ml8s.identity.settings import PlatformSettings
from ml8s.store import LocalStore

MODEL = "ml8s-model"  # MLFLOW_MODEL_NAME's default, and so the chain's name


class Published(NamedTuple):
    root: Path
    run_id: str
    env: dict[str, str]
    uri: str


@pytest.fixture(scope="module")
def published(tmp_path_factory: pytest.TempPathFactory) -> Published:
    from conftest import write_small_churn

    base = tmp_path_factory.mktemp("anchored")
    key = base / "committer.pem"
    key.write_bytes(KEY.private_pem())
    env = clean_env(
        DATA_ROOT=str(write_small_churn(base / "data")),
        TARGET_COLUMN="churned",
        PIPELINE_ROOT_URI=str(base / "root"),
        EPOCHS="2",
        ML8S_SIGNING_KEY_FILE=str(key),
    )
    env.pop("CHAIN_NAME", None)
    env.pop("MLFLOW_MODEL_NAME", None)
    done = ml8s(env, "run")
    assert done.returncode == 0, done.stderr
    return Published(base / "root", json.loads(done.stdout)["run_id"], env, f"sqlite:///{base / 'root' / 'mlflow.db'}")


def test_publish_and_read_back(published: Published, tmp_path: Path) -> None:
    made = ml8s(published.env, "chain", "anchor", "--publish", "mlflow", "--out", str(tmp_path / "a.json"))
    assert made.returncode == 0, made.stderr
    out = json.loads(made.stdout)
    assert out["counter"] == 1 and out["published"]["model_versions"] == ["1"]
    on_version, latest = read_published(published.uri, MODEL, "1"), read_published(published.uri, MODEL)
    assert on_version == latest == Anchor.model_validate_json((tmp_path / "a.json").read_bytes())
    checked = ml8s(published.env, "chain", "verify", "--anchor", f"mlflow:{MODEL}/1")
    assert checked.returncode == 0, (checked.stdout, checked.stderr)
    settings = PlatformSettings.load(published.env)
    assert load_anchor(f"mlflow:{MODEL}", settings) == load_anchor("mlflow:", settings) == latest
    with pytest.raises(RegistryError, match="version 99"):
        load_anchor(f"mlflow:{MODEL}/99", settings)
    with pytest.raises(ConfigError, match="expected an anchor file or mlflow:"):
        load_anchor(str(tmp_path / "missing.json"), settings)


def test_an_older_anchor_never_replaces_a_newer_one(published: Published) -> None:
    chain = ChainStore(LocalStore(str(published.root)), MODEL)
    now = dt.datetime.now(dt.UTC)
    newer = make_anchor(chain, KEY, DAY, now)
    older = make_anchor(chain, KEY, DAY, now - dt.timedelta(hours=1))
    fch = chain.head().header.full_config_hash
    publish_anchor(published.uri, MODEL, newer, fch)
    with pytest.raises(RegistryError, match="holds a newer anchor"):
        publish_anchor(published.uri, MODEL, older, fch)
    assert read_published(published.uri, MODEL) == newer
    from mlflow import MlflowClient

    MlflowClient(tracking_uri=published.uri).delete_registered_model_tag(MODEL, ANCHOR_TAG)
    with pytest.raises(RegistryError, match=f"no {ANCHOR_TAG} tag"):
        read_published(published.uri, MODEL)
    publish_anchor(published.uri, MODEL, older, fch)  # nothing newer left: published
    assert read_published(published.uri, MODEL) == older


def test_rollback_after_the_anchor_is_detected_through_the_bundle(published: Published, tmp_path: Path) -> None:
    root, run_id, env = published.root, published.run_id, published.env
    chain = ChainStore(LocalStore(str(root)), MODEL, signer=KEY)
    at_v1 = (root / paths.ROOT / MODEL / paths.HEAD).read_bytes()
    v2 = chain.commit(payload("later"), meta("later"))
    anchor = make_anchor(chain, KEY, DAY, dt.datetime.now(dt.UTC))
    publish_anchor(published.uri, MODEL, anchor, v2.header.full_config_hash)  # no version: the model's tag only

    data, report = build_bundle(str(root), run_id, env)  # the latest published anchor, by default
    assert report.passed, report.failed()
    good = tmp_path / "good.tar.gz"
    write_bundle(str(good), data)
    assert json.loads(open_bundle(str(good)).members[ANCHOR])["checkpoint"]["counter"] == 2
    assert verify_bundle(str(good)).passed

    # Roll the head back to the run's v1 and delete v2 with its run index entries and audit events: only
    # the anchor can tell (test_chain_anchor.py: a rollback with the later versions deleted).
    (root / paths.ROOT / MODEL / paths.HEAD).write_bytes(at_v1)
    shutil.rmtree(root / paths.ROOT / MODEL / paths.VERSIONS / v2.version_dir)
    for path in (root / paths.ROOT / MODEL / paths.RUNS).glob(f"{v2.header.full_config_hash}*"):
        path.unlink()
    for path in (root / paths.ROOT / MODEL / paths.AUDIT).iterdir():
        if v2.version_dir in path.read_text():
            path.unlink()
    assert verify_run(str(root), run_id, env).passed  # without the anchor the shorter chain looks fine
    live = verify_run(str(root), run_id, env, anchor=anchor).check("chain")
    assert live.status == "FAIL" and "anchor_rollback" in live.reason, live
    with pytest.raises(VerificationFailedError, match="chain"):
        build_bundle(str(root), run_id, env)
    data, _ = build_bundle(str(root), run_id, env, allow_failed=True)
    rolled = tmp_path / "rolled.tar.gz"
    write_bundle(str(rolled), data)
    offline = verify_bundle(str(rolled)).check("chain")
    assert offline.status == "FAIL" and "anchor_rollback" in offline.reason, offline

    done = ml8s(env, "audit", "bundle", run_id, "-o", str(tmp_path / "cli.tar.gz"), "--anchor", f"mlflow:{MODEL}")
    assert done.returncode == 1 and "VERIFICATION_FAILED" in done.stderr
