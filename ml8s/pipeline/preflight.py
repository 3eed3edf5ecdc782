"""Checks of the places a run will write, made at bootstrap so a bad one fails before the first write.

An MLflow server named by an ``http(s)://`` MLFLOW_TRACKING_URI is asked once whether it answers at all
(:func:`check_tracking_reachable`), before anything is trained.

Only local pipeline roots are probed, and the probe writes nothing: ``os.access`` on the root (or on
its nearest existing ancestor, which the first write will create it under) and on the run and MLflow
paths that already exist. It answers for this process's user and for read-only mounts. An S3 root is
not probed: a write there needs credentials the first write will exercise anyway.
"""

from __future__ import annotations

import os
import sqlite3
from urllib.parse import quote

from ml8s import log
from ml8s.contract import layout
from ml8s.errors import ConfigError, RegistryError
from ml8s.identity.settings import PlatformSettings
from ml8s.identity.uri import public_tracking_uri, sqlite_path  # not ml8s.registry's: it imports MLflow's logging
from ml8s.mlflow_probe import is_tracking_server, mlflow_unanswered, probe_bound
from ml8s.store.root_shape import check_local_root, creatable_directory, kind_of
from ml8s.text import quoted

_SQLITE_MAGIC = b"SQLite format 3\x00"  # the first 16 bytes of every SQLite 3 database file
# ml8s.registry.schema.TEMPLATE_ENV, named here: importing ml8s.registry would cost every bootstrap 0.3 s
_TEMPLATE_ENV = "ML8S_MLFLOW_SCHEMA_TEMPLATE"
# SQLITE_CORRUPT and SQLITE_NOTADB: what SQLite answers for a file it cannot read as a database, unlike a busy
# or locked one (another writer) or a hot journal a read-only connection may not roll back, which are no damage.
_DAMAGED = (11, 26)


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
    staging = os.path.join(root, layout.TMP_DIR)
    if os.path.islink(staging):  # the store refuses to stage through it: at the marker, after the whole run trained
        raise ConfigError(
            f"PIPELINE_ROOT_URI={quoted(uri)}: {staging} is a symbolic link; expected the store's staging directory "
            "(checked before training: nothing was written): check what it is and remove it by hand"
        )
    for path in (existing, os.path.join(root, layout.RUNS_DIR), staging):
        _writable_dir("PIPELINE_ROOT_URI", uri, path)
    database = sqlite_path(settings.mlflow_tracking_uri)
    if database and os.path.lexists(database):
        _sqlite_database(settings.mlflow_tracking_uri, database)
    elif database:
        _new_database_folder(settings.mlflow_tracking_uri, database)
    if database and (not os.path.lexists(database) or os.path.getsize(database) == 0):
        _schema_template(settings.mlflow_tracking_uri)


def _new_database_folder(uri: str, database: str) -> None:
    """A database to be created needs a directory, or a path one can be made at: under a file (a typo in the
    path) it used to fail at registration, after the whole run had trained."""
    existing = creatable_directory(
        os.path.dirname(os.path.abspath(database)),
        f"MLFLOW_TRACKING_URI={uri!r}",
        "an MLflow SQLite database file in a directory, or a path one can be created at (checked before training: "
        "nothing was written)",
    )
    _writable_dir("MLFLOW_TRACKING_URI", uri, existing)


def _schema_template(uri: str) -> None:
    """The template a new local MLflow database is copied from must be there: it used to be found missing at
    registration, after the whole run had trained. (Its schema is checked when it is copied.)"""
    template = os.environ.get(_TEMPLATE_ENV, "")
    if not template or (os.path.isfile(template) and os.access(template, os.R_OK)):
        return
    if not os.path.lexists(template):
        what = "does not exist"
    elif os.path.isdir(template):
        what = "is a directory"
    else:
        what = f"is {kind_of(template)} this process cannot read (uid {os.geteuid()})"
    raise ConfigError(
        f"{_TEMPLATE_ENV}={template} {what}; expected an empty MLflow database to create {uri} from, or unset it "
        "(checked before training: nothing was written)"
    )


