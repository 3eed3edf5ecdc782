"""Chain anchors published in MLflow's model registry: a place outside the artifact store to keep them.

``ml8s chain anchor --publish mlflow`` writes the signed anchor (its compact JSON, about 600 bytes;
registry tags take up to 100,000 characters) as the tag ``ml8s.anchor`` on

- every registered version of the head's run (the versions tagged with the head block's
  FULL_CONFIG_HASH), so the anchor sits beside the model it vouches for; and
- the registered model itself: the latest published anchor, which ``ml8s audit bundle`` embeds by
  default and ``--anchor mlflow:`` reads.

A published anchor is never replaced by an older one (a lower counter, or the same counter issued
earlier): a late publisher cannot roll the registry's anchor back. Who can write the registry can still
delete the tag; keep a second copy (a file, another bucket) where that matters.

Anchor references (``--anchor``): a file path, or ``mlflow:`` (the registered model MLFLOW_MODEL_NAME),
``mlflow:MODEL`` (its latest anchor) or ``mlflow:MODEL/VERSION`` (the anchor on that version).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict

from ml8s.chain import RECORD_MAX_BYTES, Anchor, read_anchor
from ml8s.errors import ConfigError, RegistryError
from ml8s.identity.settings import PlatformSettings
from ml8s.identity.uri import public_tracking_uri
from ml8s.mlflow_probe import require_answer
from ml8s.registry.confirm import missing_database, missing_driver
from ml8s.registry.query import versions_of_hash
from ml8s.store.operator_files import read_operator_file

if TYPE_CHECKING:
    from mlflow import MlflowClient

ANCHOR_TAG = "ml8s.anchor"
MLFLOW_SCHEME = "mlflow:"
_VERSION = re.compile(r"(.+)/([0-9]+)")


class PublishedAnchor(BaseModel):
    """Where ``publish_anchor`` put an anchor: the registered model and the versions tagged."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tracking_uri: str
    model_name: str
    model_versions: tuple[str, ...]


def publish_anchor(tracking_uri: str, model_name: str, anchor: Anchor, head_full_config_hash: str) -> PublishedAnchor:
    """Tag the head run's versions and the registered model with ``anchor`` (module docstring).

    Raises:
        RegistryError: MLflow cannot be reached, the model is not registered, or it holds a newer anchor.
    """
    from mlflow.exceptions import MlflowException

    client = _client(tracking_uri)
    value = anchor.model_dump_json()
    where = f"registered model {model_name!r} in MLflow at {tracking_uri}"
    try:
        current = client.get_registered_model(model_name).tags.get(ANCHOR_TAG)
        if current is not None and _newer(read_anchor(current.encode("utf-8"), where=where), anchor):
            raise RegistryError(f"{where} holds a newer anchor than this one: not replaced")
        versions = sorted(
            (str(v.version) for v in versions_of_hash(client, model_name, head_full_config_hash)), key=int
        )
        for version in versions:
            client.set_model_version_tag(model_name, version, ANCHOR_TAG, value)
        client.set_registered_model_tag(model_name, ANCHOR_TAG, value)
    except MlflowException as exc:
        raise RegistryError(f"{where}: cannot publish the anchor: {exc.message}") from exc
    except ConfigError as exc:
        raise RegistryError(f"{where}: its {ANCHOR_TAG} tag is no anchor ({exc.message}); remove it") from exc
    shown = public_tracking_uri(tracking_uri)  # printed by `ml8s chain anchor --publish`: never a password
    return PublishedAnchor(tracking_uri=shown, model_name=model_name, model_versions=tuple(versions))


def read_published(tracking_uri: str, model_name: str, version: str | None = None) -> Anchor:
    """The anchor on ``model_name`` (the latest published) or on one of its versions.

    Raises:
        RegistryError: MLflow cannot answer, or there is no such model, version or tag.
    """
    from mlflow.exceptions import MlflowException

    what = f"model {model_name!r}" + (f" version {version}" if version else "") + f" in MLflow at {tracking_uri}"
    try:
        client = _client(tracking_uri)  # MlflowClient opens a database here: its driver may be missing
        if version is None:
            tags = client.get_registered_model(model_name).tags
        else:
            tags = client.get_model_version(model_name, version).tags
    except MlflowException as exc:
        raise RegistryError(f"{what}: {exc.message}") from exc
    except ModuleNotFoundError as exc:
        raise RegistryError(f"{what}: {missing_driver(exc)}") from exc
    if ANCHOR_TAG not in tags:
        raise RegistryError(f"{what} has no {ANCHOR_TAG} tag: publish one with `ml8s chain anchor --publish mlflow`")
    return read_anchor(str(tags[ANCHOR_TAG]).encode("utf-8"), where=f"the {ANCHOR_TAG} tag of {what}")


def load_anchor(reference: str | None, settings: PlatformSettings) -> Anchor | None:
    """The anchor ``reference`` names (module docstring): a file, or ``mlflow:[MODEL[/VERSION]]``."""
    if reference is None:
        return None
    if reference.startswith(MLFLOW_SCHEME):
        name = reference[len(MLFLOW_SCHEME) :] or settings.mlflow_model_name
        match = _VERSION.fullmatch(name)
        model, version = (match.group(1), match.group(2)) if match else (name, None)
        return read_published(settings.mlflow_tracking_uri_for_registry(), model, version)
    data = read_operator_file(
        reference,
        setting="--anchor",
        expected="an anchor file or mlflow:[MODEL[/VERSION]]",
        max_bytes=RECORD_MAX_BYTES,
    )
    return read_anchor(data, where=f"--anchor {reference}")


def _newer(current: Anchor, candidate: Anchor) -> bool:
    """Whether the published ``current`` is newer than ``candidate`` (same chain: counter, then issue time)."""
    a, b = current.checkpoint, candidate.checkpoint
    return a.chain_name == b.chain_name and (a.counter, a.issued_at) > (b.counter, b.issued_at)


def _client(tracking_uri: str) -> MlflowClient:
    """A client of an existing registry: a ``sqlite:///`` file that does not exist is an error (opening it
    would create an empty database)."""
    from mlflow import MlflowClient

    if (path := missing_database(tracking_uri)) is not None:
        raise RegistryError(f"MLflow database {path} ({tracking_uri}) does not exist")
    require_answer(tracking_uri)
    return MlflowClient(tracking_uri=tracking_uri)
