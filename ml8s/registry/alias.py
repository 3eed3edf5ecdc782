"""The registered model's ``head`` alias follows the chain's head: ``models:/{name}@head`` is what followers serve.

Moved after each commit that made this run's version the head (a run that trained; an early exit moves
nothing and imports no MLflow). Setting an alias is idempotent, so a re-run or a healed crash sets it again
harmlessly. With two runs committing at once, the later commit's alias call may land first; the next commit
to the chain puts it right. The chain, not MLflow, stays the record of which version is the head.
"""

from __future__ import annotations

import time

from ml8s.context.run import RunContext
from ml8s.contract import Manifest
from ml8s.errors import RegistryError
from ml8s.mlflow_probe import require_answer
from ml8s.registry.mlflow_model import silenced
from ml8s.registry.registration import DEFAULT_TIMEOUT_S, _sqlite_lock
from ml8s.registry.schema import first_line

HEAD_ALIAS = "head"


def move_head_alias(ctx: RunContext, manifest_text: str) -> None:
    """Point ``{model_name}@head`` at the version the run's manifest records, in the run's MLflow registry.

    Raises:
        RegistryError: MLflow refused (the version is already registered and committed: nothing is lost).
    """
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException
    from sqlalchemy.exc import SQLAlchemyError

    mlflow = Manifest.model_validate_json(manifest_text).mlflow
    model_name, model_version = mlflow.get("model_name", ""), mlflow.get("model_version", "")
    if not model_name or not model_version:
        return  # a manifest of no registered model (never written by a run that trained): nothing to point at
    uri = ctx.settings.mlflow_tracking_uri_for_registry()
    require_answer(uri)
    try:  # under registration's sqlite lock: concurrent runs of one sqlite file would hit "database is locked"
        with _sqlite_lock(uri, time.monotonic() + DEFAULT_TIMEOUT_S), silenced("mlflow.store.db.utils"):
            MlflowClient(tracking_uri=uri).set_registered_model_alias(model_name, HEAD_ALIAS, model_version)
    except (MlflowException, SQLAlchemyError, OSError) as exc:
        raise RegistryError(
            f"MLflow at {uri} refused alias {HEAD_ALIAS!r} on {model_name!r} version {model_version}: {first_line(exc)}"
        ) from exc
    ctx.log("chain_commit", f"MLflow alias {model_name}@{HEAD_ALIAS} -> version {model_version}")
