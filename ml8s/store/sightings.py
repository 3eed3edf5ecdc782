"""What a sweep saw last time: each entry's size and mtime, and when (by the store's clock) it first saw the entry
with exactly those, kept in one small file of the sweep's own: ``ml8s tmp-cleanup``'s
``.tmp/ml8s-tmp-cleanup-seen.json``, chain GC's ``ml8s_chain/{chain}/.tmp/ml8s-chain-gc-seen.json``. Both age
entries by this one rule (a store-level module: ml8s.ops and ml8s.chain may both import it).

Why: an entry's age is measured from the later of its mtime and ctime (a writer cannot set ctime back, so a live
write backdated with ``touch -d`` does not look old). But ``chmod -R``, ``chown -R`` or a hard link move ctime to
now without writing a byte, so, done daily over the root, they kept every leftover young forever; and an entry
whose mtime a clock ahead set in the future was kept until that date. Every write changes an entry's size or
mtime; a sighting of the same size and mtime again later proves no write came between. So an entry is aged from
the earlier of its changed time and its first sighting with its current size and mtime: metadata changes no
longer rejuvenate it, and a future time counts as "now" once, at its first sighting, then ages. A first sighting
is never older than the sweep that made it, so a lost, stale or damaged file only makes entries look younger.

Two sweeps at once each save with compare-and-swap (``put_if_match``); the loser reads the file again and
merges: for an entry both saw with the same size and mtime, the earlier sighting (each is a true observation).
"""

from __future__ import annotations

import json

from pydantic import BaseModel, ConfigDict

from ml8s.errors import NotFoundError, ObjectTooLargeError, PreconditionFailedError, StoreError, UnsafeObjectError
from ml8s.store.base import ObjectInfo, Store

SEEN_MAX_BYTES = 64 << 20  # ~100 bytes per entry: half a million tmp entries
_SAVE_TRIES = 3


class Sighting(BaseModel):
    """An entry as a sweep saw it: its size and mtime, and the store's time when first seen with those."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    key: str
    size: int
    mtime: float
    first_seen: float

    def matches(self, info: ObjectInfo) -> bool:
        return (self.key, self.size, self.mtime) == (info.key, info.size, info.mtime)


class SeenFile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    sightings: tuple[Sighting, ...]


class Seen:
    """The sightings read from ``key`` at the start of a sweep (none when absent, unreadable or damaged), and the
    ones it makes; ``save`` writes the latter back."""

    def __init__(self, store: Store, key: str, now: float) -> None:
        self.store, self.key, self.now = store, key, now
        self.before, self.token, self.writable = _read(store, key)
        self.after: dict[str, Sighting] = {}

    def since(self, info: ObjectInfo) -> float:
        """When ``info``'s entry is aged from: its changed time, or its first sighting unchanged if earlier."""
        prior = self.before.get(info.key)
        # a sighting from the future (a damaged file, a store clock set back) proves nothing older than now
        first = min(prior.first_seen, self.now) if prior is not None and prior.matches(info) else self.now
        self.after[info.key] = Sighting(key=info.key, size=info.size, mtime=info.mtime, first_seen=first)
        return min(info.changed_at, first)

    def forget(self, key: str) -> None:
        """``key`` was removed: no sighting of it is kept."""
        self.after.pop(key, None)

    def save(self) -> bool:
        """Write the sightings made (compare-and-swap, merged with a concurrent sweep's); False when the file
        could not be written (a link there, a store error, or still contended): the next sweep sees less. Nothing
        seen and no file yet: nothing is written (an empty chain or root gains no file)."""
        if not self.writable:
            return False
        if not self.after and self.token is None:
            return True
        mine, token = self.after, self.token
        for _ in range(_SAVE_TRIES):
            try:
                self.store.put_if_match(self.key, _encode(mine), token)
                return True
            except PreconditionFailedError:
                theirs, token, writable = _read(self.store, self.key)
                if not writable:
                    return False
                mine = {key: _earlier(s, theirs.get(key)) for key, s in mine.items()}
            except StoreError:
                return False
        return False


def _earlier(mine: Sighting, theirs: Sighting | None) -> Sighting:
    same = theirs is not None and (theirs.size, theirs.mtime) == (mine.size, mine.mtime)
    return theirs if same and theirs is not None and theirs.first_seen < mine.first_seen else mine


def _encode(sightings: dict[str, Sighting]) -> bytes:
    listed = SeenFile(sightings=tuple(sightings[key] for key in sorted(sightings)))
    return json.dumps(listed.model_dump(mode="json"), sort_keys=True, indent=1).encode() + b"\n"


def _read(store: Store, key: str) -> tuple[dict[str, Sighting], str | None, bool]:
    """The sightings saved, the token to replace them with, and whether the file may be replaced at all."""
    try:
        found = store.get_versioned(key, max_bytes=SEEN_MAX_BYTES)
    except NotFoundError:
        return {}, None, True
    except UnsafeObjectError:  # a link or FIFO planted there: never written through, left to the operator
        return {}, None, False
    except ObjectTooLargeError:  # not ours as written: replaced, its token read without holding its bytes
        return _unread(store, key)
    except StoreError:  # unreadable now: nothing learnt from it, nothing written over it
        return {}, None, False
    try:
        # json.loads, not pydantic's JSON parser: a key whose name is no UTF-8 is saved as a lone surrogate escape
        # ("\udcff"), which that parser refuses, and one such entry voided the whole record at every sweep
        parsed = SeenFile.model_validate(json.loads(found.data, parse_constant=_no_constant))
    except (ValueError, RecursionError):  # damaged: replaced; no sighting from it, so entries only look younger
        return {}, found.token, True
    return {s.key: s for s in parsed.sightings}, found.token, True


def _no_constant(name: str) -> float:
    raise ValueError(f"{name}: expected a finite number")


def _unread(store: Store, key: str) -> tuple[dict[str, Sighting], str | None, bool]:
    try:
        return {}, store.checksum(key), True
    except StoreError:
        return {}, None, False
