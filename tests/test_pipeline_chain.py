"""The chain commit step of the pipeline (SPEC §7): one version per run, healed after a crash."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from conftest import write_small_churn
from forked_cli import forked_ml8s

from ml8s.chain import ChainStore, verify_chain
from ml8s.contract import Manifest, layout
from ml8s.store import LocalStore


def _env(data: Path, root: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("FORCE_RERUN", "CHAIN_NAME", "STRICT_DATA_IDENTITY")}
    env.update(DATA_ROOT=str(data), TARGET_COLUMN="churned", PIPELINE_ROOT_URI=str(root), EPOCHS="2")
    env.update(extra)
    return env


def _ml8s(env: dict[str, str], *args: str, fresh: bool = False) -> str:
    """``ml8s *args``'s stdout, run in a fork of a warm interpreter (forked_cli), or fresh when ``fresh``."""
    proc = forked_ml8s(args, env, timeout=300, fresh=fresh)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def test_first_run_commits_v1_rerun_nothing_other_config_v2(tmp_path: Path) -> None:
    data, root = write_small_churn(tmp_path / "data"), tmp_path / "root"
    first = json.loads(_ml8s(_env(data, root), "run"))
    chain = ChainStore(LocalStore(str(root)), "ml8s-model")
    v1 = chain.head()
    assert (v1.counter, v1.header.run_id, v1.semver) == (1, first["run_id"], "1.0.0")
    run_manifest = Manifest.model_validate_json(
        (root / layout.RUNS_DIR / first["run_id"] / "manifest.json").read_bytes()
    )
    assert chain.fetch_payload(v1, "manifest.json") == run_manifest.chain_manifest().to_bytes()
    assert b"mlflow" not in chain.fetch_payload(v1, "manifest.json")  # no root, no MLflow run: content only
    assert (root / "ml8s_chain/ml8s-model/tensorboard/v0000000001").is_dir()

    run_dir = root / layout.RUNS_DIR / first["run_id"]
    for name, rel in layout.chain_payload_files("onnx"):
        if name != layout.PAYLOAD_MANIFEST:
            assert chain.fetch_payload(v1, name) == (run_dir / rel).read_bytes(), name

    _ml8s(_env(data, root), "run")
    assert ChainStore(LocalStore(str(root)), "ml8s-model").head().block_hash == v1.block_hash

    second = json.loads(_ml8s(_env(data, root, EPOCHS="3"), "run"))
    v2 = ChainStore(LocalStore(str(root)), "ml8s-model").head()
    assert (v2.counter, v2.header.run_id, v2.header.parent_block_hash) == (2, second["run_id"], v1.block_hash)
    assert v2.semver == "1.0.1"  # same architecture and parameter count: a patch
    assert v2.global_step > v1.global_step
    report = verify_chain(ChainStore(LocalStore(str(root)), "ml8s-model"))
    assert report.ok, report.findings
    assert json.loads(_ml8s(_env(data, root), "chain", "verify", "--json"))["findings"] == []


def test_crash_between_marker_and_commit_is_healed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import ml8s.pipeline.run as run

    data, root = write_small_churn(tmp_path / "data"), tmp_path / "root"

    def crash(*args: object) -> None:
        raise KeyboardInterrupt("killed between success.marker and the chain commit")

    monkeypatch.setattr(run, "chain_commit", crash)
    with pytest.raises(KeyboardInterrupt):
        run.run_pipeline(_env(data, root))
    runs = list((root / layout.RUNS_DIR).iterdir())
    assert (runs[0] / layout.SUCCESS_MARKER).exists()
    assert not (root / "ml8s_chain").exists()
    monkeypatch.undo()

    manifest = json.loads(_ml8s(_env(data, root), "run"))  # the gate hits, and the commit step heals
    head = ChainStore(LocalStore(str(root)), "ml8s-model").head()
    assert (head.counter, head.header.run_id) == (1, manifest["run_id"])
    from mlflow import MlflowClient

    # the kill also came before MLflow's aliases: the early exit sets both (it set `promoted` only, never `head`)
    aliases = MlflowClient(tracking_uri=f"sqlite:///{root}/mlflow.db").get_registered_model("ml8s-model").aliases
    assert {alias: str(version) for alias, version in aliases.items()} == {"head": "1", "promoted": "1"}


