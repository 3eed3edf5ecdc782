"""What MLflow says about a run (read-only), and whether it agrees with the run's records (SPEC §5).

:func:`read_view` reads the registered version, its MLflow run and experiment into an
:class:`MlflowView`; :func:`view_problems` compares a view with the run's snapshot and manifest. The
live check (``ml8s verify``) and the offline one (``ml8s audit verify``, on the view saved in the
bundle as ``mlflow.json``) use the same comparison. The view holds no timestamps and no ``mlflow.*``
system tags (user, source), so two bundles made from an unchanged registry are byte-identical.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, ValidationError

from ml8s.contract import ConfigSnapshot, Manifest, Unavailable, layout
from ml8s.errors import RegistryError
from ml8s.identity.priority import explicit_or_env
from ml8s.identity.settings import PlatformSettings
from ml8s.identity.uri import public_tracking_uri
from ml8s.mlflow_probe import require_answer
from ml8s.registry.confirm import confirm_registration, missing_database, registry_errors
from ml8s.registry.mlflow_run import mlflow_params
from ml8s.registry.query import versions_of_hash
from ml8s.registry.registration import MlflowRef

if TYPE_CHECKING:
    from mlflow import MlflowClient

CONTRACT_TAGS = ("run_id", "full_config_hash", "data_fingerprint", "artifact_uri")


class MlflowView(BaseModel):
    """A registered model version as MLflow reports it: ``mlflow.json`` in an audit bundle."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tracking_uri: str
    model_name: str
    model_version: str
    version_source: str
    # The logged MLflow model the version's source (models:/MODEL_ID) names: "" for a version registered from
    # ARTIFACT_ROOT, before ml8s logged MLflow models.
    logged_model_id: str = ""
    logged_model_run_id: str = ""
    logged_model_status: str = ""
    version_run_id: str
    version_status: str
    version_tags: dict[str, str]
    versions_with_this_hash: tuple[str, ...]
    run_id: str
    run_lifecycle_stage: str
    run_tags: dict[str, str]
    run_params: dict[str, str]
    experiment_id: str
    experiment_name: str


def manifest_ref(manifest: Manifest) -> MlflowRef:
    try:
        return MlflowRef.model_validate(manifest.mlflow)
    except ValidationError as exc:
        raise Unavailable(f"manifest.json's mlflow reference is malformed: {exc.errors()[0]['msg']}") from exc


def tracking_uri(env: Mapping[str, str], root_uri: str) -> str:
    """MLFLOW_TRACKING_URI, else the default of a local pipeline root (the platform settings).

    Raises:
        ConfigError: the root is not local and MLFLOW_TRACKING_URI is unset.
    """
    return PlatformSettings.load(env, {"pipeline_root_uri": root_uri}).mlflow_tracking_uri_for_registry()


