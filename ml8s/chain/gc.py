"""Garbage collection: delete version directories that can never become part of the chain.

Candidates are directories under ``versions/`` off the chain: *orphans* (complete: a loser whose
rollback did not finish, or a crashed committer's) and *incomplete* ones (no block.pb: an upload cut
short), plus stale objects under ``.tmp/`` and, on the local backend, empty directories left under
``versions/`` (``empty_dir``: object stores have no directories). GC is built so that whoever can write
the store cannot steer it into deleting anything else. Safety, in order:

- dry run by default: the report says what would go;
- it refuses to run (GcRefusedError) when anything under the chain is no regular file or directory: a
  symbolic link (``.tmp -> versions``, or to a directory outside the store) would turn a deletion into
  one elsewhere; and the local store deletes without following a link anyway (store/_safe.py), so a
  link swapped in after that check stops the deletion instead of redirecting it;
- the chain is verified first (with ``anchor``, against it too), and GC refuses a chain with findings:
  an "orphan" of a corrupted, rolled-back or forked chain may be the evidence, or the real history;
- what is kept is decided by the chain's own order, by counter, never by a clock: nothing reachable
  from the head; nothing above the head's counter (complete or not: a commit in flight uploads exactly
  there, and a version the head was rolled back from sits there too); no complete version whose parent
  is off the chain (its signed block names that parent, so the parent was a head once: evidence of a
  rollback); nothing a complete version names as its parent; nothing a run record or winning audit event
  names (evidence.py); nothing whose name is no version directory's (ml8s writes none such). What is left
  is the shape a lost race leaves: a sibling of the chain's version at
  its counter, or an incomplete directory at or below the head, which no swap can ever make the head;
- a grace period (default 24 h) on top, for ``.tmp/`` never under TMP_GRACE_MIN_S (below), on the age of a
  directory's newest object as the *store's* clock says (Store.clock: the time the store gives an object it
  writes now, compared with the times it gave the candidates; locally ``max(mtime, ctime)``, which
  backdating cannot age), so a GC host whose clock is days ahead judges exactly as one whose clock is right;
  each object aged from the earlier of that and GC's first sighting of it with its current size and mtime
  (ml8s.store.sightings, kept in ``.tmp/`` SEEN_NAME, never a candidate): a ``chmod -R`` moving ctime daily, or
  an mtime a clock ahead set in the future, no longer keeps a leftover young; every write is a new sighting;
- the head is re-read before each deletion, and a version that is (or is above) the head then is kept;
- every deletion is audit-logged *before* it happens (a failed audit write deletes nothing);
- block.pb is deleted first, so an interrupted deletion leaves an incomplete directory, never a
  "complete" version with files missing;
- the chain is verified again afterwards.
"""

from __future__ import annotations

import math

from pydantic import BaseModel, ConfigDict

from ml8s.chain import evidence, paths
from ml8s.chain._util import prune_empty_dirs
from ml8s.chain.anchor import Anchor
from ml8s.chain.findings import VerifyReport
from ml8s.chain.integrity import verify_chain
from ml8s.chain.models import ChainVersion
from ml8s.chain.trusted import ReadTrust
from ml8s.chain.versions import ChainVersions
from ml8s.errors import ChainError, ConfigError, GcRefusedError
from ml8s.store import ObjectInfo
from ml8s.store.sightings import Seen
from ml8s.text import is_utf8
from ml8s.text import shown as text_shown

DEFAULT_GRACE_S = 24 * 3600.0
# Nothing but age tells a commit's staged .tmp/ object (a checkpoint staged while hashed, an upload before its
# move) from a crash's leftover, and deleting it fails that commit. No commit attempt starts after its retry
# deadline (RetryPolicy.deadline_s, 120 s by default), so an hour leaves the last attempt ~58 minutes of upload.
# Versions need no such floor: their counter keeps a commit in flight (above the head). allow_short_grace
# lifts it, on the caller's word that no commit is in flight.
TMP_GRACE_MIN_S = 3600.0
_FROZEN = ConfigDict(extra="forbid", frozen=True)
_SHOWN = 5  # irregular entries named in GcRefusedError
SEEN_NAME = "ml8s-chain-gc-seen.json"  # under the chain's .tmp/: GC's first sightings (ml8s.store.sightings)


class GcItem(BaseModel):
    """One candidate: a version directory (``orphan``/``incomplete``/``empty_dir``) or a ``stale_tmp`` object."""

    model_config = _FROZEN

    path: str
    kind: str
    age_s: float
    objects: int
    size: int
    deleted: bool


