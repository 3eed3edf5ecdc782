"""Step 0: read the configuration, validate it, fingerprint the data, compute the identity.

Nothing is written here: every bad input fails before ARTIFACT_ROOT is touched.
"""

from __future__ import annotations

from collections.abc import Mapping

from ml8s.data.sources import fingerprint_data
from ml8s.identity.hashing import compute_identity
from ml8s.identity.params import validate_params
from ml8s.identity.settings import PlatformSettings
from ml8s.identity.variables import canonical_config, raw_values_from_env
from ml8s.pipeline.context import RunContext, RunSpec


def bootstrap(env: Mapping[str, str], overrides: Mapping[str, str] | None = None) -> RunContext:
    """Build the run context from workflow inputs (lower-case names, "" = unset) and the environment.

    Example:
        >>> ctx = bootstrap({"DATA_ROOT": "demo_data/churn", "TARGET_COLUMN": "churned"})  # doctest: +SKIP
        >>> ctx.run_id  # doctest: +SKIP
        'a1b2c3d4e5f6'
    """
    settings = PlatformSettings.load(env, overrides)
    settings.mlflow_tracking_uri_for_registry()  # a run registers its model: fail before anything is written
    config = canonical_config(raw_values_from_env(env, overrides))
    params = validate_params(config)
    fingerprint = fingerprint_data(params.data_root)
    identity = compute_identity(config, fingerprint.fingerprint, strict=settings.strict_data_identity)
    ctx = RunContext(spec=RunSpec(identity=identity, params=params, fingerprint=fingerprint), settings=settings)
    ctx.log("bootstrap", f"data_fingerprint={fingerprint.fingerprint} artifact_root={ctx.artifact_root}")
    return ctx
