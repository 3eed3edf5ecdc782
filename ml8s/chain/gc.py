"""Garbage collection: delete version directories that can never become part of the chain.

Candidates are directories under ``versions/`` off the chain: *orphans* (complete, but a loser whose
rollback did not finish, or a crashed committer's) and *incomplete* ones (no block.pb: an upload cut
short), plus stale objects under ``.tmp/`` and, on the local backend, empty directories left under
``versions/`` (``empty_dir``: object stores have no directories). Safety, in order:

- dry run by default: the report says what would go;
- the chain is verified first, and GC refuses to touch a chain with findings (fix that first: an
  "orphan" of a corrupted chain may be the evidence, or the real history);
- nothing reachable from the head is ever a candidate, nor any version a run record or a winning audit
  event names (evidence.py: it was the head once, so it is evidence of a rollback, never garbage), and
  the head is re-read before each deletion;
- a grace period (default 24 h) on the age of a directory's *newest* object: a commit in flight
  uploads, then swaps the head, and the grace period must outlast that (never use 0 while commits run);
- every deletion is audit-logged *before* it happens (a failed audit write deletes nothing);
- block.pb is deleted first, so an interrupted deletion leaves an incomplete directory, never a
  "complete" version with files missing;
- the chain is verified again afterwards.
"""

from __future__ import annotations

import time

from pydantic import BaseModel, ConfigDict

from ml8s.chain import evidence, paths
from ml8s.chain._util import prune_empty_dirs
from ml8s.chain.integrity import verify_chain
from ml8s.chain.versions import ChainVersions
from ml8s.store import ObjectInfo

DEFAULT_GRACE_S = 24 * 3600.0
_FROZEN = ConfigDict(extra="forbid", frozen=True)


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
    """What GC found, deleted (``dry_run=False``) or kept because it is younger than ``grace_s``."""

    model_config = _FROZEN

    chain_name: str
    dry_run: bool
    grace_s: float
    items: tuple[GcItem, ...]
    kept_recent: tuple[str, ...]
    bytes_freed: int


def collect_garbage(
    chain: ChainVersions,
    *,
    grace_s: float = DEFAULT_GRACE_S,
    dry_run: bool = True,
    now: float | None = None,
    verify_payloads: bool = False,
) -> GcReport:
    """Find (and unless ``dry_run``, delete) the chain's garbage; see the module docstring."""
    before = verify_chain(chain, payloads=verify_payloads)
    before.raise_for_findings()
    now = time.time() if now is None else now
    reachable = (
        set(before.chain)
        | set(before.ahead)
        | {n.version_dir for n in evidence.named_versions(chain)[0] if not n.intent}
    )
    items: list[GcItem] = []
    recent: list[str] = []
    for key in [] if dry_run else prune_empty_dirs(chain.store, chain.key(paths.VERSIONS), older_than=now - grace_s):
        items.append(GcItem(path=key, kind="empty_dir", age_s=grace_s, objects=0, size=0, deleted=True))
    for name, objects in sorted(chain.version_dirs().items()):
        if name in reachable:
            continue
        kind = "orphan" if any(o.key == chain.version_key(name, paths.BLOCK) for o in objects) else "incomplete"
        age = now - max(o.mtime for o in objects)
        if age < grace_s:
            recent.append(name)
            continue
        deleted = not dry_run and _delete_version(chain, name, kind, objects)
        items.append(_item(name, kind, age, objects, deleted))
    for info in chain.objects(chain.key(paths.TMP)):
        age = now - info.mtime
        if age < grace_s:
            recent.append(info.key)
            continue
        deleted = not dry_run and _delete_tmp(chain, info)
        items.append(_item(info.key, "stale_tmp", age, [info], deleted))
    if not dry_run:
        verify_chain(chain, payloads=verify_payloads).raise_for_findings()
    return GcReport(
        chain_name=chain.name,
        dry_run=dry_run,
        grace_s=grace_s,
        items=tuple(items),
        kept_recent=tuple(recent),
        bytes_freed=sum(i.size for i in items if i.deleted),
    )


def _delete_version(chain: ChainVersions, name: str, kind: str, objects: list[ObjectInfo]) -> bool:
    pointer = chain.read_head()
    if pointer is not None and pointer[0].version_dir == name:
        return False  # it became the head since verification: a commit outran the grace period
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
