"""The one parser of root URIs (DATA_ROOT, PIPELINE_ROOT_URI, ``--root``): a local path, ``file://`` or ``s3://``.

Normalization (SPEC §2, step 1): a local path, bare or after ``file://``, becomes ``file://`` + its absolute,
normalized path (``.`` and ``..`` folded, symlinks not resolved, no trailing slash); an ``s3://`` URI loses its
trailing slashes. A valid input normalizes exactly as it always has, so no RUN_ID changes; only
``file://localhost/PATH`` is now ``/PATH`` (it was read as ./localhost/PATH, which it never named), and a path
starting with exactly two slashes (``//data``, ``file:////data``) is now ``/data``: ``os.path.normpath`` keeps two
leading slashes (POSIX lets a system give them a meaning of their own; Linux and macOS read one), so the same
folder had two spellings and two RUN_IDs. The canonical spelling's RUN_ID is unchanged.

What is rejected, each with a :class:`~ml8s.errors.RootUriError` naming the variable: an empty value; a NUL
character (a workflow input can carry one); another scheme (``gs://``, ``http://``, ``S3://``); ``s3:`` or
``file:`` without the two slashes; a ``file://`` URI naming a host other than ``localhost``
(``file://otherhost/data``, or ``file://data/x`` whose host is ``data``: it was read as ./data/x); ``s3://``
without a bucket or with an invalid bucket name (credentials, ``s3://KEY:SECRET@bucket``, refused and not
echoed); an S3 prefix with empty (``//``), ``.`` or ``..`` segments (S3 keeps them literally, so ``a/../b``
would be a different prefix than it reads); a path starting with ``~`` (nothing here expands it, so it would
name a directory called ``~``). The store's own parser accepts what this one returns.

It also checks MLFLOW_TRACKING_URI (:func:`check_tracking_uri`): only a registry that outlives the process
and that MLflow can register a model at.
"""

from __future__ import annotations

import os
import re
from typing import Literal
from urllib.parse import unquote, urlsplit, urlunsplit

from pydantic import BaseModel, ConfigDict

from ml8s.errors import RootUriError, TrackingUriError, without_credentials

_ROOT_SCHEMES = "a local path, file:// or s3://"
_FILE_URI_EXPECTED = "file:///ABSOLUTE/PATH (three slashes; file://localhost/ABSOLUTE/PATH), or a bare path"
# A scheme followed by ":": only a URI when the scheme is one of ours or a slash follows ("gs:/x", "gs://x");
# "v2:data" stays a relative path, as it always was.
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*):")
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9]$")
_IPV4 = re.compile(r"^[0-9]{1,3}(\.[0-9]{1,3}){3}$")
_BUCKET_RESERVED_PREFIXES = ("xn--", "sthree-")
_BUCKET_RESERVED_SUFFIXES = ("-s3alias", "--ol-s3")


