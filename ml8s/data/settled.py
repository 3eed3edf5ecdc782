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
from collections.abc import Mapping

from ml8s.data.fingerprint import Fingerprint
from ml8s.data.sources import restrict
from ml8s.errors import DataError, NothingNewError, StoreError
from ml8s.store import open_store


def young_partitions(fingerprint: Fingerprint, quiet_seconds: int, now: float) -> dict[str, float]:
    """The partitions holding a file modified less than ``quiet_seconds`` before ``now`` (:func:`_modified`: the
    later of mtime and ctime on a disk, LastModified on S3), each with the age of its newest file in seconds:
    negative where that time is after ``now`` (a clock ahead, the producer's or this machine's; such a file
    counts as being written until ``quiet_seconds`` after its time). Called after the fingerprint was taken: a
    file written to since its bytes were hashed is young here."""
    if quiet_seconds <= 0:
        return {}
    modified = _modified(fingerprint)
    if modified is None:
        return {}
    young: dict[str, float] = {}
    for entry in fingerprint.entries:
        # a file gone since it was hashed is young: the next run sees what replaced it
        age = now - modified.get(entry.relative_path, now)
        if age < quiet_seconds:
            key = partition(entry.relative_path)
            young[key] = min(age, young.get(key, age))
    return young


def why_young(age: float, quiet_seconds: int) -> str:
    """Why a partition whose newest file is ``age`` seconds old is left out (it ...). A time ahead of this
    machine's clock was told as 'modified less than N s ago (still being written)', whatever how far ahead: a file
    stamped a year ahead was left out for a year, and every run said to run again later."""
    if age < 0:
        return (
            f"holds a file modified {-age:.0f} s after this machine's time (a clock ahead, the producer's or this "
            f"one's; check both): it counts as still being written until DATA_QUIET_SECONDS={quiet_seconds} s "
            "after that time"
        )
    return f"holds a file modified less than DATA_QUIET_SECONDS={quiet_seconds} s ago (still being written)"


def leave_out(fingerprint: Fingerprint, young: Mapping[str, float], quiet_seconds: int) -> Fingerprint:
    """The fingerprint without the ``young`` partitions (:func:`young_partitions`: still being written).

    Raises:
        DataError: nothing is left: every partition of DATA_ROOT is still being written.
    """
    if not young:
        return fingerprint
    kept = [entry.relative_path for entry in fingerprint.entries if partition(entry.relative_path) not in young]
    if not kept:
        ahead = {name: -age for name, age in young.items() if age < 0}
        clock = (
            f"; {', '.join(f'{name} by {ahead[name]:.0f} s' for name in sorted(ahead)[:3])} ahead of this machine's "
            "time (a clock ahead, the producer's or this one's: check both; such a file waits until "
            "DATA_QUIET_SECONDS after its time)"
            if ahead
            else ""
        )
        raise DataError(
            f"DATA_ROOT {fingerprint.data_root}: every top-level file or folder holds a file modified less than "
            f"DATA_QUIET_SECONDS={quiet_seconds} s ago ({', '.join(sorted(young)[:3])}): still being written"
            f"{clock}; expected a partition left alone that long (run again later)"
        )
    return restrict(fingerprint, kept)


def still_written(
    error: NothingNewError, young: Mapping[str, float], taken: Fingerprint, quiet_seconds: int
) -> NothingNewError:
    """``error`` (nothing new to train on in ``taken``) naming the new partitions left out as still being written:
    it said only 'expected a new generation to train on' beside the one that had arrived, and the run's log, which
    names them, is not written when bootstrap fails."""
    held = {partition(entry.relative_path) for entry in taken.entries}
    left = sorted(set(young) - held)
    if not left:
        return error
    shown = "; ".join(f"{name} (it {why_young(young[name], quiet_seconds)})" for name in left[:3])
    return NothingNewError(
        f"{error.message}; new partitions left out, a run after they settle takes them: {shown}"
        f"{f' and {len(left) - 3} more' if len(left) > 3 else ''}"
    )


def partition(relative_path: str) -> str:
    """The top-level file or folder of DATA_ROOT a file belongs to: one generation of a lineage."""
    return relative_path.split("/", 1)[0]


def _modified(fingerprint: Fingerprint) -> dict[str, float] | None:
    """Each file's modification time by relative path (None: a single S3 object, written whole by its PUT).

    On a disk, the later of its mtime and ctime: a producer that keeps times (``cp -p``, ``rsync -a``, ``touch
    -d``) sets the mtime of a file it is still writing to the source's, hours old, and the partition was taken half
    written; the ctime is the kernel's, set at each write and at that ``utime`` itself, and no user can set it. On
    S3, LastModified is the server's, set when the upload completes."""
    root = fingerprint.data_root
    if root.startswith("file://"):
        path = root[len("file://") :]
        single = os.path.isfile(path)
        times: dict[str, float] = {}
        for entry in fingerprint.entries:
            try:
                found = os.stat(path if single else os.path.join(path, entry.relative_path))
                times[entry.relative_path] = max(found.st_mtime, found.st_ctime)
            except OSError:
                continue  # gone since it was hashed: young
        return times
    try:
        listed = open_store(root).list("")
    except StoreError as exc:
        raise DataError(f"DATA_ROOT {root}: cannot list it for DATA_QUIET_SECONDS: {exc.message}") from exc
    return {info.key: info.mtime for info in listed} or None
