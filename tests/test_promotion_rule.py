"""The promotion rule in the pipeline: a five-generation lineage whose generation 4 has its labels shuffled.
v4 is committed but not promoted; a follower and ``predict --chain`` keep serving v3; ``ml8s chain promote 4``
moves them; a forged decision is refused by verify and the follower."""

from __future__ import annotations

import csv
import io
import json
import random
import subprocess
from pathlib import Path

import pytest
from conftest import write_small_churn
from forked_cli import forked_ml8s
from mlflow import MlflowClient
from test_lineage import _env

from ml8s.chain import ChainStore, PromotionLog, SignedDecision, SigningKey, adopt_policy, make_root
from ml8s.chain.promotion import decision_bytes, record_key
from ml8s.chain.root import root_json
from ml8s.store import LocalStore

CHAIN = "ml8s-model"
# five pipeline runs (as tests/test_lineage.py's lineage) and the CLI around them, on a shared CI machine
pytestmark = pytest.mark.timeout(2400)
KEY, FORGER = SigningKey.generate(), SigningKey.generate()


def _generation(data: Path, g: int, rows: int) -> Path:
    """Rows drawn like generation 0's (tests/conftest.py write_small_churn): no concept drift, new customers."""
    plans = ["basic", "plus", "pro"]
    lines = ["customer_id,tenure,monthly_charges,plan,auto_pay,churned"]
    for i in range(rows):
        n = 10000 * g + i
        tenure = (n * 7) % 72
        churned = "yes" if (tenure < 12) != (n % 9 == 0) else "no"
        auto = "true" if (n * 3) % 4 else "false"
        lines.append(f"G{g}-{i:05d},{tenure},{20 + (n * 13) % 100}.{n % 10},{plans[(n * 5) % 3]},{auto},{churned}")
    path = data / f"gen-{g:03d}.csv"
    path.write_text("\n".join(lines) + "\n")
    return path


def _shuffled(path: Path, seed: int) -> None:
    """The file's target column permuted: rows keep their features, labels lose their meaning."""
    rows = list(csv.reader(io.StringIO(path.read_text())))
    labels = [row[-1] for row in rows[1:]]
    random.Random(seed).shuffle(labels)
    lines = [",".join(rows[0])] + [",".join([*row[:-1], label]) for row, label in zip(rows[1:], labels, strict=True)]
    path.write_text("\n".join(lines) + "\n")


def _run(env: dict[str, str], *args: str, code: int = 0) -> subprocess.CompletedProcess[str]:
    proc = forked_ml8s(args, env, timeout=600)
    assert proc.returncode == code, proc.stdout[-2000:] + proc.stderr[-3000:]
    return proc


def _served(out: Path) -> int:
    return int(json.loads((out / "current" / "ml8s_version.json").read_text())["counter"])


@pytest.fixture(scope="module")
def lineage(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path, dict[str, str]]:
    """v1 cold on generation 0; v2..v4 warm from the head after generations 1-3; generation 4's labels
    shuffled, then v5; a follower polled after every run."""
    base = tmp_path_factory.mktemp("promotion")
    data, root, out = write_small_churn(base / "data", rows=600, files=1), base / "root", base / "serve"
    (base / "key.pem").write_bytes(KEY.private_pem())
    trust_root = make_root([KEY.public_key], threshold=1)  # the operator's pinned root, outside the store
    (base / "root.json").write_bytes(root_json(trust_root))
    chain = ChainStore(LocalStore(str(root)), CHAIN, trust_root=trust_root)
    chain.init()
    adopt_policy(chain, KEY, [KEY.public_key], root=trust_root)  # every block and decision is signed by KEY
    env = _env(data, root, WARM_START="head", SAMPLER_ALPHA="3")  # PROMOTE_MIN_DELTA: the default, 0
    env.update(EPOCHS="20", LEARNING_RATE="0.02", ML8S_SIGNING_KEY_FILE=str(base / "key.pem"))
    env.update(CHAIN_REQUIRE_SIGNED="true", CHAIN_TRUST_ROOT=str(base / "root.json"))
    served = []
    for g in range(5):
        if g:
            _generation(data, g, rows=240 if g < 4 else 480)
        if g == 4:
            _shuffled(data / "gen-004.csv", seed=4)
        _run(env, "run")
        if g >= 3:
            _run(env, "follow", "--out", str(out), "--once")
            served.append(_served(out))
    assert served == [4, 4]  # the follower never served the regressing candidate
    return data, root, out, env


