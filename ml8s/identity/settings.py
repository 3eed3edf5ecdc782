"""Platform-level settings: where things go and how the run behaves. They never enter a hash.

:meth:`PlatformSettings.load` is the one resolver: every field's text comes from the priority of
:mod:`ml8s.identity.priority` (explicit input > environment > the field's default below). Every default lives on
the fields; two are derived: CHAIN_NAME defaults to MLFLOW_MODEL_NAME (or, when that is no valid chain name, a
name derived from it: :mod:`ml8s.identity.names`), and MLFLOW_TRACKING_URI of a local root to a sqlite file
under it. Both names are checked here, so a bad one fails before anything is written. A setting only some
commands need is required where it is used, not at load: an ``s3://`` root has no MLflow default, and
:meth:`PlatformSettings.mlflow_tracking_uri_for_registry` says so to the code that talks to MLflow, while chain
commands, tmp-cleanup or ``runs list`` load the same settings without it.

Building the class directly (``PlatformSettings(**fields)``, or reading a run context back from JSON) takes
the values given and the defaults, never the environment: a context must mean in the next task what it meant
when it was written.
"""

from __future__ import annotations

import math
import os
import re
import socket
from collections.abc import Mapping
from contextvars import ContextVar
from typing import Literal

from pydantic import Field, ValidationError, ValidationInfo, field_validator
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from ml8s.errors import ConfigError
from ml8s.identity.names import chain_name_from_model, check_chain_name, check_experiment_name, check_model_name
from ml8s.identity.priority import explicit_or_env
from ml8s.identity.uri import check_tracking_uri, parse_root_uri
from ml8s.text import quoted

DEFAULT_PIPELINE_ROOT = "./pipeline_root"
# Digits of a whole-number setting: 10**18 days or versions already means never, and a longer value overflowed
# float() (TMP_RETENTION_DAYS: INTERNAL_ERROR) or int()'s digit limit (a message echoing thousands of digits).
_MAX_WHOLE_DIGITS = 18
_MAX_ALIAS_DEADLINE_S = 86400

# The platform settings a training run also takes as workflow inputs (besides the user variables).
WORKFLOW_PLATFORM_INPUTS: tuple[str, ...] = ("force_rerun", "pipeline_root_uri")

# A setting MLflow users already set under MLflow's own name: read when ml8s's own name is unset.
_FALLBACKS = {"mlflow_experiment_prefix": "MLFLOW_EXPERIMENT_NAME"}

# (environment, explicit inputs) while PlatformSettings.load builds an instance; None otherwise.
_LOADING: ContextVar[tuple[Mapping[str, str], Mapping[str, str]] | None] = ContextVar("_LOADING", default=None)


class _ExplicitThenEnv(PydanticBaseSettingsSource):
    """Each field's text by the one priority; a field neither level gives keeps its default."""

    def __init__(self, settings_cls: type[BaseSettings], env: Mapping[str, str], explicit: Mapping[str, str]) -> None:
        super().__init__(settings_cls)
        self._env, self._explicit = env, explicit

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[object, str, bool]:
        value = explicit_or_env(field_name.upper(), self._env, self._explicit)
        if value is None and field_name in _FALLBACKS:  # another tool's name for the same setting
            value = explicit_or_env(_FALLBACKS[field_name], self._env)
        return value, field_name, False

    def __call__(self) -> dict[str, object]:
        found = {name: self.get_field_value(info, name)[0] for name, info in self.settings_cls.model_fields.items()}
        return {name: value for name, value in found.items() if value is not None}


