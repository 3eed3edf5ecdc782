"""``ml8s runs list``'s registry column: is each run's recorded registration in the registry it names?

A run records its MLflow run id and model version in manifest.json. After the MLflow database was deleted
(and recreated by a later run, which takes version 1 again) or replaced, that record names nothing, or
another run's version: the registration is *unconfirmed* (:mod:`ml8s.registry.confirm` says why).
MLflow is asked only about runs that recorded a registration, once per registry.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from ml8s.errors import RegistryError
from ml8s.identity.uri import public_tracking_uri
from ml8s.mlflow_probe import require_answer
from ml8s.registry.confirm import confirm_registration, missing_database, registry_errors

if TYPE_CHECKING:
    from mlflow import MlflowClient

CONFIRMED = "confirmed"


def registration_states(refs: Mapping[str, Mapping[str, object]], env: Mapping[str, str]) -> dict[str, str]:
    """For each run id, ``confirmed`` or ``unconfirmed: <why>``; ``refs`` are the manifests' ``mlflow`` objects."""
    from mlflow import MlflowClient

    clients: dict[str, MlflowClient] = {}
    unanswered: dict[str, str] = {}  # the state of every run of a server that gave no answer
    states: dict[str, str] = {}
    configured = env.get("MLFLOW_TRACKING_URI", "")
    for run_id, ref in sorted(refs.items()):
        recorded = str(ref.get("tracking_uri", ""))
        # the manifest records the URI without credentials; MLFLOW_TRACKING_URI may supply them
        uri = configured if configured and public_tracking_uri(configured) == recorded else recorded
        name, version, mlflow_run = (str(ref.get(k, "")) for k in ("model_name", "model_version", "mlflow_run_id"))
        if not uri:
            states[run_id] = "unconfirmed: manifest.json records no MLflow tracking URI"
            continue
        if (path := missing_database(uri)) is not None:
            states[run_id] = f"unconfirmed: MLflow database {path} does not exist"
            continue
        if uri in unanswered:
            states[run_id] = unanswered[uri]
            continue
        try:
            require_answer(uri)  # a hung server: seconds, once per server, not minutes of MLflow's retries per run
        except RegistryError as exc:
            states[run_id] = unanswered[uri] = f"unconfirmed: {exc}"
            continue
        try:
            with registry_errors(f"model {name!r} version {version} in MLflow at {recorded}"):
                client = clients.get(uri) or clients.setdefault(uri, MlflowClient(tracking_uri=uri))
                confirm_registration(client, recorded, name, version, mlflow_run)
                client.get_model_version(name, version)
        except RegistryError as exc:
            states[run_id] = f"unconfirmed: {exc}"
            continue
        states[run_id] = CONFIRMED
    return states
