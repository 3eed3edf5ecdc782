"""The MLflow model of a run, logged in MLflow's own artifact store, and registered from there.

A registered version's source is ``models:/{model_id}``: a *logged model* of the run (MLflow 3), whose
files MLflow stores under the experiment's artifact location (``{PIPELINE_ROOT_URI}/mlruns`` with a sqlite
tracking URI, local or S3 root; the server's artifact store otherwise), never under ARTIFACT_ROOT. It is a pyfunc model
(:mod:`ml8s.inference.pyfunc`) holding byte-identical copies of the run's feature schema, training metadata
and exported model, read from ARTIFACT_ROOT and checked against their recorded sha256 first.

A logged model is READY once all its files are uploaded; registering again (or after a crash) reuses the
run's READY one, so one run has one.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING

from ml8s.context.run import RunContext
from ml8s.errors import InferenceError, RegistryError
from ml8s.identity.settings import PlatformSettings
from ml8s.tempdirs import owned_tempdir

if TYPE_CHECKING:
    from mlflow import MlflowClient
    from mlflow.models import Model

MODEL_NAME = "model"
TRACKING_URI_VARIABLE = "MLFLOW_TRACKING_URI"


def ensure_logged_model(
    ctx: RunContext, client: MlflowClient, experiment_id: str, run_id: str, tags: dict[str, str]
) -> str:
    """The id of the run's READY logged model: the oldest one found, else one logged now.

    Raises:
        RegistryError: the run's files cannot make a model (incomplete or altered artifacts).
    """
    from mlflow.entities import LoggedModelOutput, LoggedModelStatus
    from mlflow.exceptions import MlflowException
    from mlflow.models import Model
    from sqlalchemy.exc import SQLAlchemyError

    found = [
        m
        for m in client.search_logged_models([experiment_id], filter_string=f"source_run_id = '{run_id}'")
        if (m.status, m.name, m.tags.get("full_config_hash"))
        == (LoggedModelStatus.READY, MODEL_NAME, tags["full_config_hash"])
    ]
    if found:
        return str(min(found, key=lambda m: (int(m.creation_timestamp), str(m.model_id))).model_id)
    model = client.create_logged_model(experiment_id, name=MODEL_NAME, source_run_id=run_id, tags=tags)
    model_id = str(model.model_id)
    try:
        with owned_tempdir("ml8s-mlflow-model-") as tmp:
            directory = os.path.join(tmp, "model")
            record = Model(artifact_path=model.artifact_location, model_uuid=model_id, run_id=run_id, model_id=model_id)
            _save(ctx, directory, record)
            client.log_model_artifacts(model_id, directory)
        client.finalize_logged_model(model_id, LoggedModelStatus.READY)
        client.log_outputs(run_id, [LoggedModelOutput(model_id, step=ctx.params.epochs)])
    except BaseException:
        # Best effort (a FAILED model is never reused), and quiet: on a full disk MLflow would log this
        # second failure with a traceback, and the user's one line is the first failure's.
        with contextlib.suppress(MlflowException, SQLAlchemyError, OSError), silenced("mlflow"):
            client.finalize_logged_model(model_id, LoggedModelStatus.FAILED)
        raise
    ctx.log("register", f"logged MLflow model {model_id} of run {run_id} at {model.artifact_location}")
    return model_id


# logger name -> (uses inside now, the level before the first): the alias step's thread, left running past its
# deadline, can still be inside when a registration enters; each use saving and restoring the level it found
# left the logger at CRITICAL for good (the second use saved the first one's CRITICAL, and restored it last)
_SILENCED: dict[str, tuple[int, int]] = {}
_SILENCED_LOCK = threading.Lock()


@contextlib.contextmanager
def silenced(name: str) -> Iterator[None]:
    """No record below CRITICAL from logger ``name`` and its children that inherit its level, while inside (on any
    thread: a level is the logger's); the level it had is restored when the last use inside ends, in any order."""
    logger = logging.getLogger(name)
    with _SILENCED_LOCK:
        count, level = _SILENCED.get(name, (0, logger.level))
        _SILENCED[name] = (count + 1, level)
        logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        with _SILENCED_LOCK:
            count, level = _SILENCED.pop(name)
            if count > 1:
                _SILENCED[name] = (count - 1, level)
            else:
                logger.setLevel(level)


def experiment_location(settings: PlatformSettings) -> str | None:
    """Where a new experiment keeps its artifacts (the logged models); None lets an MLflow server decide.

    With a sqlite tracking URI MLflow's default is ``./mlruns`` in the working directory, lost with a pod:
    ml8s uses ``{PIPELINE_ROOT_URI}/mlruns``, beside the runs, whether the root is local or ``s3://`` (MLflow
    then writes through boto3, which takes ``AWS_ENDPOINT_URL`` and the credentials from the environment).
    (An in-memory database never gets here: the settings refuse it, ``check_tracking_uri``.)
    """
    if not settings.mlflow_tracking_uri.startswith("sqlite:"):
        return None
    return settings.pipeline_root_uri.rstrip("/") + "/mlruns"


@contextlib.contextmanager
def registry_resolves_with(uri: str) -> Iterator[None]:
    """Make MLflow's process-wide tracking URI ``uri`` while registering a ``models:/`` source.

    MLflow's own SQL model registry looks the logged model up through ``MlflowClient()``, i.e. the process-wide
    tracking URI, not the client's (a TODO in ``mlflow/store/model_registry/sqlalchemy_store.py``); a server
    resolves it itself. The previous setting is restored afterwards, and so is the process environment:
    MLflow's own ``_use_tracking_uri`` ends with ``set_tracking_uri(None)`` when no URI was set in code, which
    deletes MLFLOW_TRACKING_URI from ``os.environ``, and a retried run in this process would then register in
    the pipeline root's default database instead of the one the operator configured.
    """
    from mlflow.tracking._tracking_service.utils import _use_tracking_uri

    saved = os.environ.get(TRACKING_URI_VARIABLE)
    try:
        with _use_tracking_uri(uri):
            yield
    finally:
        if saved is None:
            os.environ.pop(TRACKING_URI_VARIABLE, None)
        else:
            os.environ[TRACKING_URI_VARIABLE] = saved


def _save(ctx: RunContext, directory: str, record: Model) -> None:
    from ml8s.inference.model_files import read_run_files  # pyarrow: registration only, not `import ml8s.registry`
    from ml8s.inference.pyfunc import save_model_dir

    try:  # before finalization: no marker yet, the checksums training_metadata.json records are the check
        files = read_run_files(ctx.settings.pipeline_root_uri, ctx.run_id, require_marker=False)
    except InferenceError as exc:
        raise RegistryError(f"cannot make the MLflow model of run {ctx.run_id}: {exc.message}") from exc
    save_model_dir(directory, files, record)