def test_same_run_into_two_fresh_chains_in_two_processes(tmp_path: Path) -> None:
    data, root = write_small_churn(tmp_path / "data"), tmp_path / "root"
    _ml8s(_env(data, root, CHAIN_NAME="first"), "run")
    _ml8s(_env(data, root, CHAIN_NAME="second"), "run", fresh=True)  # a gate hit: commits the same run to a new chain
    heads = [ChainStore(LocalStore(str(root)), name).head() for name in ("first", "second")]
    assert heads[0].content_hash == heads[1].content_hash
    assert heads[0].header.files == heads[1].header.files  # every payload file's sha256 and size


def test_pipeline_signs_its_commit_on_a_chain_with_a_trust_policy(tmp_path: Path) -> None:
    """A chain that trusts only signed commits takes the pipeline's version when the task's environment holds
    a trusted key (ML8S_SIGNING_KEY), and refuses it, writing no version, when it holds none."""
    from ml8s.chain import SigningKey, adopt_policy

    data, root = write_small_churn(tmp_path / "data"), tmp_path / "root"
    key = SigningKey.generate()
    chain = ChainStore(LocalStore(str(root)), "ml8s-model", signer=key)
    chain.init()
    adopt_policy(chain, key, [key.public_key])
    unsigned = forked_ml8s(["run"], _env(data, root), timeout=300)
    assert unsigned.returncode == 1 and "requires signed commits" in unsigned.stderr
    assert chain.head().counter == 0
    signed = json.loads(_ml8s(_env(data, root, ML8S_SIGNING_KEY=key.private_pem().decode()), "run"))
    head = ChainStore(LocalStore(str(root)), "ml8s-model").head()
    assert (head.counter, head.header.run_id, head.block.signer_key_id) == (1, signed["run_id"], key.key_id)
    assert verify_chain(ChainStore(LocalStore(str(root)), "ml8s-model")).ok
    from mlflow import MlflowClient

    # the aliases read the head as a trusted reader does: a signed head is followed
    aliases = MlflowClient(tracking_uri=f"sqlite:///{root}/mlflow.db").get_registered_model("ml8s-model").aliases
    assert {alias: str(version) for alias, version in aliases.items()} == {"head": "1", "promoted": "1"}


def test_a_fleet_predicts_from_the_chain_alone(tmp_path: Path) -> None:
    """The version's payload holds what serving raw rows needs: `ml8s predict --chain` equals `--run`, from a
    copy of the chain with the run folders deleted; an altered payload file and a bare-weights version are
    refused with one line each."""
    import shutil

    from mlflow_support import raw_rows, write_rows

    data, root = write_small_churn(tmp_path / "data"), tmp_path / "root"
    run_id = json.loads(_ml8s(_env(data, root), "run"))["run_id"]
    rows = write_rows(tmp_path / "rows.csv", raw_rows(data)[:50])
    by_run = _ml8s(_env(data, root), "predict", "--run", run_id, "--input", str(rows))
    fleet = tmp_path / "fleet"
    shutil.copytree(root / "ml8s_chain", fleet / "ml8s_chain")  # no run folders, no MLflow: the chain only
    by_chain = _ml8s(_env(data, fleet), "predict", "--chain", "ml8s-model", "--input", str(rows))
    assert by_chain == by_run and len(by_chain.splitlines()) == 51
    assert (
        _ml8s(_env(data, fleet), "predict", "--chain", "ml8s-model", "--version", "1", "--input", str(rows)) == by_run
    )

    onnx = next((fleet / "ml8s_chain/ml8s-model/versions").glob("v0000000001_*")) / "payload/model.onnx"
    onnx.write_bytes(onnx.read_bytes()[:-1] + bytes([onnx.read_bytes()[-1] ^ 1]))
    altered = forked_ml8s(["predict", "--chain", "ml8s-model", "--input", str(rows)], _env(data, fleet), timeout=120)
    assert altered.returncode == 1 and altered.stdout == "", altered.stderr
    assert altered.stderr.startswith("ml8s: ") and len(altered.stderr.splitlines()) == 1, altered.stderr
    assert "model.onnx" in altered.stderr

    weights = root / layout.RUNS_DIR / run_id / layout.MODEL_NATIVE
    _ml8s(_env(data, root, CHAIN_NAME="bare"), "chain", "commit", "--payload", str(weights), "--steps", "1")
    bare = forked_ml8s(["predict", "--chain", "bare", "--input", str(rows)], _env(data, root), timeout=120)
    assert bare.returncode == 1 and "holds no feature_schema.json" in bare.stderr, bare.stderr
    assert len(bare.stderr.splitlines()) == 1
