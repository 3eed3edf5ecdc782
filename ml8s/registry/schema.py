"""A local MLflow database (``sqlite:///``) that exists is always a complete one.

MLflow creates its schema in place: its initial tables, then some fifty migrations, each stamped
separately. A process killed in between leaves a file whose tables and revision disagree, and every
later client fails on it (``table ... already exists``, "out-of-date database schema"), even
``mlflow db upgrade``. So ml8s creates the schema itself, before any MLflow client opens the file,
under the registration lock: in a temporary sqlite file beside the database (no fsync per migration:
a crash throws the file away), checked complete, fsynced, then renamed into place with
``os.replace``. A crash at any point leaves either no database or a complete one, and the next run
removes the dead creator's temporary file.

A database that is incomplete anyway (left by an older ml8s, or touched by hand) is never repaired
silently: :class:`~ml8s.errors.RegistrySchemaError` names the file, what is wrong with it, and the
exact fix. Creation and checks do what MLflow's own ``mlflow.store.db.utils`` does (its initial
tables, then alembic to the head revision of its migration scripts), with typed calls; MLflow is pinned.

Creating the schema runs every migration: about a second of CPU per new database. ``ML8S_MLFLOW_SCHEMA_TEMPLATE``
names an empty database to copy instead (where many fresh registries are made: a test session, a CI job);
the copy is checked like any database, complete and at alembic's head revision of this MLflow, and holding
no run and no model, before it is renamed into place, so a stale or used template is refused by name.
"""

from __future__ import annotations

import contextlib
import glob
import importlib
import logging
import os
import sqlite3
from typing import TYPE_CHECKING
from urllib.parse import quote

from ml8s.errors import RegistryError, RegistrySchemaError
from ml8s.identity.uri import sqlite_path

if TYPE_CHECKING:  # sqlalchemy takes half a second to import: only registration pays for it
    import sqlalchemy
    from alembic.config import Config

log = logging.getLogger(__name__)

CREATING_SUFFIX = ".creating-"
TEMPLATE_ENV = "ML8S_MLFLOW_SCHEMA_TEMPLATE"
_DATA_TABLES = ("experiments", "registered_models", "runs")


def first_line(error: BaseException) -> str:
    """The first line of an error (sqlalchemy appends the SQL statement and a link on lines of their own)."""
    return (str(error).strip().splitlines() or [type(error).__name__])[0]


def ensure_schema(uri: str) -> None:
    """Create the complete MLflow schema of a ``sqlite:///`` URI if its file is absent; check it if not.

    The caller holds the registration lock of the file (no other ml8s process creates it meanwhile).

    Raises:
        RegistrySchemaError: the file exists with an incomplete or out-of-date schema.
        RegistryError: the file is not a readable sqlite database, or the schema cannot be created.
    """
    path = sqlite_path(uri)
    if not path:
        return
    _remove_dead_attempts(path)
    if os.path.exists(path) and not _has_no_tables(path, uri):
        _check_complete(path, uri)
        return
    template = os.environ.get(TEMPLATE_ENV, "")
    if template:
        _copy_template(template, path, uri)
    else:
        _create(path, uri)


def check_schema(uri: str, busy_s: float = 5.0) -> None:
    """Check the existing database of a ``sqlite:///`` URI complete and at this MLflow's schema; never create it.
    ``busy_s``: the wait for another process's lock on it (sqlite's 5 s by default). For a client about to write
    into a database that registration did not just check: MLflow's client adds the tables it misses and runs its
    migrations in place on opening, so an older MLflow's database would be upgraded silently (and left
    half-upgraded by a kill), the repair :func:`ensure_schema` refuses to make.

    Raises:
        RegistrySchemaError: the file holds an incomplete, older or newer schema.
        RegistryError: the file is absent, or not a readable sqlite database.
    """
    path = sqlite_path(uri)
    if not path:
        return
    if not os.path.isfile(path):
        raise RegistryError(f"MLflow database {path} ({uri}) does not exist; expected the database to write into")
    _check_complete(path, uri, busy_s)


def create_template(path: str) -> None:
    """Create ``path``, an empty database of this MLflow's complete schema, for ``ML8S_MLFLOW_SCHEMA_TEMPLATE``.

    Raises:
        RegistryError: the schema cannot be created.
    """
    _create(path, "sqlite:///" + os.path.abspath(path))


