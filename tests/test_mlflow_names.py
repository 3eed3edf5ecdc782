"""Model and experiment names with quotes register and verify end to end (defect 6, MLflow part).

MLflow's search filters take a string literal in single or double quotes with no escape for the
quote itself, so a name never goes into a filter: versions are searched by their (hexadecimal)
full_config_hash tag and matched by name exactly.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from conftest import write_small_churn
from forked_cli import forked_ml8s
from mlflow import MlflowClient

from ml8s.pipeline.bootstrap import bootstrap
from ml8s.registry.query import versions_of_hash
from ml8s.registry.registration import MlflowRef, register


def _ml8s(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return forked_ml8s(args, env, timeout=300)


def test_quoted_names_register_once_and_verify(tmp_path: Path) -> None:
    model, experiment = "it's-model", 'exp "quoted" it\'s \\ done'
    data = write_small_churn(tmp_path / "data", rows=120, files=1)
    root = tmp_path / "root"
    env = {k: v for k, v in os.environ.items() if k not in ("FORCE_RERUN", "MLFLOW_TRACKING_URI")}
    env.update(
        DATA_ROOT=str(data),
        TARGET_COLUMN="churned",
        PIPELINE_ROOT_URI=str(root),
        EPOCHS="1",
        MLFLOW_MODEL_NAME=model,
        MLFLOW_EXPERIMENT_PREFIX=experiment,
        CHAIN_NAME="quoted-names",  # a chain name is a path segment: quotes are not allowed there
    )
    first = _ml8s(env, "run")
    assert first.returncode == 0, first.stderr
    manifest = json.loads(first.stdout)
    assert manifest["mlflow"]["model_name"] == model
    assert manifest["mlflow"]["experiment_name"] == experiment
    assert manifest["mlflow"]["model_version"] == "1"
    verify = _ml8s(env, "verify", manifest["run_id"])
    assert verify.returncode == 0, verify.stdout + verify.stderr

    # Registering again finds the version by its name; a name with both quote kinds registers too.
    ctx = bootstrap(env)
    assert register(ctx, ctx.open_store()) == MlflowRef.model_validate(manifest["mlflow"])
    other = 'say "it\'s" \\ twice'
    renamed = bootstrap({**env, "MLFLOW_MODEL_NAME": other})
    assert register(renamed, renamed.open_store()).model_version == "1"
    client = MlflowClient(tracking_uri=f"sqlite:///{root}/mlflow.db")
    for name in (model, other):
        found = versions_of_hash(client, name, manifest["full_config_hash"])
        assert [(v.name, str(v.version)) for v in found] == [(name, "1")]
    assert versions_of_hash(client, model + "x", manifest["full_config_hash"]) == []