class GcReport(BaseModel):
    """What GC found, deleted (``dry_run=False``), kept because it is younger than ``grace_s`` by the
    store's clock (``kept_recent``), or kept whatever its age (``kept``: ``"{dir}: {why}"``).
    ``clock_skew_s``: the local clock minus the store's (what GC did *not* use); ``tmp_grace_s``: the grace
    applied to ``.tmp/`` objects (``grace_s``, raised to TMP_GRACE_MIN_S unless ``allow_short_grace``)."""

    model_config = _FROZEN

    chain_name: str
    dry_run: bool
    grace_s: float
    items: tuple[GcItem, ...]
    kept_recent: tuple[str, ...]
    bytes_freed: int
    kept: tuple[str, ...] = ()
    clock_skew_s: float = 0.0
    tmp_grace_s: float = DEFAULT_GRACE_S


def collect_garbage(
    chain: ChainVersions,
    *,
    grace_s: float = DEFAULT_GRACE_S,
    dry_run: bool = True,
    now: float | None = None,
    verify_payloads: bool = False,
    anchor: Anchor | None = None,
    local_now: float | None = None,
    trust: ReadTrust | None = None,
    allow_short_grace: bool = False,
) -> GcReport:
    """Find (and unless ``dry_run``, delete) the chain's garbage; see the module docstring. ``now``: the
    store's current time (default: Store.clock, one probe object written and deleted under ``.tmp/``);
    ``local_now``: this host's, only reported (``clock_skew_s``); ``trust``: the pinned root and
    CHAIN_REQUIRE_SIGNED, checked as every reader checks them (a chain they refuse is not collected);
    ``allow_short_grace``: apply a ``grace_s`` below TMP_GRACE_MIN_S to ``.tmp/`` too (no commit is in flight)."""
    if not 0 <= grace_s < math.inf:  # NaN compares false with every age: each candidate, in-flight ones too, "old"
        raise ConfigError(f"grace period {grace_s} s: expected a finite number of seconds >= 0")
    tmp_grace_s = grace_s if allow_short_grace else max(grace_s, TMP_GRACE_MIN_S)
    refuse_irregular(chain)
    chain.require_head()  # a chain never initialized is named as such, not reported as corrupted
    trust = trust or ReadTrust()
    before = verify_chain(
        chain, payloads=verify_payloads, anchor=anchor, root=trust.root, require_signed=trust.require_signed
    )
    before.raise_for_findings()
    store_now = chain.store.clock(chain.tmp_key()) if now is None else now
    kept = protected(chain, before)
    seen_key = chain.key(paths.TMP, SEEN_NAME)
    seen = Seen(chain.store, seen_key, store_now)
    items: list[GcItem] = []
    recent: list[str] = []
    versions_key = chain.key(paths.VERSIONS)
    pruned = prune_empty_dirs(
        chain.store, versions_key, older_than=store_now - grace_s, dry_run=dry_run, since=seen.since
    )
    for key in pruned:
        items.append(GcItem(path=key, kind="empty_dir", age_s=grace_s, objects=0, size=0, deleted=not dry_run))
        seen.forget(f"{key}/")
    for name, objects in sorted(chain.version_dirs().items()):
        if name in kept:
            continue
        kind = "orphan" if any(o.key == chain.version_key(name, paths.BLOCK) for o in objects) else "incomplete"
        age = store_now - max([seen.since(o) for o in objects])  # a list: every object gets its sighting
        if age < grace_s:
            recent.append(name)
            continue
        deleted = not dry_run and _delete_version(chain, name, kind, objects)
        items.append(_item(name, kind, age, objects, deleted))
        for o in objects if deleted else ():
            seen.forget(o.key)
    for info in chain.objects(chain.key(paths.TMP)):
        if info.key == seen_key:  # GC's own record, not a write (a link there refused GC above)
            continue
        age = store_now - seen.since(info)
        if age < tmp_grace_s:
            recent.append(info.key)
            continue
        deleted = not dry_run and _delete_tmp(chain, info)
        items.append(_item(info.key, "stale_tmp", age, [info], deleted))
        if deleted:
            seen.forget(info.key)
    if not dry_run:  # a dry run writes nothing but its clock probe
        seen.save()
        verify_chain(chain, payloads=verify_payloads, root=trust.root).raise_for_findings()
    return GcReport(
        chain_name=chain.name,
        dry_run=dry_run,
        grace_s=grace_s,
        items=tuple(items),
        kept_recent=tuple(recent),
        bytes_freed=sum(i.size for i in items if i.deleted),
        kept=tuple(f"{name}: {why}" for name, why in sorted(kept.items()) if name not in before.chain),
        clock_skew_s=0.0 if local_now is None else round(local_now - store_now, 3),
        tmp_grace_s=tmp_grace_s,
    )