class TrackingChoice(BaseModel):
    """Which MLflow a verifier asks, and why (``source`` is shown in the report)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    uri: str
    source: str
    ignored: str = ""  # MLFLOW_TRACKING_URI when set but not used, without credentials


def choose_tracking_uri(ref: MlflowRef, env: Mapping[str, str], root_uri: str, explicit: str = "") -> TrackingChoice:
    """The MLflow to verify a run against: the one it registered with.

    In order: ``explicit`` (``ml8s verify --mlflow-tracking-uri``: a registry that moved); the tracking URI
    ``manifest.json`` records (MLFLOW_TRACKING_URI supplies only credentials for it: used when it is that
    URI with credentials); for a manifest that records none, MLFLOW_TRACKING_URI, else the local root's
    default. The manifest's URI cannot be redirected unnoticed: the chain check compares the manifest with
    the copy its block holds.

    Raises:
        ConfigError: no explicit URI, none recorded, the root is not local and MLFLOW_TRACKING_URI is unset.
    """
    if explicit.strip():
        return TrackingChoice(uri=explicit.strip(), source="--mlflow-tracking-uri")
    from_env = explicit_or_env("MLFLOW_TRACKING_URI", env) or ""
    if ref.tracking_uri:
        if from_env and from_env != ref.tracking_uri and public_tracking_uri(from_env) == ref.tracking_uri:
            return TrackingChoice(uri=from_env, source="manifest.json (credentials from MLFLOW_TRACKING_URI)")
        ignored = public_tracking_uri(from_env) if from_env and from_env != ref.tracking_uri else ""
        return TrackingChoice(uri=ref.tracking_uri, source="manifest.json", ignored=ignored)
    source = "MLFLOW_TRACKING_URI" if from_env else "the local root's default"
    return TrackingChoice(uri=tracking_uri(env, root_uri), source=f"{source} (manifest.json records none)")


def read_view(uri: str, ref: MlflowRef, full_config_hash: str) -> MlflowView:
    """Read the version ``ref`` names. Raises :class:`RegistryError` when MLflow cannot answer, or the
    version, its run or its experiment does not exist. A ``sqlite:///`` file that does not exist is an
    error too (opening it would create an empty database: a verifier writes nothing)."""
    from mlflow import MlflowClient

    if (path := missing_database(uri)) is not None:
        raise RegistryError(f"MLflow database {path} ({uri}) does not exist")
    shown = public_tracking_uri(uri)  # reports and bundles never carry a password
    require_answer(uri)  # MLflow's client would wait many minutes on a hung server
    where = f"model {ref.model_name!r} version {ref.model_version} in MLflow at {shown}"
    with registry_errors(where):  # a malformed database is a named error too, never a traceback
        client = MlflowClient(tracking_uri=uri)  # opens the database (its schema is read here)
        confirm_registration(client, shown, ref.model_name, ref.model_version, ref.mlflow_run_id)
        version = client.get_model_version(ref.model_name, ref.model_version)
        run = client.get_run(ref.mlflow_run_id)
        experiment = client.get_experiment(str(run.info.experiment_id))
        same_hash = [str(v.version) for v in versions_of_hash(client, ref.model_name, full_config_hash)]
        logged = _logged_model(client, str(version.source))
    return MlflowView(
        tracking_uri=shown,
        model_name=str(version.name),
        model_version=str(version.version),
        version_source=str(version.source),
        **logged,
        version_run_id=str(version.run_id or ""),
        version_status=str(version.status),
        version_tags=_user_tags(version.tags),
        versions_with_this_hash=tuple(same_hash),
        run_id=str(run.info.run_id),
        run_lifecycle_stage=str(run.info.lifecycle_stage),
        run_tags=_user_tags(run.data.tags),
        run_params={str(k): str(v) for k, v in sorted(run.data.params.items())},
        experiment_id=str(experiment.experiment_id),
        experiment_name=str(experiment.name),
    )


def registered_from_other_root(view: MlflowView, snapshot: ConfigSnapshot, artifact_root: str) -> str:
    """The ARTIFACT_ROOT of this RUN_ID under another pipeline root that the version and its run were registered
    from, or "".

    Registration keeps one version per FULL_CONFIG_HASH in an MLflow shared by several roots: the same
    configuration and data run under a second root reuses the first root's version, whose ``artifact_uri`` names
    the first root's run folder (same RUN_ID, so byte-identical artifacts). A tag naming any other folder is not
    this."""
    tagged = view.version_tags.get("artifact_uri", "")
    if tagged == f"{artifact_root}/model" or view.run_tags.get("artifact_uri") != tagged:
        return ""
    other = tagged.removesuffix("/model")
    return other if other != tagged and other.endswith(f"/{layout.RUNS_DIR}/{snapshot.run_id}") else ""


def view_problems(view: MlflowView, ref: MlflowRef, snapshot: ConfigSnapshot, artifact_root: str) -> list[str]:
    """The version and its run carry the contract tags of this run, once, registered from the run's MLflow model
    (logged from this run's folder, or the same RUN_ID's under another root: :func:`registered_from_other_root`)."""
    expected = {
        "run_id": snapshot.run_id,
        "full_config_hash": snapshot.full_config_hash,
        "data_fingerprint": snapshot.data_fingerprint,
        "artifact_uri": f"{registered_from_other_root(view, snapshot, artifact_root) or artifact_root}/model",
    }
    problems: list[str] = []
    for owner, tags in (("model version", view.version_tags), ("MLflow run", view.run_tags)):
        for key in CONTRACT_TAGS:
            if tags.get(key) != expected[key]:
                problems.append(f"{owner} tag {key} is {tags.get(key)!r}; expected {expected[key]!r}")
    if view.version_source.startswith("models:/"):
        logged = f"models:/{view.logged_model_id}"
        if view.version_source != logged or view.logged_model_status != "READY":
            problems.append(
                f"model version source {view.version_source} is not a READY logged MLflow model "
                f"(found {view.logged_model_id or 'none'}, status {view.logged_model_status or 'unknown'})"
            )
        if view.logged_model_run_id != view.version_run_id:
            problems.append(
                f"logged model {view.logged_model_id} comes from MLflow run {view.logged_model_run_id!r}; "
                f"expected the version's run {view.version_run_id!r}"
            )
    elif view.version_source != expected["artifact_uri"]:
        problems.append(
            f"model version source is {view.version_source}; expected the run's logged MLflow model (models:/...) "
            f"or, for a version registered before ml8s logged one, {expected['artifact_uri']}"
        )
    mine = {
        "model_name": (view.model_name, ref.model_name),
        "model_version": (view.model_version, ref.model_version),
        "version run": (view.version_run_id, ref.mlflow_run_id),
        "run": (view.run_id, ref.mlflow_run_id),
        "experiment_id": (view.experiment_id, ref.experiment_id),
        "experiment_name": (view.experiment_name, ref.experiment_name),
    }
    problems += [
        f"{name} is {got!r}; manifest.json records {want!r}" for name, (got, want) in mine.items() if got != want
    ]
    if view.versions_with_this_hash != (ref.model_version,):
        problems.append(
            f"versions tagged with this full_config_hash: {list(view.versions_with_this_hash)}; expected exactly "
            f"[{ref.model_version!r}] (one registered version per full_config_hash)"
        )
    if view.run_lifecycle_stage != "active":
        problems.append(f"MLflow run {view.run_id} is {view.run_lifecycle_stage}")
    params = mlflow_params(snapshot.canonical_config)
    # Runs logged before params were plain text hold every value as JSON: either form, wholly, is the config.
    legacy = {k: json.dumps(v, separators=(",", ":"), ensure_ascii=False) for k, v in snapshot.canonical_config.items()}
    wrong = sorted(k for k in set(params) | set(view.run_params) if params.get(k) != view.run_params.get(k))
    if wrong and view.run_params != legacy:
        problems.append(f"MLflow run params differ from the canonical config: {wrong}")
    return problems


def _logged_model(client: MlflowClient, source: str) -> dict[str, str]:
    """The logged model a ``models:/MODEL_ID`` source names (empty for any other source, or if it is gone)."""
    from mlflow.exceptions import MlflowException

    model_id = source[len("models:/") :] if source.startswith("models:/") else ""
    if not model_id or "/" in model_id:
        return {}
    try:
        model = client.get_logged_model(model_id)
    except MlflowException:
        return {}
    return {
        "logged_model_id": str(model.model_id),
        "logged_model_run_id": str(model.source_run_id or ""),
        "logged_model_status": str(model.status),
    }


def _user_tags(tags: Mapping[str, str]) -> dict[str, str]:
    return {str(k): str(v) for k, v in sorted(tags.items()) if not str(k).startswith("mlflow.")}
