"""``ml8s tmp-cleanup``: remove stale in-flight writes (``.tmp/`` entries), never a final artifact.

Only keys of the form ``ml8s_training_runs/{RUN_ID}/.tmp/…``, ``ml8s_incidents/.tmp/…``,
``ml8s_quarantine/.tmp/…`` and ``.tmp/…`` (the root's, where a local store stages conditional writes)
are candidates, and only when their age exceeds the retention. The age is measured on the store's clock
alone: the store's time now (Store.clock: the time it gives a probe object written under ``.tmp/`` and
deleted again) minus the time it gave the entry (``ObjectInfo.changed_at``: locally the later of the file's mtime
and ctime, which no writer can set back, so a live entry backdated by ``touch -d`` is not taken for an old one;
``LastModified`` on S3), or from the entry's first sighting with its current size and mtime if earlier
(:mod:`ml8s.store.sightings`: a ``chmod -R`` moves ctime, a clock ahead sets a future mtime, neither writes a byte),
so a host whose clock runs days ahead removes nothing a correct one would keep. A live
write is always younger: every write creates its tmp object fresh, and no entry under an hour old is removed unless
the caller says no write is in flight (``allow_short_grace``, as chain GC's for its ``.tmp/``). The model chain's
``.tmp/`` is the chain GC's business. On S3, the multipart uploads to those keys that a killed writer left open
(billed, never listed as objects) are aborted by the same rule, aged from their initiation
(:mod:`ml8s.ops.tmp_uploads`).

Only regular files, and symbolic links to regular files (the link alone, judged by its own age), are
removed. What else a local store holds there (a symbolic link to a directory, a
dangling link, a FIFO, a socket, a device; or the ``.tmp`` directory itself replaced by a link) is left alone
and reported: removing it by rule could follow it, and it was not written by ml8s.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict

from ml8s.contract import layout
from ml8s.errors import ConfigError, StoreError
from ml8s.identity.settings import PlatformSettings
from ml8s.ops.tmp_keys import LISTED, QUARANTINE_DIR, is_tmp_key, through
from ml8s.ops.tmp_uploads import TmpUpload, cleanup_uploads
from ml8s.store import ObjectInfo, Store
from ml8s.store.sightings import Seen
from ml8s.text import shown

_DAY_S = 86400.0
# Nothing but age tells a live write's staging entry from a crash's leftover, and removing it fails that write
# (STORE_RETRYABLE, "vanished"). A retention of 0 (or minutes) would take it: like chain GC's TMP_GRACE_MIN_S,
# an entry is kept until an hour old unless allow_short_grace says no write is in flight.
MIN_AGE_S = 3600.0
# where the cleanup records its first sightings (ml8s/store/sightings.py): never a candidate itself
SEEN_KEY = f"{layout.TMP_DIR}/ml8s-tmp-cleanup-seen.json"


class TmpEntry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    uri: str
    size: int
    age_days: float


class CleanupReport(BaseModel):
    """What was (or, in a dry run, would be) removed, and how many tmp entries were young enough to keep."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    root_uri: str
    older_than_days: float
    min_age_days: float  # the age applied: older_than_days, raised to MIN_AGE_S unless allow_short_grace
    dry_run: bool
    removed: tuple[TmpEntry, ...]
    kept: int
    left_alone: tuple[str, ...] = ()  # URIs of tmp entries that are no regular file: not removed, see above
    failed: tuple[str, ...] = ()  # "URI: why" of the entries whose removal failed (the others were still removed)
    # S3 multipart uploads to tmp keys older than min_age_days, aborted (to abort, in a dry run): tmp_uploads.py
    aborted_uploads: tuple[TmpUpload, ...] = ()
    kept_uploads: int = 0
    failed_uploads: tuple[str, ...] = ()  # "abort upload ID of URI: why", "list the multipart uploads under URI/: why"

    @property
    def complete(self) -> bool:
        """Whether every stale entry was removed and every stale upload aborted (or, in a dry run, could be listed)."""
        return not self.failed and not self.failed_uploads


def retention_days(env: Mapping[str, str]) -> float:
    """TMP_RETENTION_DAYS (a platform setting) of the environment ``env``."""
    return float(PlatformSettings.load(env).tmp_retention_days)


