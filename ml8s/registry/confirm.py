"""Is a run's recorded registration in the registry it names? (``ml8s verify``, ``ml8s runs list``)

A deleted MLflow database is recreated empty by the next run, which then takes version 1 again; a restored
backup or another server at the same URI holds other runs. Either way the registry no longer holds what a
run recorded in its manifest: its MLflow run id is unknown there, or its version number belongs to another
MLflow run. That is named (REGISTRY_REPLACED), never reported as a plain "not found". A database that
cannot be read (malformed, locked, gone) is a RegistryError with its first line, never a traceback.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Iterator
from typing import TYPE_CHECKING

from ml8s.errors import RegistryError, RegistryReplacedError
from ml8s.identity.uri import sqlite_path
from ml8s.registry.schema import first_line

if TYPE_CHECKING:
    from mlflow import MlflowClient


def missing_database(uri: str) -> str | None:
    """The path of a ``sqlite:///`` database that does not exist (opening it would create it), else None."""
    path = sqlite_path(uri)
    return path if path and not os.path.isfile(path) else None


@contextlib.contextmanager
def registry_errors(where: str) -> Iterator[None]:
    """MLflow's, SQLAlchemy's and sqlite's failures inside as one RegistryError naming ``where``."""
    from mlflow.exceptions import MlflowException
    from sqlalchemy.exc import SQLAlchemyError

    try:
        yield
    except MlflowException as exc:
        missing = exc.error_code == "RESOURCE_DOES_NOT_EXIST"
        raise RegistryError(f"{where}: {'not found' if missing else 'MLflow error'}: {exc.message}") from exc
    except (SQLAlchemyError, sqlite3.Error, OSError) as exc:
        raise RegistryError(f"{where}: the MLflow database cannot be read: {first_line(exc)}") from exc
    except ModuleNotFoundError as exc:
        raise RegistryError(f"{where}: {missing_driver(exc)}") from exc


def missing_driver(exc: ModuleNotFoundError) -> str:
    """Why MLflow could not open a registry whose URI names a database driver not installed here (``postgresql://``
    without psycopg, ``mysql://`` without MySQLdb): it was an INTERNAL_ERROR of verify, audit bundle and runs list."""
    return (
        f"MLflow cannot open this registry here: the module {exc.name!r}, which its URI's database driver needs, "
        "is not installed; expected a registry this environment can read (install the driver, or pass a reachable "
        "URI)"
    )


def confirm_registration(client: MlflowClient, shown: str, model_name: str, version: str, mlflow_run_id: str) -> None:
    """Check that ``shown`` (the registry's public URI) holds MLflow run ``mlflow_run_id`` and that version
    ``version`` of ``model_name``, when present, was registered from it.

    Raises:
        RegistryReplacedError: it holds no such run, or the version is another run's.
    """
    from mlflow.exceptions import MlflowException

    recorded = f"the MLflow run {mlflow_run_id} and model {model_name!r} version {version} this run recorded"
    try:
        client.get_run(mlflow_run_id)
    except MlflowException as exc:
        if exc.error_code != "RESOURCE_DOES_NOT_EXIST":
            raise
        raise RegistryReplacedError(
            f"MLflow at {shown} does not hold {recorded}: the registry was recreated or replaced since the run "
            "registered, so its registration is unconfirmed; expected the registry it registered in (restore it, "
            "or pass --mlflow-tracking-uri to verify against where it moved)"
        ) from exc
    try:
        found = client.get_model_version(model_name, version)
    except MlflowException as exc:
        if exc.error_code != "RESOURCE_DOES_NOT_EXIST":
            raise
        return  # the run is there and the version was deleted: the caller reports it as not found
    if str(found.run_id or "") != mlflow_run_id:
        raise RegistryReplacedError(
            f"MLflow at {shown}: model {model_name!r} version {version} was registered from MLflow run "
            f"{found.run_id}, not from MLflow run {mlflow_run_id} that this run recorded: the registry was recreated "
            "or replaced since the run registered, so its registration is unconfirmed"
        )
