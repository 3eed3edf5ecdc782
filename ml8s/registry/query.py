"""Finding a run's registered versions in MLflow without putting a user's name in a filter string.

MLflow's search filters take string literals in single or double quotes and have no escape for the
quote itself (the parser strips the outer quotes and keeps the rest verbatim), so a model name such
as ``it's-model`` or ``say "it's"`` cannot be written in a filter exactly. Versions are searched by
their ``full_config_hash`` tag instead, a hexadecimal value that needs no quoting, and matched by
name here, exactly, in Python.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from ml8s.errors import RegistryError

if TYPE_CHECKING:  # mlflow takes seconds to import: only its callers pay for it
    from mlflow import MlflowClient
    from mlflow.entities.model_registry import ModelVersion

_HEX = re.compile(r"[0-9a-f]{64}")


def hash_filter(full_config_hash: str) -> str:
    """The filter ``tags.full_config_hash = '<hash>'``; the hash is checked to be 64 hex digits first."""
    if not _HEX.fullmatch(full_config_hash):
        raise RegistryError(f"full_config_hash {full_config_hash!r} is not 64 lowercase hex digits")
    return f"tags.full_config_hash = '{full_config_hash}'"


def versions_of_hash(client: MlflowClient, model_name: str, full_config_hash: str) -> list[ModelVersion]:
    """Every version of ``model_name`` tagged with ``full_config_hash``, lowest version number first."""
    found = client.search_model_versions(hash_filter(full_config_hash))
    return sorted((v for v in found if str(v.name) == model_name), key=lambda v: int(v.version))
