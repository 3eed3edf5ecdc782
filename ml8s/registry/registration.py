"""Step 6: MLflow registration, exactly one registered model version per FULL_CONFIG_HASH.

MLflow has no "create if absent" for runs or model versions, so racing identical runs are serialized
by a claim object in the artifact store (``ml8s_registry/claims/{full_config_hash}.json``, swapped by
compare-and-swap) whose lease lets a survivor take over from a crashed holder: at once when the holder
ran on the same machine and its process is gone (:mod:`ml8s.registry.claim`), else when the
lease expires. MLflow stays the source of truth: every holder re-checks it before creating anything, and
duplicates that slip through a crash window (or two pipeline roots sharing one MLflow server) are
reconciled to the lowest version.

Sources: a version's source is ``models:/{model_id}``, the run's MLflow model (a pyfunc predicting on raw
rows) logged into MLflow's own artifact store (:mod:`ml8s.registry.mlflow_model`), so the same code
registers against a ``sqlite:///`` file and an MLflow server, which accepts no source outside the
artifact store it manages. ARTIFACT_ROOT stays untouched: its URI is the ``artifact_uri`` tag.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

from filelock import Timeout
from pydantic import BaseModel, ConfigDict

from ml8s.context.run import RunContext
from ml8s.errors import PreconditionFailedError, RegistryError, StoreError
from ml8s.identity.settings import worker_id
from ml8s.identity.uri import public_tracking_uri, sqlite_path
from ml8s.locks import path_lock
from ml8s.mlflow_probe import require_answer
from ml8s.registry.claim import RegistryClaim, gone_reason, read_claim, this_process
from ml8s.registry.mlflow_model import ensure_logged_model, experiment_location, registry_resolves_with, silenced
from ml8s.registry.mlflow_run import epoch_log, log_run_data
from ml8s.registry.query import hash_filter, versions_of_hash
from ml8s.registry.schema import ensure_schema, first_line
from ml8s.store import Store

if TYPE_CHECKING:  # mlflow takes seconds to import: only registration pays for it, not MlflowRef users
    from mlflow import MlflowClient
    from mlflow.entities.model_registry import ModelVersion

CLAIMS_DIR = "ml8s_registry/claims"
DEFAULT_TIMEOUT_S = 300.0
# Registration takes seconds; a lease this long never expires under a live holder, and a waiter's
# default timeout outlasts it, so a crashed holder delays the others, it never fails them. A crashed
# holder on the waiter's own machine is seen at once (registry_claim.gone_reason) and not waited for.
DEFAULT_LEASE_S = 120.0
POLL_S = 0.2


class MlflowRef(BaseModel):
    """Where a run's model lives in MLflow; part of the run manifest."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tracking_uri: str
    experiment_name: str
    experiment_id: str
    mlflow_run_id: str
    model_name: str
    model_version: str


def register(
    ctx: RunContext, store: Store, *, timeout_s: float = DEFAULT_TIMEOUT_S, lease_s: float = DEFAULT_LEASE_S
) -> MlflowRef:
    """Register ARTIFACT_ROOT/model once per FULL_CONFIG_HASH, reusing whatever already exists."""
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException
    from sqlalchemy.exc import SQLAlchemyError

    uri = ctx.settings.mlflow_tracking_uri_for_registry()  # an s3:// root has no default: ConfigError naming it
    require_answer(uri)  # a Flyte task's first word with MLflow: a hung server fails in seconds, by name
    deadline = time.monotonic() + timeout_s
    try:
        # MLflow logs each failed database session with a traceback (a full disk fails several); the user
        # gets one line, REGISTRY_ERROR with the cause, so those records stay out of the CLI's stderr.
        with _sqlite_lock(uri, deadline), silenced("mlflow.store.db.utils"):
            ensure_schema(uri)  # before any MLflow client opens it: created whole, or named when broken
            return _register(ctx, store, MlflowClient(tracking_uri=uri), deadline, lease_s)
    except (MlflowException, SQLAlchemyError, OSError) as exc:  # a full disk surfaces as any of them
        raise RegistryError(
            f"MLflow at {uri} failed registering model {ctx.settings.mlflow_model_name!r} for "
            f"full_config_hash {ctx.identity.full_config_hash}: {first_line(exc)}"
        ) from exc