def tmp_entries(store: Store, skip: frozenset[str] = frozenset()) -> list[ObjectInfo]:
    """Every tmp entry under the pipeline root, sorted by key; a listed prefix with a component in ``skip``
    (a symbolic link: listing it would walk wherever it points) is not listed."""
    listed = [info for prefix in LISTED if not through(prefix, skip) for info in store.list(f"{prefix}/")]
    return sorted((info for info in listed if is_tmp_key(info.key)), key=lambda info: info.key)


def cleanup_tmp(
    store: Store,
    older_than_days: float,
    *,
    dry_run: bool = False,
    now: float | None = None,
    allow_short_grace: bool = False,
) -> CleanupReport:
    """Delete the tmp entries older than ``older_than_days`` (strictly; 0: every one), and abort the multipart uploads
    to tmp keys initiated that long ago (:mod:`ml8s.ops.tmp_uploads`), unless ``dry_run``. ``now``: the
    store's current time (default: Store.clock, measured with a probe object under the root's ``.tmp/``).
    ``allow_short_grace``: apply an ``older_than_days`` under MIN_AGE_S too (no write is in flight)."""
    if not 0 <= older_than_days < math.inf:  # NaN compares false with every age: each entry, in-flight too, "old"
        raise ConfigError(f"--older-than-days {older_than_days}: expected a finite number of days >= 0")
    min_age_days = older_than_days if allow_short_grace else max(older_than_days, MIN_AGE_S / _DAY_S)
    odd = frozenset(_irregular(store))
    # a linked root .tmp: the clock's probe is refused by the store itself (UnsafeObjectError, nothing written)
    current = store.clock(f"{layout.TMP_DIR}/ml8s-clock-{uuid.uuid4().hex}") if now is None else now
    removed: list[TmpEntry] = []
    failed: list[str] = []
    kept = 0
    seen = Seen(store, SEEN_KEY, current)
    entries = tmp_entries(store, odd)
    for listed in entries:
        if listed.key == SEEN_KEY and listed.key not in odd:  # the cleanup's own record (sightings.py), not a write
            continue
        # a link to a regular file is listed with its target's size and times (stat follows it); the link is what
        # goes, so it is judged and reported by its own (a link made now to a month-old file is no old entry)
        info = store.link_info(listed.key) if listed.key in odd else listed
        if info is None:  # gone or replaced since it was listed: the next cleanup judges what is there
            continue
        age = (current - seen.since(info)) / _DAY_S
        # 0 means every entry (docs/audits.md): a just-written one is 0 days old on a clock of whole seconds
        if min_age_days > 0 and age <= min_age_days:
            kept += 1
            continue
        if not is_tmp_key(info.key):  # belt and braces: never anything but a tmp entry
            continue
        if not dry_run:
            try:
                store.delete(info.key)
            except StoreError as exc:  # one entry that will not go must not hide what was removed before it
                failed.append(f"{shown(store.uri(info.key))}: {shown(exc.message)}")
                continue
            seen.forget(info.key)
        removed.append(TmpEntry(uri=shown(store.uri(info.key)), size=info.size, age_days=round(age, 3)))
    if not dry_run:  # a dry run writes nothing but its clock probe
        seen.save()
    uploads = cleanup_uploads(store, current, min_age_days, dry_run=dry_run)
    return CleanupReport(
        root_uri=store.root_uri,
        older_than_days=older_than_days,
        min_age_days=min_age_days,
        dry_run=dry_run,
        removed=tuple(removed),
        kept=kept,
        left_alone=tuple(shown(store.uri(key)) for key in sorted(odd - {info.key for info in entries})),
        failed=tuple(failed),
        aborted_uploads=uploads.aborted,
        kept_uploads=uploads.kept,
        failed_uploads=uploads.failed,
    )


def _irregular(store: Store) -> list[str]:
    """Keys of tmp entries, ``.tmp`` directories or directories on the way to them that are no regular file or
    directory (a link to a regular file is listed too, and removing it removes the link alone), sorted."""
    found = {
        key
        for prefix in (layout.RUNS_DIR, layout.INCIDENTS_DIR, QUARANTINE_DIR, layout.TMP_DIR)
        for key in store.irregular(prefix)
        if is_tmp_key(key) or is_tmp_key(f"{key}/entry") or any(through(p, frozenset([key])) for p in LISTED)
    }
    return sorted(found)