def _copy_template(template: str, path: str, uri: str) -> None:
    """The database at ``path`` as a copy of ``template``, checked complete, current and empty before the rename."""
    import shutil

    import sqlalchemy

    tmp = f"{path}{CREATING_SUFFIX}{os.getpid()}"
    try:
        shutil.copyfile(template, tmp)
    except OSError as exc:
        raise RegistryError(
            f"{TEMPLATE_ENV}={template}: cannot copy it to create {uri}: {exc.strerror or exc}; expected an empty "
            "MLflow database, or unset it"
        ) from exc
    engine = _read_only(tmp)
    try:
        problems = _problems(engine)
        rows = _rows(engine)
    except sqlalchemy.exc.SQLAlchemyError as exc:
        problems, rows = [f"not a readable sqlite database ({first_line(exc.__cause__ or exc)})"], {}
    finally:
        engine.dispose()
    if any(rows.values()):
        held = ", ".join(f"{count} {table}" for table, count in sorted(rows.items()))
        problems.append(f"it is not empty ({held})")
    if problems:
        _remove_dead_attempts(path)
        raise RegistryError(
            f"{TEMPLATE_ENV}={template} cannot create {uri}: {'; '.join(problems)}; expected an empty database of "
            "this MLflow's schema (make it again, or unset the variable)"
        )
    _fsync(tmp, os.O_RDONLY)
    os.replace(tmp, path)
    _fsync(os.path.dirname(os.path.abspath(path)), os.O_RDONLY | os.O_DIRECTORY)


def _remove_dead_attempts(path: str) -> None:
    # Under the lock no creator is alive: what is left was a killed one's.
    for stale in sorted(glob.glob(glob.escape(path + CREATING_SUFFIX) + "*")):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(stale)


def _read_only(path: str, busy_s: float = 5.0) -> sqlalchemy.Engine:
    """An engine that cannot create the file, for checks that write nothing.

    Opened read-write (``mode=rw``), not read-only: a writer killed mid-transaction leaves a hot journal
    (``mlflow.db-journal``) that SQLite rolls back on the next open, and a read-only connection cannot,
    so it would fail ("attempt to write a readonly database") on every later run. The rollback restores
    the database as it was before the killed transaction; the checks themselves change nothing.
    """
    import sqlalchemy

    return sqlalchemy.create_engine(
        "sqlite://",
        creator=lambda: sqlite3.connect(f"file:{quote(os.path.abspath(path))}?mode=rw", uri=True, timeout=busy_s),
    )


def _has_no_tables(path: str, uri: str) -> bool:
    """An empty file (no table at all) holds nothing to lose: it is created again like an absent one."""
    import sqlalchemy

    engine = _read_only(path)
    try:
        return not sqlalchemy.inspect(engine).get_table_names()
    except sqlalchemy.exc.SQLAlchemyError as exc:
        raise RegistryError(
            f"MLflow database {path} ({uri}) cannot be read as sqlite: {first_line(exc.__cause__ or exc)}"
        ) from exc
    finally:
        engine.dispose()


def _problems(engine: sqlalchemy.Engine) -> list[str]:
    """What keeps the schema from being MLflow's current one: missing tables, another revision."""
    import sqlalchemy
    from alembic.migration import MigrationContext
    from alembic.script import ScriptDirectory
    from mlflow.store.db.base_sql_model import Base

    # MLflow registers its ORM tables on Base only when this module is imported (its own comment says so).
    importlib.import_module("mlflow.store.db.utils")
    tables = set(sqlalchemy.inspect(engine).get_table_names())
    missing = sorted(str(name) for name in set(Base.metadata.tables) - tables)
    with engine.connect() as connection:
        revision = MigrationContext.configure(connection).get_current_revision()
    heads = ScriptDirectory.from_config(_alembic_config("")).get_heads()
    problems = [f"missing tables {missing[:4]}{' ...' if len(missing) > 4 else ''}"] if missing else []
    if [revision] != list(heads):
        problems.append(f"schema revision {revision or 'none'}, expected {', '.join(heads)}")
    return problems


def _unknown_revision(engine: sqlalchemy.Engine) -> str:
    """The schema revision of a database this MLflow's migrations do not know (a newer MLflow wrote it), else ""."""
    from alembic.migration import MigrationContext
    from alembic.script import ScriptDirectory
    from alembic.util import CommandError

    with engine.connect() as connection:
        revision = MigrationContext.configure(connection).get_current_revision()
    if not revision:
        return ""
    try:
        ScriptDirectory.from_config(_alembic_config("")).get_revision(revision)
    except CommandError:  # alembic's ResolutionError, "No such revision or branch"
        return revision
    return ""