def _register(ctx: RunContext, store: Store, client: MlflowClient, deadline: float, lease_s: float) -> MlflowRef:
    key, me = f"{CLAIMS_DIR}/{ctx.identity.full_config_hash}.json", worker_id()
    while True:
        found = _find_version(client, ctx)
        if found is not None:
            ctx.log("register", f"reusing model version {found.version} of {ctx.settings.mlflow_model_name!r}")
            return _ref(client, ctx, found)
        claim, token = read_claim(store, key)
        live = claim is not None and not claim.done and claim.lease_expires >= time.time()
        gone = gone_reason(claim.process) if claim is not None and live else ""
        if claim is None or not live or gone:
            generation = claim.generation + 1 if claim else 1
            replaced = f"{claim.holder} (generation {claim.generation}): {gone}" if claim is not None and gone else ""
            new = RegistryClaim(
                holder=me,
                generation=generation,
                lease_expires=time.time() + lease_s,
                process=this_process(),
                taken_over_from=replaced,
            )
            try:
                token = store.put_if_match(key, new.model_dump_json().encode(), token)
            except PreconditionFailedError:
                continue  # another process claimed first (or the holder wrote): look again
            taken = f", taken over at once from dead holder {replaced}" if replaced else ""
            ctx.log("register", f"claimed {key} (generation {new.generation}){taken}")
            return _register_as_holder(ctx, client, store, key, new, token)
        if time.monotonic() > deadline:
            raise RegistryError(
                f"timed out waiting for a model version of {ctx.settings.mlflow_model_name!r} tagged "
                f"full_config_hash={ctx.identity.full_config_hash} in MLflow at {ctx.settings.mlflow_tracking_uri}: "
                f"{store.uri(key)} is held by {claim.holder} (generation {claim.generation}) until "
                f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(claim.lease_expires))}"
            )
        time.sleep(POLL_S)


def _register_as_holder(
    ctx: RunContext, client: MlflowClient, store: Store, key: str, claim: RegistryClaim, token: str
) -> MlflowRef:
    """Create (or finish creating) the run and the version, then release the claim as done."""
    try:
        ref = _create(ctx, store, client)
    except BaseException:
        # Release at once so a waiter need not sit out the lease; best effort, the lease is the fallback.
        with contextlib.suppress(StoreError):
            store.put_if_match(key, claim.model_copy(update={"lease_expires": 0.0}).model_dump_json().encode(), token)
        raise
    done = claim.model_copy(update={"done": True, "model_version": ref.model_version})
    try:
        store.put_if_match(key, done.model_dump_json().encode(), token)
    except PreconditionFailedError:
        ctx.log("register", f"claim {key} was taken over while registering; MLflow was reconciled")
    return ref


def _create(ctx: RunContext, store: Store, client: MlflowClient) -> MlflowRef:
    found = _find_version(client, ctx)  # a crashed holder may have got this far
    if found is not None:
        return _ref(client, ctx, found)
    name, tags = ctx.settings.mlflow_model_name, _tags(ctx)
    experiment_id = _ensure_experiment(ctx, client)
    run_id, created_run = _ensure_run(ctx, store, client, experiment_id, tags)
    model_id = ensure_logged_model(ctx, client, experiment_id, run_id, tags)
    with _unless_exists():
        client.create_registered_model(name)
    with registry_resolves_with(str(client.tracking_uri)):
        mine = client.create_model_version(
            name,
            source=f"models:/{model_id}",
            run_id=run_id,
            tags=tags,
            description=f"ml8s RUN_ID {ctx.run_id} (full_config_hash {ctx.identity.full_config_hash})",
            model_id=model_id,
        )
    versions = _versions(client, ctx)
    keep = versions[0] if versions else mine
    if str(keep.version) != str(mine.version):  # a racing registry writer got there first
        client.delete_model_version(name, str(mine.version))
        if created_run and str(keep.run_id) != run_id:
            client.delete_logged_model(model_id)
            client.delete_run(run_id)
        ctx.log("register", f"deleted duplicate version {mine.version}, keeping {keep.version}")
    else:
        ctx.log("register", f"registered {name!r} version {mine.version} from models:/{model_id}")
    return _ref(client, ctx, keep)


def _ensure_experiment(ctx: RunContext, client: MlflowClient) -> str:
    name, uri = ctx.settings.mlflow_experiment_prefix, ctx.settings.mlflow_tracking_uri
    experiment = client.get_experiment_by_name(name)
    if experiment is None:
        with _unless_exists():  # created concurrently: read it back below
            return str(client.create_experiment(name, experiment_location(ctx.settings)))
        experiment = client.get_experiment_by_name(name)
    if experiment is None or str(experiment.lifecycle_stage) != "active":
        raise RegistryError(f"MLflow experiment {name!r} at {uri} is deleted or cannot be created")
    return str(experiment.experiment_id)