def test_a_regressing_generation_is_committed_not_promoted(lineage: tuple[Path, Path, Path, dict[str, str]]) -> None:
    data, root, out, env = lineage
    chain = ChainStore(LocalStore(str(root)), CHAIN)
    decisions = [d.decision for d in PromotionLog(chain).decisions()]
    shown = "\n".join(f"{d.sequence} {d.action} v{d.counter}: {d.rule}" for d in decisions)
    assert chain.head().counter == 5
    assert [(d.counter, d.action) for d in decisions] == [
        (1, "promote"),
        (2, "promote"),
        (3, "promote"),
        (4, "promote"),
        (5, "reject"),
    ], shown
    assert "fixed holdout (generation(s) 0, 120 held-out rows): accuracy 0.8333 vs 0.9083" in decisions[-1].rule, shown
    assert _served(out) == 4  # the follower kept the last promoted version
    log = json.loads(_run(env, "chain", "log", "--json").stdout)
    assert [v["promotion"] for v in log[:2]] == ["rejected", "promoted"]
    rows = "customer_id,tenure,monthly_charges,plan,auto_pay\nX-1,3,70.5,basic,true\n"
    promoted = forked_ml8s(["predict", "--chain", CHAIN, "--input", "-"], env, input=rows)
    pinned = forked_ml8s(["predict", "--chain", CHAIN, "--version", "4", "--input", "-"], env, input=rows)
    assert promoted.returncode == 0 and promoted.stdout == pinned.stdout, promoted.stderr

    _run(env, "chain", "promote", "5", "--reason", "checked: the shuffle was a test")
    _run(env, "follow", "--out", str(out), "--once")
    assert _served(out) == 5
    _run(env, "chain", "verify")
    mlflow = MlflowClient(tracking_uri=f"sqlite:///{root}/mlflow.db")
    aliased = mlflow.get_model_version_by_alias(CHAIN, "promoted")
    assert aliased.tags["full_config_hash"] == chain.get(5).header.full_config_hash  # the alias moved with it

    # a forger rewrites the newest decision to serve v1 (unsigned, then signed by a key no policy trusts):
    # verify, the follower and predict --chain refuse it, and the follower keeps serving v5
    key = record_key(chain, 6)
    signed = SignedDecision.model_validate_json((root / key).read_bytes())
    first = chain.get(1)
    forged = signed.decision.model_copy(
        update={
            "counter": 1,
            "block_hash": first.block_hash,
            "served_counter": 1,
            "served_block_hash": first.block_hash,
        }
    )
    by_forger = FORGER.sign(decision_bytes(forged))
    for bad in (
        SignedDecision(decision=forged),
        SignedDecision(decision=forged, signer_key_id=FORGER.key_id, signature=by_forger),
    ):
        (root / key).chmod(0o644)
        (root / key).write_bytes(bad.model_dump_json().encode())
        verify = _run(env, "chain", "verify", code=1)
        assert "promotion" in verify.stdout + verify.stderr
        refused = _run(env, "follow", "--out", str(out), "--once", code=1)
        assert "CHAIN_CORRUPTION" in refused.stderr and "Traceback" not in refused.stderr
        assert _served(out) == 5
        _run(env, "predict", "--chain", CHAIN, "--input", str(data / "gen-001.csv"), code=1)
