"""Step 0: read the configuration, validate it, fingerprint the data, compute the identity.

Nothing is written here: every bad input fails before ARTIFACT_ROOT is touched, and a malformed value
that came from an explicit input (a workflow input, a CLI flag) is reported with that input's name.
"""

from __future__ import annotations

import logging
import os
import re
import secrets
import time
from collections.abc import Collection, Mapping

from ml8s import log
from ml8s.context.run import RunContext, RunSpec
from ml8s.data.settled import why_young, young_partitions
from ml8s.data.sources import fingerprint_data, restrict
from ml8s.errors import ConfigError, LineageError
from ml8s.identity.hashing import compute_identity
from ml8s.identity.names import CHAIN_NAME_RULE
from ml8s.identity.params import validate_params
from ml8s.identity.priority import explicit_or_env
from ml8s.identity.settings import PlatformSettings
from ml8s.identity.uri import parse_root_uri, sqlite_path
from ml8s.identity.variables import canonical_config, raw_values_from_env, without_unused_keys
from ml8s.lineage import (
    check_commit_root,
    check_drift_policy,
    check_not_stale,
    check_same_split,
    plan_summary,
    resolve_warm_start,
)
from ml8s.modeling.plugins import resolve_model_code
from ml8s.pipeline.chain_commit import require_signing_key
from ml8s.pipeline.preflight import check_root_shape, check_writable_root

# Every configuration message starts with the variable it is about: "EPOCHS=0 is invalid; ...",
# "DATA_ROOT is required ...".
_SUBJECT = re.compile(r"([A-Z][A-Z0-9_]*)[= ]")