def _ensure_run(
    ctx: RunContext, store: Store, client: MlflowClient, experiment_id: str, tags: dict[str, str]
) -> tuple[str, bool]:
    """The MLflow run of this hash (reused or created), with params and metrics filled in idempotently."""
    runs = client.search_runs([experiment_id], hash_filter(ctx.identity.full_config_hash))
    created = not runs
    run = min(runs, key=lambda r: (int(r.info.start_time), str(r.info.run_id))) if runs else None
    if run is None:  # opened at the recorded start of training (logs/epochs.json), when there is one
        started, _ = epoch_log(ctx, store)
        run = client.create_run(experiment_id, start_time=started, tags=tags, run_name=ctx.run_id)
    run_id = str(run.info.run_id)
    log_run_data(ctx, store, client, run)  # params, per-epoch and held-out metrics, source tags: what is missing
    if str(run.info.status) != "FINISHED":
        client.set_terminated(run_id)
    return run_id, created


def _tags(ctx: RunContext) -> dict[str, str]:
    return {
        "run_id": ctx.identity.run_id,
        "full_config_hash": ctx.identity.full_config_hash,
        "data_fingerprint": ctx.identity.data_fingerprint,
        "artifact_uri": ctx.uri("model"),
        "ml8s.canonicalization_version": ctx.identity.canonicalization_version,
    }


def _versions(client: MlflowClient, ctx: RunContext) -> list[ModelVersion]:
    """Every version of the model tagged with this hash, lowest version number first."""
    return versions_of_hash(client, ctx.settings.mlflow_model_name, ctx.identity.full_config_hash)


def _find_version(client: MlflowClient, ctx: RunContext) -> ModelVersion | None:
    """The version of this hash, if any: the one check made before creating anything."""
    return next(iter(_versions(client, ctx)), None)


def _ref(client: MlflowClient, ctx: RunContext, version: ModelVersion) -> MlflowRef:
    from mlflow.exceptions import MlflowException

    if not version.run_id:
        raise RegistryError(f"model version {version.version} of {version.name!r} has no MLflow run")
    try:
        run = client.get_run(version.run_id)
    except MlflowException as exc:  # a deleted run purged by `mlflow gc`: every re-registration hit this
        if exc.error_code != "RESOURCE_DOES_NOT_EXIST":
            raise
        raise RegistryError(
            f"model version {version.version} of {version.name!r} in MLflow at {ctx.settings.mlflow_tracking_uri} "
            f"is this run's (tagged full_config_hash={ctx.identity.full_config_hash}) but its MLflow run "
            f"{version.run_id} no longer exists (deleted and purged); expected the run it was registered from: "
            f"delete model version {version.version} in MLflow, then FORCE_RERUN=true registers the run again"
        ) from exc
    experiment = client.get_experiment(run.info.experiment_id)
    return MlflowRef(
        tracking_uri=public_tracking_uri(ctx.settings.mlflow_tracking_uri),  # never a password in the manifest
        experiment_name=str(experiment.name),
        experiment_id=str(experiment.experiment_id),
        mlflow_run_id=str(run.info.run_id),
        model_name=str(version.name),
        model_version=str(version.version),
    )


@contextlib.contextmanager
def _unless_exists() -> Iterator[None]:
    """Creating what a racing process just created is not an error: the caller reads it back."""
    from mlflow.exceptions import MlflowException

    try:
        yield
    except MlflowException as exc:
        if exc.error_code != "RESOURCE_ALREADY_EXISTS":
            raise


@contextlib.contextmanager
def _sqlite_lock(uri: str, deadline: float, bound: str = "") -> Iterator[None]:
    """Serialize registrations on one sqlite file: MLflow's first schema migration races otherwise. ``bound``: the
    setting the deadline comes from, named when it passes."""
    path = sqlite_path(uri)
    if not path:
        yield
        return
    lock = path_lock(os.path.abspath(path) + ".lock")
    try:
        lock.acquire(timeout=max(0.0, deadline - time.monotonic()), poll_interval=POLL_S)
    except Timeout:
        within = (
            f": the MLflow database {path} is held by another registration or alias move past {bound}; expected it "
            "free within that (the command again, or the next pipeline run, moves the alias)"
            if bound
            else ""
        )
        raise RegistryError(f"timed out waiting for the registration lock {lock.lock_file} of {uri}{within}") from None
    except OSError as exc:  # a symbolic link planted there (ELOOP) is refused, never followed
        raise RegistryError(
            f"cannot take the registration lock {lock.lock_file} of {uri}: {exc.strerror or exc}; expected a "
            "regular file this user can write beside the database"
        ) from exc
    try:
        yield
    finally:
        lock.release()
