"""Artifact stores: ``open_store(uri)`` picks the backend from the URI scheme."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from ml8s.errors import ConfigError
from ml8s.store._files import StagedWriter, fsync_dir
from ml8s.store._safe import open_regular, read_regular
from ml8s.store.base import ObjectInfo, Store, Upload, Versioned, WriteResult
from ml8s.store.local import LocalStore
from ml8s.text import quoted

if TYPE_CHECKING:
    from ml8s.store.s3 import S3Store

__all__ = [
    "LocalStore",
    "ObjectInfo",
    "S3Store",
    "StagedWriter",
    "Store",
    "Upload",
    "Versioned",
    "WriteResult",
    "fsync_dir",
    "open_regular",
    "open_store",
    "read_regular",
]


def __getattr__(name: str) -> object:
    # The S3 backend (boto3, botocore, dateutil: a fifth of a gate-hit run's imports) on first use only.
    if name == "S3Store":
        return importlib.import_module("ml8s.store.s3").S3Store
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def open_store(uri: str) -> Store:
    """The store rooted at ``uri`` (``file://`` path or ``s3://bucket/prefix``), as ``parse_root_uri`` normalizes
    it: a file URI without its third slash (``file://host/x``) names a host, not ./host/x, and is refused."""
    if uri.startswith("file:///"):
        return LocalStore(uri[len("file://") :])
    if uri.startswith("s3://"):
        from ml8s.store.s3 import S3Store

        return S3Store(uri)
    raise ConfigError(f"unsupported store URI {quoted(uri)}; expected file:///path or s3://bucket/prefix")
