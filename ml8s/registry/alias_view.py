"""What the registry says now: where a registered model's aliases point, and which version a run registered.

Read on every run's last step, the gate's early exit included, which must stay about as cheap as starting the
run: a ``sqlite:///`` registry is read with ``sqlite3``, without importing MLflow (seconds); any other
tracking URI through MLflow's client, one ``get_registered_model`` and one search by FULL_CONFIG_HASH per version
asked for. Nothing here writes (but for the rollback of a killed writer's transaction, as any sqlite client that
opens the file does), and a ``sqlite:///`` file that does not exist is not created.
"""

from __future__ import annotations

import os
import sqlite3
import time
from typing import Protocol
from urllib.parse import quote

from ml8s.errors import RegistryError
from ml8s.identity.uri import public_tracking_uri, sqlite_path
from ml8s.mlflow_probe import require_answer
from ml8s.registry.confirm import registry_errors
from ml8s.registry.schema import first_line

_ALIASES = "SELECT alias, version FROM registered_model_aliases WHERE name = ?"
# MLflow deletes a version by marking its stage; the lowest version of a hash is the one registration keeps
_VERSION_OF_HASH = (
    "SELECT MIN(v.version) FROM model_versions v JOIN model_version_tags t ON t.name = v.name AND "
    "t.version = v.version WHERE v.name = ? AND t.key = 'full_config_hash' AND t.value = ? AND "
    "v.current_stage != 'Deleted_Internal'"
)


class AliasView(Protocol):
    """One registered model as the registry holds it now."""

    def aliases(self) -> dict[str, str]:
        """alias -> version number, of every alias the model has (none: an empty dict)."""
        ...

    def version_of(self, full_config_hash: str) -> str | None:
        """The version registered for ``full_config_hash`` (None: the registry holds none)."""
        ...


def open_view(uri: str, model_name: str, deadline: float | None = None) -> AliasView | None:
    """The view of ``model_name`` in the registry at ``uri``; None for a ``sqlite:///`` file that does not exist.
    A server is asked whether it answers until ``deadline`` (``time.monotonic()``) at the latest.

    Raises:
        RegistryError: the registry cannot be read (unreachable, locked, damaged).
    """
    path = sqlite_path(uri)
    if path:
        return _SqliteView(path, model_name) if os.path.isfile(path) else None
    return _ClientView(uri, model_name, None if deadline is None else deadline - time.monotonic())


class _SqliteView:
    def __init__(self, path: str, model_name: str) -> None:
        self.path, self.model_name = path, model_name

    def _rows(self, sql: str, parameters: tuple[str, ...]) -> list[tuple[object, ...]]:
        try:
            # mode=rw, not ro: a writer killed mid-transaction (an alias move, a registration) leaves a hot journal
            # that only a connection able to write rolls back; read-only, every later early exit failed on it
            # and the alias stayed stale. The rollback restores what was committed; rw never creates the file.
            connection = sqlite3.connect(f"file:{quote(os.path.abspath(self.path))}?mode=rw", uri=True, timeout=5)
            try:
                return connection.execute(sql, parameters).fetchall()
            finally:
                connection.close()
        except sqlite3.Error as exc:
            raise RegistryError(f"the MLflow database {self.path} cannot be read: {first_line(exc)}") from exc

    def aliases(self) -> dict[str, str]:
        return {str(alias): str(version) for alias, version in self._rows(_ALIASES, (self.model_name,))}

    def version_of(self, full_config_hash: str) -> str | None:
        rows = self._rows(_VERSION_OF_HASH, (self.model_name, full_config_hash))
        return None if not rows or rows[0][0] is None else str(rows[0][0])


class _ClientView:
    def __init__(self, uri: str, model_name: str, within: float | None = None) -> None:
        require_answer(uri, within)  # an absent server fails in seconds, not after MLflow's minutes of retries
        self.uri, self.model_name = uri, model_name
        self.found: dict[str, str | None] = {}  # head and promoted are often one version: asked for once
        self.where = f"MLflow at {public_tracking_uri(uri)}, model {model_name!r}"
        with registry_errors(self.where):
            from mlflow import MlflowClient

            self.client = MlflowClient(tracking_uri=uri, registry_uri=uri)

    def aliases(self) -> dict[str, str]:
        from mlflow.exceptions import MlflowException

        with registry_errors(self.where):
            try:
                model = self.client.get_registered_model(self.model_name)
            except MlflowException as exc:
                if exc.error_code != "RESOURCE_DOES_NOT_EXIST":
                    raise
                return {}  # never registered here: no alias to compare
        return {str(alias): str(version) for alias, version in dict(model.aliases).items()}

    def version_of(self, full_config_hash: str) -> str | None:
        from ml8s.registry.query import versions_of_hash

        # Never the number a run's manifest recorded: a registry recreated or restored since (REGISTRY_REPLACED)
        # gives that number to another run's version, or none (deleted)
        if full_config_hash not in self.found:
            with registry_errors(self.where):
                found = versions_of_hash(self.client, self.model_name, full_config_hash)
            self.found[full_config_hash] = str(found[0].version) if found else None
        return self.found[full_config_hash]
