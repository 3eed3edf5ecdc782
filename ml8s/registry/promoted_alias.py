"""The MLflow alias ``promoted``: the registered model version of the chain version followers serve.

It moves with the chain's promotion log (``ml8s.chain.PromotionLog``), never with the head: a candidate that
is committed but not promoted keeps its version in MLflow without the alias.
"""

from __future__ import annotations

import time

from ml8s.errors import RegistryError
from ml8s.identity.settings import PlatformSettings
from ml8s.mlflow_probe import require_answer
from ml8s.registry.confirm import missing_database
from ml8s.registry.mlflow_model import silenced
from ml8s.registry.query import versions_of_hash
from ml8s.registry.registration import _sqlite_lock
from ml8s.registry.schema import check_schema, first_line

PROMOTED_ALIAS = "promoted"


def move_promoted_alias(settings: PlatformSettings, full_config_hash: str) -> str | None:
    """Point the alias at the model version of ``full_config_hash``; returns its version number, None when
    MLflow holds no version of that run (an external ``chain commit``, or no ``sqlite:///`` database at all).

    Raises:
        RegistryError: MLflow is unreachable or refuses the alias, or its database cannot be read or written
            (locked, malformed): the caller's decision is already made, so it must be a named error it can report.
    """
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException
    from sqlalchemy.exc import SQLAlchemyError

    uri = settings.mlflow_tracking_uri_for_registry()
    if missing_database(uri) is not None:  # MlflowClient would create a whole registry to find nothing in it
        return None
    seconds = settings.alias_deadline_seconds
    require_answer(uri, seconds)
    # under registration's sqlite lock, as the head alias: a run registering meanwhile holds the database. Waited
    # for as the run's alias step waits (registration's 300 s kept an operator's promote waiting, its decision made)
    bound = f"ALIAS_DEADLINE_SECONDS={seconds} s"
    try:
        with _sqlite_lock(uri, time.monotonic() + seconds, bound), silenced("mlflow.store.db.utils"):
            check_schema(uri)  # MLflow's client would upgrade an older database in place
            client = MlflowClient(tracking_uri=uri, registry_uri=uri)
            found = versions_of_hash(client, settings.mlflow_model_name, full_config_hash)
            if not found:
                return None
            version = str(found[0].version)
            client.set_registered_model_alias(settings.mlflow_model_name, PROMOTED_ALIAS, version)
    except (MlflowException, SQLAlchemyError, OSError) as exc:  # a locked or malformed sqlite file: SQLAlchemy's
        raise RegistryError(
            f"MLflow at {uri}: cannot point alias {PROMOTED_ALIAS!r} of {settings.mlflow_model_name!r} at the run "
            f"{full_config_hash[:12]}: {first_line(exc)}"
        ) from exc
    return version