class PlatformSettings(BaseSettings):
    """The resolved platform settings of one run (field name = the variable's name, lower-cased)."""

    model_config = SettingsConfigDict(extra="forbid", frozen=True, validate_default=True)

    pipeline_root_uri: str = Field(
        DEFAULT_PIPELINE_ROOT, description="where runs are written (local path, file:// or s3://)"
    )
    force_rerun: bool = Field(
        False, strict=True, description="true: delete the run's marker and artifacts and run Steps 2-7 again"
    )
    strict_data_identity: bool = Field(
        True, strict=True, description="false: identity from config alone, changed data is DATA_DRIFT"
    )
    mlflow_tracking_uri: str = Field(
        "",
        description="MLflow tracking server; default sqlite:///{PIPELINE_ROOT}/mlflow.db (local roots only: an s3:// "
        "root needs it wherever MLflow is used)",
    )
    mlflow_experiment_prefix: str = Field(
        "ml8s", description="experiment name (unset: MLflow's own MLFLOW_EXPERIMENT_NAME, else ml8s)"
    )
    mlflow_model_name: str = Field("ml8s-model", description="registered model name")
    chain_name: str = Field(
        "", description="model chain name; default MLFLOW_MODEL_NAME (made valid: invalid characters become '-')"
    )
    chain_require_signed: bool = Field(
        False,
        strict=True,
        description="true: chain verify, followers and readers refuse unsigned versions, and runs refuse to start "
        "without a signing key (set it in production; false keeps legacy unsigned chains verifying)",
    )
    chain_trust_root: str = Field(
        "",
        description="the pinned chain trust root: a JSON file (ml8s chain root) or its JSON; readers accept the "
        "store's trust policies only when they chain to it (empty: trust on first use, which "
        "CHAIN_REQUIRE_SIGNED=true refuses)",
    )
    image_version: str = Field("dev", description="image tag, used as the Flyte cache version")
    tmp_retention_days: int = Field(7, description="age after which stale .tmp entries are removed")
    warm_start_root_uri: str = Field(
        "", description="the root whose chain WARM_START's parent is read from; default PIPELINE_ROOT_URI"
    )
    stale_parent_policy: Literal["retrain", "fail"] = Field(
        "retrain",
        description="a WARM_START=head run whose parent stopped being the head: train again from the new head "
        "(retrain) or stop with LINEAGE_STALE_PARENT (fail)",
    )
    drift_policy: Literal["warn", "fail"] = Field(
        "warn",
        description="a warm start whose new data drifted from the lineage's features (docs/continuous.md, drift): "
        "train and record the report (warn) or stop with LINEAGE_DRIFT before anything is written (fail)",
    )
    data_quiet_seconds: int = Field(
        0,
        description="a top-level file or folder of DATA_ROOT holding a file modified less than this many seconds "
        "ago is still being written: a run leaves it out for a later run (0: every file is taken)",
    )
    promote_min_delta: float = Field(
        0.0,  # from -1 to 1 (_min_delta)
        description="promotion rule: a candidate is not served when its held-out accuracy minus the served "
        "version's, on the same rows, falls below this by more than chance (docs/chain.md, promotion)",
    )
    delta_base_interval: int = Field(
        10, description="chain weights: a FULL every N versions, DELTAs on the parent in between (1: always FULL)"
    )
    alias_deadline_seconds: int = Field(
        30,
        description="the most seconds a run, the gate's early exit included, spends at its end bringing MLflow's "
        "aliases head and promoted in line with the chain: past it (a registry down or hung, a sqlite registry's "
        "lock held), a warning, and the next run tries again; also the most `ml8s chain promote` spends moving the "
        "alias promoted (1 to 86400)",
    )

    @classmethod
    def load(cls, env: Mapping[str, str] | None = None, overrides: Mapping[str, str] | None = None) -> PlatformSettings:
        """Resolve the settings: explicit input (non-empty) > environment (non-empty) > default.

        Args:
            env: the environment; default ``os.environ``.
            overrides: workflow inputs or CLI flags, keyed by lower-case name; ``""`` means "not given".

        Raises:
            ConfigError: a setting is malformed; the message names the variable and what was expected.
        """
        token = _LOADING.set((os.environ if env is None else env, overrides or {}))
        try:
            return cls()
        except ValidationError as exc:  # a field's own constraint (a choice, a range): named like the others
            error = exc.errors()[0]
            variable = str(error["loc"][0]).upper() if error["loc"] else "a platform setting"
            expected = str(error["msg"]).removeprefix("Input should be ").removeprefix("input should be ")
            raise ConfigError(f"{variable}={quoted(str(error.get('input')))} is invalid; expected {expected}") from exc
        finally:
            _LOADING.reset(token)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Inside :meth:`load`: the one priority. Anywhere else: only the values given (no environment)."""
        loading = _LOADING.get()
        return (init_settings,) if loading is None else (init_settings, _ExplicitThenEnv(settings_cls, *loading))

    def mlflow_tracking_uri_for_registry(self) -> str:
        """The MLflow tracking URI, for code that talks to MLflow.

        Raises:
            ConfigError: MLFLOW_TRACKING_URI is unset and the pipeline root is not local (sqlite needs a disk).
        """
        if not self.mlflow_tracking_uri:
            raise ConfigError(
                f"MLFLOW_TRACKING_URI is required when PIPELINE_ROOT_URI is not local ({self.pipeline_root_uri}): "
                "only a local root has a default (sqlite needs a disk); expected an MLflow tracking URI"
            )
        return self.mlflow_tracking_uri

    @field_validator("pipeline_root_uri")
    @classmethod
    def _root(cls, value: str) -> str:
        return parse_root_uri(value, variable="PIPELINE_ROOT_URI").uri

    @field_validator("warm_start_root_uri")
    @classmethod
    def _parent_root(cls, value: str) -> str:
        return parse_root_uri(value, variable="WARM_START_ROOT_URI").uri if value else ""

    @property
    def parent_root_uri(self) -> str:
        """Where a warm start's parent chain lives."""
        return self.warm_start_root_uri or self.pipeline_root_uri

    @field_validator("force_rerun", "strict_data_identity", "chain_require_signed", mode="before")
    @classmethod
    def _flag(cls, value: object, info: ValidationInfo) -> object:
        if not isinstance(value, str):
            return value
        name = str(info.field_name).upper()
        if value.lower() in ("true", "1", "yes"):
            return True
        if value.lower() in ("false", "0", "no"):
            return False
        raise ConfigError(f"{name}={quoted(value)} is invalid; expected true or false")

    @field_validator("mlflow_tracking_uri")
    @classmethod
    def _local_tracking_default(cls, value: str, info: ValidationInfo) -> str:
        if value:
            return check_tracking_uri(value)
        root = info.data.get("pipeline_root_uri")
        if not isinstance(root, str):
            return value
        parsed = parse_root_uri(root, variable="PIPELINE_ROOT_URI")
        return "sqlite:////" + parsed.path.lstrip("/") + "/mlflow.db" if parsed.scheme == "file" else ""

    @field_validator("mlflow_experiment_prefix")
    @classmethod
    def _experiment(cls, value: str) -> str:
        return check_experiment_name(value)

    @field_validator("mlflow_model_name")
    @classmethod
    def _model_name(cls, value: str) -> str:
        return check_model_name(value)

    @field_validator("chain_name")
    @classmethod
    def _chain_defaults_to_model(cls, value: str, info: ValidationInfo) -> str:
        if value:
            return check_chain_name(value)
        model = info.data.get("mlflow_model_name")
        return chain_name_from_model(model) if isinstance(model, str) else ""

    @field_validator("tmp_retention_days", mode="before")
    @classmethod
    def _whole_days(cls, value: object) -> int:
        return _whole(value, "TMP_RETENTION_DAYS", "a whole number of days", minimum=0)

    @field_validator("data_quiet_seconds", mode="before")
    @classmethod
    def _quiet(cls, value: object) -> int:
        return _whole(value, "DATA_QUIET_SECONDS", "a whole number of seconds", minimum=0)

    @field_validator("delta_base_interval", mode="before")
    @classmethod
    def _interval(cls, value: object) -> int:
        return _whole(value, "DELTA_BASE_INTERVAL", "a whole number >= 1", minimum=1)

    @field_validator("alias_deadline_seconds", mode="before")
    @classmethod
    def _alias_deadline(cls, value: object) -> int:
        expected = "a whole number of seconds from 1 to 86400"
        seconds = _whole(value, "ALIAS_DEADLINE_SECONDS", expected, minimum=1)
        if seconds > _MAX_ALIAS_DEADLINE_S:  # longer bounds nothing, and a thread's join refuses past TIMEOUT_MAX
            raise ConfigError(f"ALIAS_DEADLINE_SECONDS={quoted(str(seconds))} is invalid; expected {expected}")
        return seconds

    @field_validator("promote_min_delta", mode="before")
    @classmethod
    def _min_delta(cls, value: object) -> float:
        text = str(value).strip()
        try:
            number = float(text)
        except ValueError:
            number = math.nan
        if isinstance(value, bool) or not -1.0 <= number <= 1.0:  # NaN fails both comparisons
            raise ConfigError(f"PROMOTE_MIN_DELTA={quoted(text)} is invalid; expected a number from -1 to 1")
        return number


