"""The MLflow alias ``promoted``: the registered model version of the chain version followers serve.

It moves with the chain's promotion log (``ml8s.chain.PromotionLog``), never with the head: a candidate that
is committed but not promoted keeps its version in MLflow without the alias.
"""

from __future__ import annotations

import sqlite3
import time

from ml8s.errors import RegistryError
from ml8s.identity.settings import PlatformSettings
from ml8s.identity.uri import public_tracking_uri, sqlite_path
from ml8s.mlflow_probe import require_answer
from ml8s.registry.confirm import missing_database
from ml8s.registry.deadline import within_deadline
from ml8s.registry.mlflow_model import silenced
from ml8s.registry.query import versions_of_hash
from ml8s.registry.registration import _sqlite_lock
from ml8s.registry.schema import check_schema, first_line

PROMOTED_ALIAS = "promoted"


def move_promoted_alias(settings: PlatformSettings, full_config_hash: str) -> str | None:
    """Point the alias at the model version of ``full_config_hash``; returns its version number, None when
    MLflow holds no version of that run (an external ``chain commit``, or no ``sqlite:///`` database at all).

    All of it within ALIAS_DEADLINE_SECONDS, as the run's alias step: the caller's decision is made, and a database
    another process holds (an open write transaction) or a hung server would otherwise keep it waiting on sqlite's
    busy timeout or MLflow's HTTP timeouts and retries. A move cut short writes nothing past the deadline.

    Raises:
        RegistryError: MLflow is unreachable, hung past the deadline or refuses the alias, or its database cannot
            be read or written (locked, malformed): the caller's decision is already made, so it must be a named
            error it can report. Past the deadline it names the database or server and the setting.
    """
    uri = settings.mlflow_tracking_uri_for_registry()
    if missing_database(uri) is not None:  # MlflowClient would create a whole registry to find nothing in it
        return None
    seconds = settings.alias_deadline_seconds
    bound = f"ALIAS_DEADLINE_SECONDS={seconds} s"
    path = sqlite_path(uri)
    where = f"the MLflow database {path}" if path else f"MLflow at {public_tracking_uri(uri)}"
    waited = (
        "another process holds the database: an open write transaction, or a registration"
        if path
        else "MLflow's requests got no answer: a hung server or database"
    )
    moved: list[str | None] = []
    try:
        within_deadline(
            seconds,
            lambda deadline: moved.append(_move(settings, uri, full_config_hash, deadline, bound)),
            waited=waited,
        )
    except RegistryError as exc:
        if bound in exc.message and where in exc.message:  # the lock file's wait, the probe's: said in full
            raise
        again = "the command again, or the next pipeline run, moves the alias"
        if bound in exc.message:
            raise RegistryError(f"{where} did not let alias {PROMOTED_ALIAS!r} move: {exc.message} ({again})") from exc
        if _busy(exc):  # sqlite's own wait, bounded by what was left, ended first
            raise RegistryError(f"{where} is held past {bound}: {exc.message} ({again})") from exc
        raise  # a refusal or damage: it says what it is
    return moved[0]


def _move(settings: PlatformSettings, uri: str, full_config_hash: str, deadline: float, bound: str) -> str | None:
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException
    from sqlalchemy.exc import SQLAlchemyError

    def left() -> float:
        return max(deadline - time.monotonic(), 0.0)

    try:
        require_answer(uri, left())
    except RegistryError as exc:
        raise RegistryError(f"{exc.message} (the alias move waits at most {bound})") from exc
    # under registration's sqlite lock, as the head alias: a run registering meanwhile holds the database. Waited
    # for as the run's alias step waits (registration's 300 s kept an operator's promote waiting, its decision made)
    try:
        with _sqlite_lock(uri, deadline, bound), silenced("mlflow.store.db.utils"):
            check_schema(uri, left())  # MLflow's client would upgrade an older database in place
            client = MlflowClient(tracking_uri=uri, registry_uri=uri)
            found = versions_of_hash(client, settings.mlflow_model_name, full_config_hash)
            if not found:
                return None
            version = str(found[0].version)
            if not left():  # the command went on without this move: nothing is written after it said so
                raise RegistryError(f"{bound} passed before alias {PROMOTED_ALIAS!r} was written")
            client.set_registered_model_alias(settings.mlflow_model_name, PROMOTED_ALIAS, version)
    except (MlflowException, SQLAlchemyError, OSError) as exc:  # a locked or malformed sqlite file: SQLAlchemy's
        raise RegistryError(
            f"MLflow at {uri}: cannot point alias {PROMOTED_ALIAS!r} of {settings.mlflow_model_name!r} at the run "
            f"{full_config_hash[:12]}: {first_line(exc)}"
        ) from exc
    return version


def _busy(exc: BaseException | None) -> bool:
    """Whether sqlite said another connection holds the database (SQLITE_BUSY), anywhere in ``exc``'s causes."""
    while exc is not None:
        if isinstance(exc, sqlite3.OperationalError) and exc.sqlite_errorcode == sqlite3.SQLITE_BUSY:
            return True
        exc = exc.__cause__
    return False
