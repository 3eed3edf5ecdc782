"""Checks of the places a run will write, made at bootstrap so a bad one fails before the first write.

Only local pipeline roots are probed, and the probe writes nothing: ``os.access`` on the root (or on
its nearest existing ancestor, which the first write will create it under) and on the run and MLflow
paths that already exist. It answers for this process's user and for read-only mounts. An S3 root is
not probed: a write there needs credentials the first write will exercise anyway.
"""

from __future__ import annotations

import os

from ml8s.contract import layout
from ml8s.errors import ConfigError
from ml8s.identity.settings import PlatformSettings
from ml8s.identity.uri import sqlite_path  # not ml8s.registry's: that package imports MLflow's model logging
from ml8s.store.root_shape import check_local_root, kind_of


def check_root_shape(settings: PlatformSettings) -> str | None:
    """Raise :class:`ConfigError` naming PIPELINE_ROOT_URI when a local root is no directory and none can be
    created there (a file, a symlink loop); the nearest existing directory, or None for an S3 root.

    Every run needs this, a read-only one too (a gate hit reads the root): it is checked at bootstrap."""
    return check_local_root(settings.pipeline_root_uri)


def check_writable_root(settings: PlatformSettings) -> None:
    """Raise :class:`ConfigError` naming PIPELINE_ROOT_URI (or MLFLOW_TRACKING_URI) when a run could not write."""
    existing = check_root_shape(settings)
    if existing is None:
        return
    uri = settings.pipeline_root_uri
    root = uri[len("file://") :]
    for path in (existing, os.path.join(root, layout.RUNS_DIR)):
        _writable_dir("PIPELINE_ROOT_URI", uri, path)
    database = sqlite_path(settings.mlflow_tracking_uri)
    if database and os.path.lexists(database) and not os.access(database, os.R_OK | os.W_OK):
        raise ConfigError(
            f"MLFLOW_TRACKING_URI={settings.mlflow_tracking_uri!r}: {database} is not writable by this process "
            f"(uid {os.geteuid()}); expected a writable MLflow database"
        )


def _writable_dir(variable: str, uri: str, path: str) -> None:
    if not os.path.lexists(path):
        return
    if not os.path.isdir(path):
        raise ConfigError(f"{variable}={uri!r}: {path} is {kind_of(path)}, expected a directory")
    if not os.access(path, os.W_OK | os.X_OK):
        raise ConfigError(
            f"{variable}={uri!r}: {path} is not writable by this process (uid {os.geteuid()}) or is on a read-only "
            "file system; expected a writable directory"
        )
