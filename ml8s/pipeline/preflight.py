"""Checks of the places a run will write, made at bootstrap so a bad one fails before the first write.

Only local pipeline roots are probed, and the probe writes nothing: ``os.access`` on the root (or on
its nearest existing ancestor, which the first write will create it under) and on the run and MLflow
paths that already exist. It answers for this process's user and for read-only mounts. An S3 root is
not probed: a write there needs credentials the first write will exercise anyway.
"""

from __future__ import annotations

import errno
import os

from ml8s.contract import layout
from ml8s.errors import ConfigError
from ml8s.identity.settings import PlatformSettings
from ml8s.identity.uri import sqlite_path  # not ml8s.registry's: that package imports MLflow's model logging


def check_root_shape(settings: PlatformSettings) -> str | None:
    """Raise :class:`ConfigError` naming PIPELINE_ROOT_URI when a local root is no directory and none can be
    created there (a file, a symlink loop); the nearest existing directory, or None for an S3 root.

    Every run needs this, a read-only one too (a gate hit reads the root): it is checked at bootstrap."""
    uri = settings.pipeline_root_uri
    if not uri.startswith("file://"):
        return None
    existing = uri[len("file://") :]
    while not os.path.lexists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        raise ConfigError(
            f"PIPELINE_ROOT_URI={uri!r}: {existing} is {_kind(existing)}, expected a directory "
            "(or a path one can be created at)"
        )
    return existing


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


def _kind(path: str) -> str:
    """What stands at ``path`` instead of a directory, in the words of the error."""
    if os.path.islink(path) and not os.path.exists(path):
        try:
            os.stat(path)
        except OSError as exc:
            return "a symlink loop" if exc.errno == errno.ELOOP else "a broken symlink"
    return "a file" if os.path.isfile(path) else "not a directory"


def _writable_dir(variable: str, uri: str, path: str) -> None:
    if not os.path.lexists(path):
        return
    if not os.path.isdir(path):
        raise ConfigError(f"{variable}={uri!r}: {path} is {_kind(path)}, expected a directory")
    if not os.access(path, os.W_OK | os.X_OK):
        raise ConfigError(
            f"{variable}={uri!r}: {path} is not writable by this process (uid {os.geteuid()}) or is on a read-only "
            "file system; expected a writable directory"
        )
