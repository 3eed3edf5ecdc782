"""Artifact stores: ``open_store(uri)`` picks the backend from the URI scheme."""

from __future__ import annotations

from ml8s.errors import ConfigError
from ml8s.store.base import ObjectInfo, Store, Versioned, WriteResult
from ml8s.store.local import LocalStore
from ml8s.store.s3 import S3Store

__all__ = ["LocalStore", "ObjectInfo", "S3Store", "Store", "Versioned", "WriteResult", "open_store"]


def open_store(uri: str) -> Store:
    """The store rooted at ``uri`` (``file://`` path or ``s3://bucket/prefix``)."""
    if uri.startswith("file://"):
        return LocalStore(uri[len("file://") :])
    if uri.startswith("s3://"):
        return S3Store(uri)
    raise ConfigError(f"unsupported store URI {uri!r}; expected file:///path or s3://bucket/prefix")