def _sqlite_database(uri: str, database: str) -> None:
    """An existing MLflow database must be a writable SQLite file (an empty one is a new database): a directory
    or another file there used to be found at registration, after the whole run had trained."""
    if not os.path.isfile(database):
        raise ConfigError(
            f"MLFLOW_TRACKING_URI={uri!r}: {database} is "
            f"{'a directory' if os.path.isdir(database) else kind_of(database)}; expected an MLflow SQLite database "
            "file, or no file there yet"
        )
    if not os.access(database, os.R_OK | os.W_OK):
        raise ConfigError(
            f"MLFLOW_TRACKING_URI={uri!r}: {database} is not writable by this process "
            f"(uid {os.geteuid()}); expected a writable MLflow database"
        )
    with open(database, "rb") as handle:
        start = handle.read(len(_SQLITE_MAGIC))
    if start and start != _SQLITE_MAGIC:
        raise ConfigError(
            f"MLFLOW_TRACKING_URI={uri!r}: {database} is not an SQLite database (it starts with {start[:8]!r}); "
            "expected an MLflow SQLite database file, or no file there yet (checked before training: nothing "
            "was written)"
        )
    if start:
        _readable_schema(uri, database)


def _readable_schema(uri: str, database: str) -> None:
    """A file with SQLite's header can still be no database (the header alone, pages overwritten or cut off):
    MLflow found it only at registration, after the run had trained. Reading the schema table (page 1 and the
    pages it names, not the whole file) finds that now; ``mode=ro`` so the check writes nothing."""
    try:
        connection = sqlite3.connect(f"file:{quote(os.path.abspath(database))}?mode=ro", uri=True, timeout=0)
        try:
            connection.execute("SELECT count(*) FROM sqlite_master").fetchone()
        finally:
            connection.close()
    except sqlite3.DatabaseError as exc:
        if (exc.sqlite_errorcode & 0xFF) not in _DAMAGED:
            return  # registration opens it read-write, under its lock, and names what it finds then
        raise ConfigError(
            f"MLFLOW_TRACKING_URI={uri!r}: {database} is not a readable SQLite database ({exc}); expected an MLflow "
            "SQLite database file, or no file there yet (checked before training: nothing was written)"
        ) from exc


def check_tracking_reachable(settings: PlatformSettings, timeout_s: float | None = None) -> None:
    """Raise :class:`RegistryError` when an ``http(s)://`` MLFLOW_TRACKING_URI does not answer, before training.

    MLflow's client waits up to MLFLOW_HTTP_REQUEST_TIMEOUT (120 s) for each request and retries it up to
    seven times: an absent or hung server would be found only after training, many minutes later and without
    a word meanwhile. :func:`mlflow_unanswered` asks it once first, for up to ``timeout_s``, else MLflow's own
    MLFLOW_HTTP_REQUEST_TIMEOUT where the user set it, else 15 s. Other tracking URIs are not probed: a
    database is opened at registration, a local file is checked by :func:`check_writable_root`.
    """
    uri = settings.mlflow_tracking_uri
    if not is_tracking_server(uri):
        return
    bound = probe_bound() if timeout_s is None else timeout_s
    log.step_info("preflight", f"asking MLflow at {public_tracking_uri(uri)} whether it answers (at most {bound:g} s)")
    if (why := mlflow_unanswered(uri, bound)) is not None:
        raise RegistryError(
            f"MLFLOW_TRACKING_URI={public_tracking_uri(uri)!r}: {why}; expected a reachable MLflow server "
            "(checked before training: nothing was written)"
        )


def _writable_dir(variable: str, uri: str, path: str) -> None:
    if not os.path.lexists(path):
        return
    if not os.path.isdir(path):
        raise ConfigError(f"{variable}={quoted(uri)}: {path} is {kind_of(path)}, expected a directory")
    if not os.access(path, os.W_OK | os.X_OK):
        raise ConfigError(
            f"{variable}={quoted(uri)}: {path} is not writable by this process (uid {os.geteuid()}) or is on a "
            "read-only file system; expected a writable directory"
        )