class RootUri(BaseModel):
    """A parsed, normalized root.

    ``path`` is the absolute local path (``file``) or the key prefix without leading or trailing slashes
    (``s3``, "" for the bucket's top); ``bucket`` is "" for ``file``; ``uri`` is the normalized string.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    scheme: Literal["file", "s3"]
    bucket: str
    path: str
    uri: str


def parse_root_uri(text: str, *, variable: str) -> RootUri:
    """Parse and normalize a root given as ``variable`` (named in every error).

    Args:
        text: the value as given; surrounding whitespace is ignored.
        variable: the variable or flag it came from, e.g. ``DATA_ROOT`` or ``--root``.

    Returns:
        The parsed root; ``.uri`` is the normalized string.

    Raises:
        RootUriError: the value is empty or malformed (see the module docstring).

    Example:
        >>> parse_root_uri("s3://bucket/runs/", variable="PIPELINE_ROOT_URI").uri
        's3://bucket/runs'
    """
    value = text.strip()
    if value == "":
        raise RootUriError(variable, text, "is empty", _ROOT_SCHEMES)
    if "\x00" in value:  # a workflow input can carry one (JSON "\u0000"); os.stat's ValueError was a bug report
        raise RootUriError(variable, text, "holds a NUL character", "a path or S3 URI without one")
    if value.startswith("s3://"):
        return _s3(value[len("s3://") :], variable, text)
    if value.startswith("file://"):
        return _local(_file_uri_path(value[len("file://") :], variable, text), variable, text)
    scheme = _SCHEME.match(value)
    if scheme is not None:
        name, rest = scheme.group(1), value[scheme.end() :]
        if name.lower() == "s3" and not rest.startswith("//"):
            raise RootUriError(variable, text, "is not an S3 URI", "s3://BUCKET/PREFIX (two slashes after s3:)")
        if name.lower() == "file" and not rest.startswith("//"):
            raise RootUriError(variable, text, "is not a file URI", "file:// followed by a path, or a bare path")
        if rest.startswith("/"):
            raise RootUriError(variable, text, "has an unsupported scheme", _ROOT_SCHEMES)
    return _local(value, variable, text)


def _file_uri_path(rest: str, variable: str, text: str) -> str:
    """The path of a file URI after its ``file://``: its authority (up to the first "/") names a host, which
    must be empty or ``localhost``. "file://otherhost/data" was read as the relative path otherhost/data under
    the working directory, and "file://data/x" as ./data/x: another directory than the URI names, silently."""
    host, slash, path = rest.partition("/")
    if host == "" or host.startswith("~"):  # "~" gets _local's own refusal
        return rest
    if host.lower() == "localhost":
        return "/" + path if slash else ""  # "": _local's "names no path"
    shown = "a host with credentials (not shown)" if "@" in host else f"the host {host!r}"
    raise RootUriError(variable, text, f"names {shown}", _FILE_URI_EXPECTED)


def same_local_folder(first: str, second: str) -> bool:
    """Whether two ``file://`` URIs name one existing folder by two names (a symbolic link on the way, a second
    mount point): records spell the root as the run was given it, a later run or verifier may spell it otherwise."""
    if not (first.startswith("file://") and second.startswith("file://")):
        return False
    try:
        return os.path.samefile(first.removeprefix("file://"), second.removeprefix("file://"))
    except (OSError, ValueError):
        return False


def _local(path: str, variable: str, text: str) -> RootUri:
    if path == "":
        raise RootUriError(variable, text, "names no path", "file:// followed by a path, or a bare path")
    if path.startswith("~"):
        raise RootUriError(variable, text, "starts with ~", "an absolute or relative path; ~ is not expanded")
    absolute = os.path.normpath(os.path.abspath(path))
    if absolute.startswith("//"):  # normpath keeps exactly two (POSIX leaves them to the system; Linux: one)
        absolute = "/" + absolute.lstrip("/")
    return RootUri(scheme="file", bucket="", path=absolute, uri="file://" + absolute)


def _s3(rest: str, variable: str, text: str) -> RootUri:
    bucket, _, prefix = rest.rstrip("/").partition("/")
    if bucket == "":
        raise RootUriError(variable, text, "names no bucket", "s3://BUCKET/PREFIX")
    if ":" in bucket or "@" in bucket:
        # user:password@ before the bucket; a secret key may hold a "/", which ends the authority early, so
        # neither the value nor the bucket is shown
        raise RootUriError(
            variable,
            "s3://…",
            "holds credentials or another ':' or '@' before its bucket (not shown)",
            "s3://BUCKET/PREFIX, with credentials in AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY",
        )
    if not _valid_bucket(bucket):
        raise RootUriError(
            variable,
            text,
            f"names an invalid bucket {bucket!r}",
            "a bucket name of 3-63 lowercase letters, digits, dots or hyphens that starts and ends with a letter "
            "or digit (no '..', not an IP address)",
        )
    # Trailing slashes after a ":" were always kept ("s3://b/k://" named the prefix "k://", an empty segment):
    # refused, rather than silently naming another prefix than before.
    if prefix and (any(segment in ("", ".", "..") for segment in prefix.split("/")) or _colon_slashes(rest)):
        raise RootUriError(
            variable, text, "has an empty, '.' or '..' segment in its prefix", "a prefix of non-empty segments"
        )
    return RootUri(
        scheme="s3", bucket=bucket, path=prefix, uri=f"s3://{bucket}/{prefix}" if prefix else f"s3://{bucket}"
    )


def _colon_slashes(rest: str) -> bool:
    stripped = rest.rstrip("/")
    return stripped != rest and stripped.endswith(":")


def _valid_bucket(name: str) -> bool:
    return (
        _BUCKET.fullmatch(name) is not None
        and ".." not in name
        and _IPV4.fullmatch(name) is None
        and not name.startswith(_BUCKET_RESERVED_PREFIXES)
        and not name.endswith(_BUCKET_RESERVED_SUFFIXES)
    )


_TRACKING_EXPECTED = (
    "sqlite:///PATH (sqlite:////abs/path/mlflow.db), http(s)://HOST, databricks, or a postgresql, mysql or mssql "
    "database URL"
)
_REGISTRY_SCHEMES = ("databricks", "databricks-uc", "http", "https", "uc")
_DATABASE_ENGINES = ("mssql", "mysql", "postgresql", "sqlite")


def check_tracking_uri(uri: str, variable: str = "MLFLOW_TRACKING_URI") -> str:
    """``uri`` if a run can register a model there that an auditor can read back later, else TrackingUriError.

    Checked at settings time, before any work: MLflow itself would accept an in-memory SQLite database
    (``sqlite://``, ``sqlite:///``, ``sqlite:///:memory:``) and lose the registered model, and a manifest
    would then record a model version that never lasted; a scheme without a model registry (``ftp://``,
    ``s3://``) or MLflow's refused file store would fail only at registration, after training.

    Raises:
        TrackingUriError: in-memory SQLite, MLflow's file store without MLFLOW_ALLOW_FILE_STORE, or a
            scheme MLflow (or an installed plug-in) has no model registry for.
    """
    if uri in _REGISTRY_SCHEMES:  # MLflow takes these bare names as the scheme itself ("databricks")
        return uri
    found = _SCHEME.match(uri)
    scheme = found.group(1).lower() if found and len(found.group(1)) > 1 else ""  # "C:" is a drive, not a scheme
    engine = scheme.split("+", 1)[0]
    if engine in _DATABASE_ENGINES and found and found.group(1) != scheme:
        # SQLAlchemy's dialect names are case-sensitive: "SQLITE:" failed at registration, after training
        problem = f"has scheme {found.group(1)!r}; a database URL's scheme is lower-case ({scheme!r})"
        raise TrackingUriError(variable, uri, problem, _TRACKING_EXPECTED)
    if engine == "sqlite":
        if not sqlite_path(uri):
            problem = "is an in-memory SQLite database: a model registered there is gone when the process ends"
            raise TrackingUriError(variable, uri, problem, _TRACKING_EXPECTED)
        return uri
    if scheme in ("http", "https"):
        _check_server_url(uri, variable)
        return uri
    if engine in _DATABASE_ENGINES or scheme in _REGISTRY_SCHEMES:
        return uri
    if scheme in ("", "file"):
        # MLflow reads this variable from the process environment itself; so does this check
        if os.environ.get("MLFLOW_ALLOW_FILE_STORE", "").strip().lower() in ("1", "true"):
            return uri
        problem = "is MLflow's file store, which this MLflow refuses unless MLFLOW_ALLOW_FILE_STORE=true"
        raise TrackingUriError(variable, uri, problem, _TRACKING_EXPECTED)
    if scheme in _registry_plugins():
        return uri
    raise TrackingUriError(
        variable, uri, f"has scheme {scheme!r}, for which MLflow has no model registry", _TRACKING_EXPECTED
    )


def _check_server_url(uri: str, variable: str) -> None:
    """An MLflow server's URL names a host and a valid port: 'https://[::1' was an INTERNAL_ERROR (urlsplit's
    ValueError) once the run asked the server, and 'http://' or a port of 99999 an unanswered server."""
    try:
        parts = urlsplit(uri)
        parts.port  # noqa: B018  (it parses the port: ValueError when out of range or not a number)
    except ValueError as exc:
        raise TrackingUriError(variable, uri, f"is no URL ({exc})", _TRACKING_EXPECTED) from None
    if not parts.hostname:
        raise TrackingUriError(variable, uri, "names no host", _TRACKING_EXPECTED)


def _registry_plugins() -> list[str]:
    """Schemes that installed MLflow plug-ins add a model registry for (entry points MLflow itself reads)."""
    from importlib.metadata import entry_points

    return sorted(point.name for point in entry_points(group="mlflow.model_registry_store"))


def public_tracking_uri(uri: str) -> str:
    """``uri`` without credentials, as a manifest (read by many) records it.

    An ``http(s)://`` URI loses its whole userinfo (MLflow reads MLFLOW_TRACKING_USERNAME/PASSWORD or
    MLFLOW_TRACKING_TOKEN instead); any other URI with a host (``postgresql://user:pw@host/db``) loses the
    password and keeps the user name. Anything else is returned unchanged.

    Example:
        >>> public_tracking_uri("https://bot:s3cret@mlflow.example.com:5000/")
        'https://mlflow.example.com:5000/'
        >>> public_tracking_uri("postgresql://ml:pw@db/mlflow")
        'postgresql://ml@db/mlflow'
    """
    public = without_credentials(uri)  # the one rule, shared with every error message and log line
    # a URI that lost credentials is written as urllib writes it (a lowercase scheme), as manifests recorded it
    if public == uri:
        return uri
    try:
        return urlunsplit(urlsplit(public))
    except ValueError:  # no URL urllib can parse ('https://[::1'): still without its credentials
        return public


def sqlite_path(uri: str) -> str:
    """The database file of a ``sqlite:///`` (or ``sqlite+driver:///``) tracking URI, or ``""``: another
    backend, or an in-memory database (no path, ``:memory:``, ``file::memory:``, ``mode=memory``)."""
    scheme, _, rest = uri.partition(":")
    if scheme.lower().split("+", 1)[0] != "sqlite" or not rest.startswith("///"):
        return ""
    path, _, query = rest[3:].partition("?")
    in_memory = path in ("", ":memory:") or path.startswith("file::memory:") or "mode=memory" in query
    # SQLAlchemy, so MLflow, opens the percent-decoded path (sqlite:////srv/my%20runs/m.db is "/srv/my runs/m.db")
    return "" if in_memory else unquote(path)
