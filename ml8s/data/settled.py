"""DATA_QUIET_SECONDS: a partition of DATA_ROOT that a producer is still writing is left for a later run.

Data arrives as new top-level files or folders (partitions; docs/continuous.md). A run that took one while
it was being written (a file growing, a folder half uploaded) trained on part of it, and a warm start records
every file it trained on: the file that grew afterwards no longer matched, so every later warm start of the
lineage stopped with LINEAGE_DATA_CHANGED, forever (a committed version is never rewritten). A partition is
taken only once every file of it has been left unmodified for the quiet period; until then the run leaves it
out of its data, its fingerprint and its generations, as if it had not arrived yet. A partition an earlier
generation of the lineage holds stays in whatever its age (its files are checked to be the bytes recorded).
"""

from __future__ import annotations

import os
from collections.abc import Collection

from ml8s.data.fingerprint import Fingerprint
from ml8s.data.sources import restrict
from ml8s.errors import DataError, StoreError
from ml8s.store import open_store


def young_partitions(fingerprint: Fingerprint, quiet_seconds: int, now: float) -> frozenset[str]:
    """The partitions holding a file modified less than ``quiet_seconds`` before ``now`` (its listing's
    modification time: mtime on a disk, LastModified on S3). Called after the fingerprint was taken: a file
    written to since its bytes were hashed is young here."""
    if quiet_seconds <= 0:
        return frozenset()
    modified = _modified(fingerprint)
    if modified is None:
        return frozenset()
    return frozenset(
        partition(entry.relative_path)
        for entry in fingerprint.entries
        # a file gone since it was hashed is young: the next run sees what replaced it
        if now - modified.get(entry.relative_path, now) < quiet_seconds
    )


def leave_out(fingerprint: Fingerprint, partitions: Collection[str], quiet_seconds: int) -> Fingerprint:
    """The fingerprint without ``partitions`` (young ones, still being written).

    Raises:
        DataError: nothing is left: every partition of DATA_ROOT is still being written.
    """
    if not partitions:
        return fingerprint
    kept = [entry.relative_path for entry in fingerprint.entries if partition(entry.relative_path) not in partitions]
    if not kept:
        raise DataError(
            f"DATA_ROOT {fingerprint.data_root}: every top-level file or folder holds a file modified less than "
            f"DATA_QUIET_SECONDS={quiet_seconds} s ago ({', '.join(sorted(partitions)[:3])}): still being written; "
            "expected a partition left alone that long (run again later)"
        )
    return restrict(fingerprint, kept)


def partition(relative_path: str) -> str:
    """The top-level file or folder of DATA_ROOT a file belongs to: one generation of a lineage."""
    return relative_path.split("/", 1)[0]


def _modified(fingerprint: Fingerprint) -> dict[str, float] | None:
    """Each file's modification time by relative path (None: a single S3 object, written whole by its PUT)."""
    root = fingerprint.data_root
    if root.startswith("file://"):
        path = root[len("file://") :]
        single = os.path.isfile(path)
        times: dict[str, float] = {}
        for entry in fingerprint.entries:
            try:
                times[entry.relative_path] = os.stat(
                    path if single else os.path.join(path, entry.relative_path)
                ).st_mtime
            except OSError:
                continue  # gone since it was hashed: young
        return times
    try:
        listed = open_store(root).list("")
    except StoreError as exc:
        raise DataError(f"DATA_ROOT {root}: cannot list it for DATA_QUIET_SECONDS: {exc.message}") from exc
    return {info.key: info.mtime for info in listed} or None