def _whole(value: object, variable: str, expected: str, *, minimum: int) -> int:
    """A whole-number setting of at most :data:`_MAX_WHOLE_DIGITS` digits."""
    text = str(value).strip()
    if isinstance(value, bool) or not re.fullmatch(r"[0-9]+", text):
        raise ConfigError(f"{variable}={quoted(text)} is invalid; expected {expected}")
    digits = len(text.lstrip("0"))
    if digits > _MAX_WHOLE_DIGITS:
        raise ConfigError(
            f"{variable} has {digits:,} digits; expected {expected} of at most {_MAX_WHOLE_DIGITS} digits"
        )
    if int(text) < minimum:
        raise ConfigError(f"{variable}={quoted(text)} is invalid; expected {expected}")
    return int(text)


def _described(info: FieldInfo) -> str:
    default = info.get_default()
    shown = str(default).lower() if isinstance(default, bool) else str(default)
    return f"{info.description}; default {shown}" if shown else str(info.description)


PLATFORM_VARIABLES: dict[str, str] = {
    **{name.upper(): _described(info) for name, info in PlatformSettings.model_fields.items()},
    "ML8S_WORKER_ID": "worker id in tmp names; default {hostname}-{pid}",
}


def worker_id(env: Mapping[str, str] | None = None) -> str:
    """A name for this process, used only in tmp names (never in a hash or final path)."""
    explicit = (env if env is not None else os.environ).get("ML8S_WORKER_ID", "")
    raw = explicit or f"{socket.gethostname()}-{os.getpid()}"
    return re.sub(r"[^A-Za-z0-9_.-]", "_", raw)[:64]