@log.timed("bootstrap")
def bootstrap(
    env: Mapping[str, str],
    overrides: Mapping[str, str] | None = None,
    *,
    data_files: Collection[str] | None = None,
    writable: bool = True,
    retrain: bool = False,
    commits: bool = True,
) -> RunContext:
    """Build the run from explicit inputs (lower-case names, "" = unset) and the environment.

    ``data_files`` (``ml8s chain reproduce``): fingerprint only these files of DATA_ROOT, as a run that
    found only them there did; the identity is then that run's. ``writable=False`` leaves the check that
    the root is writable to the caller (``ml8s run``: a completed run is returned from a read-only root).
    ``retrain``: the run lost its warm-start parent to a concurrent commit and trains from the new head even
    when no generation is new to it (STALE_PARENT_POLICY=retrain). ``commits=False`` (``ml8s chain reproduce``):
    the run is never committed, so its parent, read from WARM_START_ROOT_URI, need not head a chain at
    PIPELINE_ROOT_URI.

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
        if writable:
            check_writable_root(settings)
        else:
            check_root_shape(settings)  # a file or a loop fails here, before the gate reads under it
        config = resolve_model_code(canonical_config(raw_values_from_env(env, given)))  # a plug-in's code identity
        params = validate_params({**config, "warm_start": None})  # WARM_START is resolved below, on the data
    except ConfigError as exc:
        raise _naming_the_input(exc, given) from exc
    if config.get("warm_start") is not None and params.train_world_size > 1:
        raise LineageError(
            f"WARM_START={config['warm_start']} with TRAIN_WORLD_SIZE={params.train_world_size}: a warm start "
            "trains in one process; expected TRAIN_WORLD_SIZE=1 (or unset) for a warm start, or a cold start"
        )
    require_signing_key(settings, env)
    _check_apart(params.data_root, settings)
    fingerprint = fingerprint_data(params.data_root)
    young: dict[str, float] = {}
    if data_files is not None:
        fingerprint = restrict(fingerprint, data_files)
    else:  # after the fingerprint: a file written to since it was hashed is young
        young = young_partitions(fingerprint, settings.data_quiet_seconds, time.time())
    try:
        # the parent's content hash, and the data taken (a partition still being written is left for a later run)
        config, plan, fingerprint = resolve_warm_start(config, settings, fingerprint, retrain=retrain, young=young)
        config = without_unused_keys(config)  # WARM_START=head on an empty chain: a cold start
        params = validate_params(config)
    except ConfigError as exc:
        raise _naming_the_input(exc, given) from exc
    identity = compute_identity(config, fingerprint.fingerprint, strict=settings.strict_data_identity)
    check_not_stale(plan, identity.full_config_hash)
    parent = None if plan is None else plan.parent
    check_same_split(parent, params.random_seed, params.test_size, identity.full_config_hash)
    check_drift_policy(plan, settings.drift_policy, identity.full_config_hash)
    if commits:
        check_commit_root(plan, settings.pipeline_root_uri, identity.full_config_hash)
    token = secrets.token_hex(16) if settings.force_rerun else ""  # see RunSpec.recompute_token
    spec = RunSpec(identity=identity, params=params, fingerprint=fingerprint, recompute_token=token, lineage=plan)
    ctx = RunContext(spec=spec, settings=settings)
    files = len(fingerprint.entries)
    ctx.log("bootstrap", f"run {ctx.run_id}: {params.model_type} on {files} file(s), target {params.target_column}")
    ctx.log("bootstrap", f"full config hash {identity.full_config_hash}")
    ctx.log("bootstrap", f"data fingerprint {fingerprint.fingerprint}")
    ctx.log("bootstrap", f"artifacts at {ctx.artifact_root}")
    for partition in sorted(set(young) - {entry.relative_path.split("/", 1)[0] for entry in fingerprint.entries}):
        why = why_young(young[partition], settings.data_quiet_seconds)
        ctx.log("bootstrap", f"left out {partition}: it {why}; a later run takes it")
    for name, value in plan_summary(plan).items():
        ctx.log("bootstrap", f"warm start: {name} {value}")
    if explicit_or_env("CHAIN_NAME", env, given) is None and settings.chain_name != settings.mlflow_model_name:
        logging.getLogger("ml8s").warning(  # a warning is never clipped: the name it uses must be readable
            "%s",
            f"CHAIN_NAME is unset and MLFLOW_MODEL_NAME={settings.mlflow_model_name!r} is no valid chain name "
            f"({CHAIN_NAME_RULE}): using the chain name {settings.chain_name!r} derived from it",
            extra={"step": "bootstrap"},
        )
    return ctx


def _check_apart(data_root: str, settings: PlatformSettings) -> None:
    """Nothing a run writes may lie under DATA_ROOT, where every file is fingerprinted and read: the first run
    succeeded, then its own files were the next one's data (DATA_ERROR on its lock file, or another RUN_ID)."""
    data = parse_root_uri(data_root, variable="DATA_ROOT")
    root = parse_root_uri(settings.pipeline_root_uri, variable="PIPELINE_ROOT_URI")
    written = [("PIPELINE_ROOT_URI", settings.pipeline_root_uri, root.bucket, root.path)]
    if database := sqlite_path(settings.mlflow_tracking_uri):
        written.append(("MLFLOW_TRACKING_URI", settings.mlflow_tracking_uri, "", os.path.abspath(database)))
    for variable, value, bucket, path in written:
        if bucket == data.bucket and _within(path, data.path, local=not bucket):
            raise ConfigError(
                f"{variable}={value} lies under DATA_ROOT={data_root}, whose every file is fingerprinted and read as "
                "data: the run's own files would be the next run's data; expected a place outside DATA_ROOT"
            )


def _within(path: str, data: str, *, local: bool) -> bool:
    """Whether ``path`` is ``data`` or under it (locally also once links are resolved)."""
    pairs = [(path, data)] + ([(os.path.realpath(path), os.path.realpath(data))] if local else [])
    return any(p == d or p.startswith(d.rstrip("/") + "/") or not d for p, d in pairs)


def _naming_the_input(exc: ConfigError, given: Mapping[str, str]) -> ConfigError:
    """The same error, saying which explicit input gave the value (the environment names itself)."""
    message = str(exc).removeprefix(f"{exc.code}: ")
    subject = _SUBJECT.match(message)
    name = subject.group(1).lower() if subject else ""
    if not name or not given.get(name, "").strip():
        return exc
    return ConfigError(f"{message} (explicit input {name})")
