"""MLFLOW_MODEL_NAME and CHAIN_NAME are checked at bootstrap, before anything is written (defect 6/7).

CHAIN_NAME defaults to the model name; a model name that is a valid MLflow name but no valid chain name
(``it's-model``) gives a chain name derived from it, and the run registers, commits and verifies. An
explicit invalid CHAIN_NAME, or a model name MLflow refuses, is one CONFIG_ERROR line naming it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import write_small_churn
from forked_cli import forked_ml8s

from ml8s.errors import ConfigError
from ml8s.identity.names import CHAIN_NAME_PATTERN, chain_name_from_model
from ml8s.pipeline.run import run_pipeline
from ml8s.text import quoted

OURS = ("FORCE_RERUN", "MLFLOW_TRACKING_URI", "CHAIN_NAME", "MLFLOW_MODEL_NAME", "PIPELINE_ROOT_URI", "DATA_ROOT")


def _env(data: Path, root: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in OURS}
    env.update(DATA_ROOT=str(data), TARGET_COLUMN="churned", PIPELINE_ROOT_URI=str(root), EPOCHS="1", **extra)
    return env


def _ml8s(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return forked_ml8s(args, env, timeout=300)


def test_a_quoted_model_name_runs_on_a_derived_chain_and_verifies(tmp_path: Path) -> None:
    data = write_small_churn(tmp_path / "data", rows=120, files=1)
    root = tmp_path / "root"
    env = _env(data, root, MLFLOW_MODEL_NAME="it's-model")
    derived = chain_name_from_model("it's-model")

    done = _ml8s(env, "run")

    assert done.returncode == 0, done.stderr
    manifest = json.loads(done.stdout)
    assert manifest["mlflow"]["model_name"] == "it's-model" and manifest["mlflow"]["model_version"] == "1"
    assert derived.startswith("it-s-model-") and CHAIN_NAME_PATTERN.fullmatch(derived)
    assert f"using the chain name {derived!r} derived from it" in done.stderr
    assert sorted(p.name for p in (root / "ml8s_chain").iterdir()) == [derived]
    verify = _ml8s(env, "verify", manifest["run_id"])
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert f"of chain {derived!r} holds this run's config_snapshot.json" in verify.stdout


@pytest.mark.parametrize(
    ("variable", "value", "needle"),
    [
        ("CHAIN_NAME", "../escape", "starting with a letter or digit"),
        ("CHAIN_NAME", "it's-chain", "expected letters, digits"),
        ("CHAIN_NAME", "a" * 129, "at most 128 characters"),
        ("CHAIN_NAME", "-lead", "starting with a letter or digit"),
        ("MLFLOW_MODEL_NAME", "team/model", "refuses '/' and ':'"),
        ("MLFLOW_MODEL_NAME", "models:churn", "refuses '/' and ':'"),
        ("MLFLOW_MODEL_NAME", "..", "path normalization"),
        ("MLFLOW_MODEL_NAME", "m" * 257, "at most 256"),
    ],
)
def test_an_invalid_name_fails_before_anything_is_written(
    tmp_path: Path, variable: str, value: str, needle: str
) -> None:
    data = write_small_churn(tmp_path / "data", rows=60, files=1)
    root = tmp_path / "root"
    with pytest.raises(ConfigError) as caught:
        run_pipeline(_env(data, root, **{variable: value}))
    message = str(caught.value)
    assert message.startswith(f"CONFIG_ERROR: {variable}={quoted(value)} is invalid") and "\n" not in message
    assert needle in message
    assert not root.exists()


def test_the_cli_refuses_an_explicit_invalid_chain_name_writing_nothing(tmp_path: Path) -> None:
    data = write_small_churn(tmp_path / "data", rows=60, files=1)
    root = tmp_path / "root"
    done = _ml8s(_env(data, root, CHAIN_NAME="../escape", MLFLOW_MODEL_NAME="it's-model"), "run")
    assert done.returncode != 0 and done.stdout == ""
    assert done.stderr.strip().splitlines() == [
        "ml8s: CONFIG_ERROR: CHAIN_NAME='../escape' is invalid; expected letters, digits, '.', '_' or '-', "
        "starting with a letter or digit, at most 128 characters"
    ]
    assert not root.exists() and not (tmp_path / "escape").exists()


def test_derived_chain_names_are_valid_distinct_and_the_same_in_another_process() -> None:
    names = ["it's-model", "it-s-model", "__", "", "é", "a b", "x" * 300, "churn-v2", "Model.1_b"]
    derived = [chain_name_from_model(n) for n in names]
    assert all(CHAIN_NAME_PATTERN.fullmatch(d) for d in derived)
    assert len(set(derived)) == len(names)  # it's-model and it-s-model never share a chain
    assert derived[-2:] == ["churn-v2", "Model.1_b"]  # a valid name is its own chain name
    code = (
        "import json, sys\nfrom ml8s.identity.names import chain_name_from_model as f\n"
        "print(json.dumps([f(n) for n in json.loads(sys.argv[1])]))"
    )
    other = subprocess.run(
        [sys.executable, "-c", code, json.dumps(names)], capture_output=True, text=True, timeout=60, check=True
    )
    assert json.loads(other.stdout) == derived
