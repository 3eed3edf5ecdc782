"""Step 0: read the configuration, validate it, fingerprint the data, compute the identity.

Nothing is written here: every bad input fails before ARTIFACT_ROOT is touched, and a malformed value
that came from an explicit input (a workflow input, a CLI flag) is reported with that input's name.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Mapping

from ml8s.data.sources import fingerprint_data
from ml8s.errors import ConfigError
from ml8s.identity.hashing import compute_identity
from ml8s.identity.params import validate_params
from ml8s.identity.settings import PlatformSettings
from ml8s.identity.variables import canonical_config, raw_values_from_env
from ml8s.modeling.plugins import resolve_model_code
from ml8s.pipeline.chain_commit import require_signing_key
from ml8s.pipeline.context import RunContext, RunSpec
from ml8s.pipeline.preflight import check_writable_root

# Every configuration message starts with the variable it is about: "EPOCHS=0 is invalid; ...",
# "DATA_ROOT is required ...".
_SUBJECT = re.compile(r"([A-Z][A-Z0-9_]*)[= ]")


def bootstrap(env: Mapping[str, str], overrides: Mapping[str, str] | None = None) -> RunContext:
    """Build the run from explicit inputs (lower-case names, "" = unset) and the environment.

    Raises:
        ConfigError: a value is malformed or missing; when it came from an explicit input, the message
            ends with ``(explicit input epochs)``.

    Example:
        >>> ctx = bootstrap({"DATA_ROOT": "demo_data/churn", "TARGET_COLUMN": "churned"})  # doctest: +SKIP
        >>> ctx.run_id  # doctest: +SKIP
        'a1b2c3d4e5f6'
    """
    given = overrides or {}
    try:
        settings = PlatformSettings.load(env, given)
        settings.mlflow_tracking_uri_for_registry()  # a run registers its model: fail before anything is written
        check_writable_root(settings)
        config = resolve_model_code(canonical_config(raw_values_from_env(env, given)))  # a plug-in's code identity
        params = validate_params(config)
    except ConfigError as exc:
        raise _naming_the_input(exc, given) from exc
    require_signing_key(settings, env)
    fingerprint = fingerprint_data(params.data_root)
    identity = compute_identity(config, fingerprint.fingerprint, strict=settings.strict_data_identity)
    token = secrets.token_hex(16) if settings.force_rerun else ""  # see RunSpec.recompute_token
    spec = RunSpec(identity=identity, params=params, fingerprint=fingerprint, recompute_token=token)
    ctx = RunContext(spec=spec, settings=settings)
    ctx.log("bootstrap", f"data_fingerprint={fingerprint.fingerprint} artifact_root={ctx.artifact_root}")
    return ctx


def _naming_the_input(exc: ConfigError, given: Mapping[str, str]) -> ConfigError:
    """The same error, saying which explicit input gave the value (the environment names itself)."""
    message = str(exc).removeprefix(f"{exc.code}: ")
    subject = _SUBJECT.match(message)
    name = subject.group(1).lower() if subject else ""
    if not name or not given.get(name, "").strip():
        return exc
    return ConfigError(f"{message} (explicit input {name})")
