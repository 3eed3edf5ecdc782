"""Which chain and model a command means when the user did not say: the run's own records, else the root.

A run's manifest records its MLflow model, and the run index of the chain it was committed to records the
run, so ``ml8s verify RUN_ID`` needs neither CHAIN_NAME nor MLFLOW_MODEL_NAME in the shell that asks (the
shell that trained may have had them). ``--chain`` always wins; then the chain that holds the run; then the
environment; then the chain the manifest's model name gives.
"""

from __future__ import annotations

from collections.abc import Mapping

from ml8s.chain import chains_holding
from ml8s.contract import Manifest, layout, load
from ml8s.errors import ConfigError, Ml8sError
from ml8s.identity.names import CHAIN_NAME_PATTERN, CHAIN_NAME_RULE, chain_name_from_model
from ml8s.identity.priority import explicit_or_env
from ml8s.identity.settings import PlatformSettings
from ml8s.store import Store
from ml8s.text import quoted

NAMING_VARIABLES = ("CHAIN_NAME", "MLFLOW_MODEL_NAME")


def named_in(env: Mapping[str, str]) -> bool:
    """Whether the environment names a chain (CHAIN_NAME, or MLFLOW_MODEL_NAME that the chain defaults to)."""
    return any(explicit_or_env(name, env) for name in NAMING_VARIABLES)


def run_names(store: Store, run_id: str, flag: str, env: Mapping[str, str]) -> dict[str, str]:
    """The environment entries (CHAIN_NAME, MLFLOW_MODEL_NAME) that point a run's checks at its own chain and model.

    Raises:
        ConfigError: ``--chain`` is no valid chain name, or the run is in several chains and nothing says which.
    """
    names: dict[str, str] = {}
    manifest = _manifest(store, run_id)
    model = manifest.mlflow.get("model_name", "") if manifest is not None else ""
    if model:
        names["MLFLOW_MODEL_NAME"] = model
    if flag:
        if not CHAIN_NAME_PATTERN.fullmatch(flag):
            raise ConfigError(f"--chain {quoted(flag)} is invalid; expected {CHAIN_NAME_RULE}")
        names["CHAIN_NAME"] = flag
        return names
    from_env = PlatformSettings.load(env).chain_name if named_in(env) else ""
    holding = chains_holding(store, manifest.full_config_hash) if manifest is not None else []
    if len(holding) == 1:
        names["CHAIN_NAME"] = holding[0]
    elif holding:
        preferred = [name for name in (from_env, chain_name_from_model(model) if model else "") if name in holding]
        if not preferred:
            raise ConfigError(
                f"run {run_id} is in chains {', '.join(holding)}; expected --chain NAME to say which one to check"
            )
        names["CHAIN_NAME"] = preferred[0]
    elif from_env:
        names["CHAIN_NAME"] = from_env
    elif model:
        names["CHAIN_NAME"] = chain_name_from_model(model)
    return names


def _manifest(store: Store, run_id: str) -> Manifest | None:
    """The run's manifest; None when it is missing or unreadable (the checks report that themselves)."""
    key = f"{layout.run_prefix(run_id)}/{layout.MANIFEST}"
    try:
        return load(store.uri(key), store.get(key, max_bytes=layout.RECORD_MAX_BYTES), Manifest)
    except Ml8sError:
        return None