def _alembic_config(url: str) -> Config:
    """MLflow's migration scripts, as ``mlflow db upgrade`` runs them."""
    import mlflow
    from alembic.config import Config

    directory = os.path.join(os.path.dirname(mlflow.__file__), "store", "db_migrations")
    config = Config(os.path.join(directory, "alembic.ini"))
    config.set_main_option("script_location", directory)
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


def _check_complete(path: str, uri: str, busy_s: float = 5.0) -> None:
    import sqlalchemy

    engine = _read_only(path, busy_s)
    try:
        problems = _problems(engine)
        if not problems:
            return
        rows, newer = _rows(engine), _unknown_revision(engine)
    except sqlalchemy.exc.SQLAlchemyError as exc:
        raise RegistryError(
            f"MLflow database {path} ({uri}) cannot be read as sqlite: {first_line(exc.__cause__ or exc)}"
        ) from exc
    finally:
        engine.dispose()
    found = "; ".join(problems)
    if newer:  # `mlflow db upgrade` with this MLflow fails on it ("Can't locate revision"), and mv would hide data
        from mlflow import __version__

        raise RegistrySchemaError(
            f"MLflow database {path} ({uri}) was written by a newer MLflow than this one ({__version__}): its schema "
            f"revision {newer} is none this MLflow's migrations know ({found}), and it holds {rows['runs']} run(s) "
            f"and {rows['registered_models']} registered model(s); expected a database at this MLflow's schema: run "
            "ml8s with the MLflow version that wrote it, or point MLFLOW_TRACKING_URI at another database "
            "(`mlflow db upgrade` cannot take a database back to an older schema)"
        )
    if not rows["runs"] and not rows["registered_models"]:
        raise RegistrySchemaError(
            f"MLflow database {path} ({uri}) holds an incomplete schema ({found}): a process was killed while "
            "creating it (older ml8s versions created it in place). It holds no runs and no registered models, so "
            f"nothing is lost: stop the runs that use it, then `mv {path} {path}.incomplete` and run again "
            "(ml8s then creates a complete database)"
        )
    raise RegistrySchemaError(
        f"MLflow database {path} ({uri}) is not at this MLflow's schema ({found}) and holds {rows['runs']} run(s) "
        f"and {rows['registered_models']} registered model(s): stop the runs that use it, back it up "
        f"(`cp {path} {path}.backup`), then run `mlflow db upgrade {uri}`"
    )


def _rows(engine: sqlalchemy.Engine) -> dict[str, int]:
    import sqlalchemy

    tables = set(sqlalchemy.inspect(engine).get_table_names())
    counts = dict.fromkeys(_DATA_TABLES, 0)
    with engine.connect() as connection:
        for table in _DATA_TABLES:
            if table in tables:
                counts[table] = int(connection.execute(sqlalchemy.text(f"SELECT COUNT(*) FROM {table}")).scalar_one())
    return counts


def _create(path: str, uri: str) -> None:
    import sqlalchemy
    from alembic import command
    from mlflow.store.tracking.dbmodels.initial_models import Base as InitialBase

    directory = os.path.dirname(os.path.abspath(path))
    tmp = f"{path}{CREATING_SUFFIX}{os.getpid()}"
    engine = sqlalchemy.create_engine("sqlite:///" + quote(os.path.abspath(tmp)))  # a "%" in it is no escape
    # A crash discards the file, so nothing needs syncing until the one fsync before the rename.
    sqlalchemy.event.listen(engine, "connect", _unsynced)
    log.info("creating the MLflow schema of %s in %s, renamed into place when complete", uri, tmp)
    try:
        InitialBase.metadata.create_all(engine)
        config = _alembic_config(str(engine.url))
        with engine.begin() as connection:
            config.attributes["connection"] = connection  # migrations run on this engine (pragmas included)
            command.upgrade(config, "heads")
        problems = _problems(engine)
    except Exception as exc:  # MLflow and alembic raise their own types
        engine.dispose()
        _remove_dead_attempts(path)
        raise RegistryError(f"creating the MLflow schema of {uri} in {tmp} failed: {first_line(exc)}") from exc
    engine.dispose()
    if problems:
        _remove_dead_attempts(path)
        raise RegistryError(f"creating the MLflow schema of {uri} in {tmp} left it incomplete: {'; '.join(problems)}")
    _fsync(tmp, os.O_RDONLY)
    os.replace(tmp, path)
    _fsync(directory, os.O_RDONLY | os.O_DIRECTORY)


def _unsynced(connection: sqlite3.Connection, _record: object) -> None:
    connection.execute("PRAGMA synchronous=OFF")
    connection.execute("PRAGMA journal_mode=MEMORY")


def _fsync(path: str, flags: int) -> None:
    fd = os.open(path, flags)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
