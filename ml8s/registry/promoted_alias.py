"""The MLflow alias ``promoted``: the registered model version of the chain version followers serve.

It moves with the chain's promotion log (``ml8s.chain.PromotionLog``), never with the head: a candidate that
is committed but not promoted keeps its version in MLflow without the alias.
"""

from __future__ import annotations

from ml8s.errors import RegistryError
from ml8s.identity.settings import PlatformSettings
from ml8s.mlflow_probe import require_answer
from ml8s.registry.query import versions_of_hash

PROMOTED_ALIAS = "promoted"


def move_promoted_alias(settings: PlatformSettings, full_config_hash: str) -> str | None:
    """Point the alias at the model version of ``full_config_hash``; returns its version number, None when
    MLflow holds no version of that run (an external ``chain commit``).

    Raises:
        RegistryError: MLflow is unreachable or refuses the alias.
    """
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException

    uri = settings.mlflow_tracking_uri_for_registry()
    require_answer(uri)
    try:
        client = MlflowClient(tracking_uri=uri, registry_uri=uri)
        found = versions_of_hash(client, settings.mlflow_model_name, full_config_hash)
        if not found:
            return None
        version = str(found[0].version)
        client.set_registered_model_alias(settings.mlflow_model_name, PROMOTED_ALIAS, version)
    except MlflowException as exc:
        raise RegistryError(
            f"MLflow at {uri}: cannot point alias {PROMOTED_ALIAS!r} of {settings.mlflow_model_name!r} at the run "
            f"{full_config_hash[:12]}: {exc.message}"
        ) from exc
    return version
