"""Small helpers shared by the chain modules: hashes, timestamps and a follower's state files."""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import re
from collections.abc import Callable, Iterable

from ml8s.errors import ConfigError
from ml8s.output_files import replace_file
from ml8s.store import LocalStore, ObjectInfo, Store, _walk

HEX64 = re.compile(r"^[0-9a-f]{64}$")


CHUNK = 8 * 1024 * 1024


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: str) -> tuple[str, int]:
    """(sha256 hex, size) of a local file, read in chunks: memory does not grow with the file."""
    digest, size = hashlib.sha256(), 0
    with open(path, "rb") as handle:
        while chunk := handle.read(CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return digest.hexdigest(), size


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


def prune_empty_dirs(
    store: Store,
    prefix: str,
    *,
    older_than: float | None = None,
    include_base: bool = False,
    dry_run: bool = False,
    since: Callable[[ObjectInfo], float] | None = None,
) -> list[str]:
    """Remove empty directories under ``prefix`` of a local store (deepest first); the keys removed.

    Object stores have no directories, but the local backend creates them on write and leaves them when
    the files go, so a loser's rollback would leave ``payload/`` behind where no listing shows it.
    ``older_than``: only directories last changed before this time by the filesystem's clock (mtime or
    ctime, whichever is later: a commit may be creating files), never through a symbolic link.
    ``dry_run``: remove nothing, return the keys a real run would remove now (GC's dry run reports them).
    ``since``: when a directory (listed as ``{key}/``, size 0, its mtime) is aged from, instead of that time
    (GC's first sightings, ml8s.store.sightings: a ``chmod -R`` moves ctime, a clock ahead sets a future mtime).
    """
    if not isinstance(store, LocalStore) or store.irregular(prefix):
        return []  # a link on the way (or under it) could lead the walk elsewhere: tidy nothing
    base = os.path.join(store.root, *prefix.split("/"))
    removed: list[str] = []
    for directory, subdirs, files in sorted(os.walk(base), key=lambda entry: entry[0], reverse=True):
        if directory == base and not include_base:
            continue
        # a dry run takes no directory that holds one: a real run's rmdir of it would stamp this one with the
        # filesystem's time now (no local clock: it may be set back), which ``older_than`` never reaches. One
        # that holds a file is never emptied here (only directories go): no sighting of it is needed
        if files or (dry_run and subdirs):
            continue
        key = os.path.relpath(directory, store.root).replace(os.sep, "/")
        try:
            info = os.lstat(directory)
            if older_than is not None and _aged_from(key, info, since) >= older_than:
                continue
            if not dry_run:
                os.rmdir(directory)  # fails unless empty: a concurrent writer's file keeps it
        except OSError:
            continue
        removed.append(key)
    return removed


def _aged_from(key: str, info: os.stat_result, since: Callable[[ObjectInfo], float] | None) -> float:
    listed = ObjectInfo(key=f"{key}/", size=0, mtime=info.st_mtime, changed=_walk.changed(info))
    return listed.changed_at if since is None else since(listed)


def save_state(path: str, data: bytes, what: str) -> None:
    """Replace ``path`` with ``data`` (ml8s.output_files.replace_file: beside it, fsync, rename, the directory
    fsynced): a crash leaves the old state or the new.

    Raises:
        ConfigError: it cannot be written (a full disk, a read-only directory); the old state is kept.
    """

    def fail(reason: str) -> ConfigError:
        # A named error: a polling follower says so and keeps serving; the old state stays a valid lower bound
        return ConfigError(f"cannot save the {what} {path}: {reason}; expected a writable directory with free space")

    replace_file(path, data, 0o644, fail)
