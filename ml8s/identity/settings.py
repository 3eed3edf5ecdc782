"""Platform-level settings: where things go and how the run behaves. They never enter a hash.

Priority, written out once: explicit workflow input (non-empty) > environment > default below.
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict

from ml8s.errors import ConfigError
from ml8s.identity.variables import normalize_uri

DEFAULT_PIPELINE_ROOT = "./pipeline_root"
DEFAULT_EXPERIMENT_PREFIX = "ml8s"
DEFAULT_MODEL_NAME = "ml8s-model"
DEFAULT_TMP_RETENTION_DAYS = 7

PLATFORM_VARIABLES: dict[str, str] = {
    "PIPELINE_ROOT_URI": f"where runs are written (local path, file:// or s3://); default {DEFAULT_PIPELINE_ROOT}",
    "FORCE_RERUN": "true: delete the run's marker and artifacts and run Steps 2-7 again; default false",
    "STRICT_DATA_IDENTITY": "false: identity from config alone, changed data is DATA_DRIFT; default true",
    "MLFLOW_TRACKING_URI": "MLflow tracking server; default sqlite:///{PIPELINE_ROOT}/mlflow.db (local roots)",
    "MLFLOW_EXPERIMENT_PREFIX": f"experiment name; default {DEFAULT_EXPERIMENT_PREFIX}",
    "MLFLOW_MODEL_NAME": f"registered model name; default {DEFAULT_MODEL_NAME}",
    "CHAIN_NAME": "model chain name; default MLFLOW_MODEL_NAME",
    "IMAGE_VERSION": "image tag, used as the Flyte cache version; default dev",
    "TMP_RETENTION_DAYS": f"age after which stale .tmp entries are removed; default {DEFAULT_TMP_RETENTION_DAYS}",
    "ML8S_WORKER_ID": "worker id in tmp names; default {hostname}-{pid}",
}


class PlatformSettings(BaseModel):
    """The resolved platform settings of one run."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    pipeline_root_uri: str
    force_rerun: bool
    strict_data_identity: bool
    mlflow_tracking_uri: str
    mlflow_experiment_prefix: str
    mlflow_model_name: str
    chain_name: str
    image_version: str
    tmp_retention_days: int


def platform_settings(env: Mapping[str, str], overrides: Mapping[str, str] | None = None) -> PlatformSettings:
    """Resolve the platform settings from workflow inputs and the environment."""

    def pick(name: str, default: str) -> str:
        value = (overrides or {}).get(name.lower(), "").strip() or env.get(name, "").strip()
        return value or default

    root = normalize_uri(pick("PIPELINE_ROOT_URI", DEFAULT_PIPELINE_ROOT))
    if not (root.startswith("file://") or root.startswith("s3://")):
        raise ConfigError(
            f"PIPELINE_ROOT_URI={root!r} has an unsupported scheme; expected a local path, file:// or s3://"
        )
    model_name = pick("MLFLOW_MODEL_NAME", DEFAULT_MODEL_NAME)
    tracking = pick("MLFLOW_TRACKING_URI", "")
    if not tracking:
        if not root.startswith("file://"):
            raise ConfigError(
                "MLFLOW_TRACKING_URI is required when PIPELINE_ROOT_URI is not local (sqlite needs a disk)"
            )
        tracking = "sqlite:////" + root[len("file://") :].lstrip("/") + "/mlflow.db"
    retention = pick("TMP_RETENTION_DAYS", str(DEFAULT_TMP_RETENTION_DAYS))
    if not re.fullmatch(r"[0-9]+", retention):
        raise ConfigError(f"TMP_RETENTION_DAYS={retention!r} is invalid; expected a whole number of days")
    return PlatformSettings(
        pipeline_root_uri=root,
        force_rerun=_flag(pick("FORCE_RERUN", "false"), "FORCE_RERUN"),
        strict_data_identity=_flag(pick("STRICT_DATA_IDENTITY", "true"), "STRICT_DATA_IDENTITY"),
        mlflow_tracking_uri=tracking,
        mlflow_experiment_prefix=pick("MLFLOW_EXPERIMENT_PREFIX", DEFAULT_EXPERIMENT_PREFIX),
        mlflow_model_name=model_name,
        chain_name=pick("CHAIN_NAME", model_name),
        image_version=pick("IMAGE_VERSION", "dev"),
        tmp_retention_days=int(retention),
    )


def worker_id(env: Mapping[str, str] | None = None) -> str:
    """A name for this process, used only in tmp names (never in a hash or final path)."""
    explicit = (env if env is not None else os.environ).get("ML8S_WORKER_ID", "")
    raw = explicit or f"{socket.gethostname()}-{os.getpid()}"
    return re.sub(r"[^A-Za-z0-9_.-]", "_", raw)[:64]


def _flag(value: str, name: str) -> bool:
    if value.lower() in ("true", "1", "yes"):
        return True
    if value.lower() in ("false", "0", "no"):
        return False
    raise ConfigError(f"{name}={value!r} is invalid; expected true or false")
