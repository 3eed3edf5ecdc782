"""Small helpers shared by the chain modules: hashes and timestamps."""

from __future__ import annotations

import datetime as dt
import hashlib
import re
from collections.abc import Iterable

from ml8s.store import ObjectInfo, Store

HEX64 = re.compile(r"^[0-9a-f]{64}$")


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def content_hash(files: Iterable[tuple[str, str, int]]) -> str:
    """sha256 of the ``name:sha256:size`` tokens sorted by name, joined by ``|`` (the DATA_FINGERPRINT rule).

    It depends on the payload alone (no counter, time or committer), so the same payload gets the
    same content hash in every chain and every process.
    """
    tokens = sorted(f"{name}:{digest}:{size}" for name, digest, size in files)
    return sha256_hex("|".join(tokens).encode("utf-8"))


def utc_now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def rfc3339(moment: dt.datetime) -> str:
    """``2024-01-31T12:00:00.000000Z``: fixed width, so string order is time order."""
    return moment.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def list_objects(store: Store, prefix: str, attempts: int = 20) -> list[ObjectInfo]:
    """``store.list``, again when a file vanished mid-listing: LocalStore.list stats each file it walked,
    and a concurrent commit's rollback (or a put_if_absent's tmp file) may be gone by then."""
    for attempt in range(attempts):
        try:
            return store.list(prefix)
        except FileNotFoundError:
            if attempt == attempts - 1:
                raise
    raise AssertionError("unreachable")