def refuse_irregular(chain: ChainVersions) -> None:
    """GcRefusedError when anything under the chain (or on the way to it) is no regular file or directory."""
    found = chain.store.irregular(chain.prefix)
    # a name that is no UTF-8 (listed with surrogates) cannot go into the gc_delete event that must precede it
    found += [info.key for info in chain.objects(chain.prefix) if not is_utf8(info.key)]
    if found:
        more = f" (+{len(found) - _SHOWN} more)" if len(found) > _SHOWN else ""
        shown = ", ".join(chain.store.uri(k) for k in found[:_SHOWN]) + more
        shown = text_shown(shown)
        raise GcRefusedError(
            f"chain {chain.name!r}: {shown} is no regular file or directory (a symbolic link, FIFO or device), "
            "or its name is no UTF-8; expected only files and directories under the chain, named as ml8s names "
            "them: remove it, then verify, then run GC again"
        )


def protected(chain: ChainVersions, report: VerifyReport) -> dict[str, str]:
    """Every version directory GC must keep whatever its age, and why (module docstring)."""
    keep = dict.fromkeys(report.chain, "on the chain") | dict.fromkeys(report.ahead, "committed while verifying")
    head = report.head_counter if report.head_counter is not None else -1
    on_chain: dict[int, str] = {}
    reader = ChainVersions(chain.store, chain.name)
    for name in report.chain:
        version = reader.load(name)
        on_chain[version.counter] = version.block_hash
    for name in sorted(chain.version_dirs()):
        parsed = paths.parse_version_dir(name)
        if parsed is None:  # an operator's backup or note: no counter places it at or below the head
            keep.setdefault(name, "no version directory name: not written by ml8s")
        elif parsed[0] > head:
            keep.setdefault(name, "above the head: a commit in flight, or a version the head was rolled back from")
    orphans: dict[str, ChainVersion] = {}
    for name in report.orphans:
        try:
            orphans[name] = reader.load(name)
        except ChainError:
            keep.setdefault(name, "its block does not load: evidence, not garbage")
    parents = {orphan.header.parent_block_hash for orphan in orphans.values()}
    for name, orphan in orphans.items():
        if orphan.block_hash in parents:
            keep.setdefault(name, "a signed block names it as its parent")
        if on_chain.get(orphan.counter - 1) != orphan.header.parent_block_hash:
            keep.setdefault(name, "its parent is off the chain: its signed block shows a head that was rolled back")
    for named in evidence.named_versions(chain)[0]:
        if not named.intent:
            keep.setdefault(named.version_dir, f"recorded as committed by {named.source}")
    return keep


def _delete_version(chain: ChainVersions, name: str, kind: str, objects: list[ObjectInfo]) -> bool:
    pointer = chain.read_head()
    parsed = paths.parse_version_dir(name)
    if pointer is not None and (pointer[0].version_dir == name or (parsed and parsed[0] > pointer[0].counter)):
        return False  # it became the head, or the head went below it (rolled back) since verification
    # listed again: a GC running beside this one may have deleted it since, and the event claims only what we
    # delete; of what is there, only what was judged (an object written since is younger than the grace period)
    judged = {o.key for o in objects}
    objects = [o for o in chain.objects(chain.version_key(name)) if o.key in judged]
    if not objects:
        return False
    size = sum(o.size for o in objects)
    chain.audit.append("gc_delete", required=True, version_dir=name, detail=f"{kind}: {len(objects)} objects, {size} B")
    block = chain.version_key(name, paths.BLOCK)
    for key in sorted((o.key for o in objects), key=lambda k: (k != block, k)):
        chain.store.delete(key)
    prune_empty_dirs(chain.store, chain.version_key(name), include_base=True)
    return True


def _delete_tmp(chain: ChainVersions, info: ObjectInfo) -> bool:
    chain.audit.append("gc_delete", required=True, detail=f"stale_tmp {info.key}: {info.size} B")
    chain.store.delete(info.key)
    return True


def _item(path: str, kind: str, age: float, objects: list[ObjectInfo], deleted: bool) -> GcItem:
    return GcItem(
        path=path, kind=kind, age_s=age, objects=len(objects), size=sum(o.size for o in objects), deleted=deleted
    )
