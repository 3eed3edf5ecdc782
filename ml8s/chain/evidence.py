"""What the run index and the audit trail say was committed: versions that must be on the chain.

A run record (``runs/{hash}.json``) is written only after its head swap won, and so are the audit
events ``init``, ``committed`` and ``unknown_outcome_resolved``. So every version they name was once
the head, and must stay reachable from the head: one that is not proves the head was rolled back or
history rewritten, even when the blocks alone look like a consistent, shorter chain. verify reports
such a version (``committed_off_chain``), GC never deletes one, and a commit never trusts a record
whose version is off the chain.

Deleting or editing the index and the trail is visible too (``index_problems``): a block records the
sha256 of its run's claim, written before it was sealed (so a signature covers it), and a version
committed since has a winning audit event (best effort at commit time: a failed audit write, logged
as a warning then, also shows here as ``audit_missing``).
"""

from __future__ import annotations

from collections.abc import Collection

from pydantic import BaseModel, ConfigDict, ValidationError

from ml8s.chain import paths
from ml8s.chain._util import sha256_hex
from ml8s.chain.events import AuditEvent
from ml8s.chain.limits import RECORD_MAX_BYTES
from ml8s.chain.models import ChainVersion
from ml8s.chain.runindex import RunRecord
from ml8s.chain.versions import ChainVersions
from ml8s.errors import ChainError, NotFoundError, ObjectTooLargeError, UnsafeObjectError

# Events written only for a version that is (or was) the head: by the committer that won its swap, or
# (already_committed) by one that found it on the chain.
WINNING_EVENTS = frozenset({"init", "committed", "unknown_outcome_resolved", "already_committed"})


class Named(BaseModel):
    """A version the run index or the audit trail records as committed, and which object says so."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    version_dir: str
    counter: int
    block_hash: str
    source: str
    # A "sealed" event: written before the head swap, so a version on the chain is never without an
    # event, even while a verifier runs between its swap and its "committed" event. It proves nothing
    # was committed (the swap may have lost), so only the audit_missing check counts it.
    intent: bool = False


def named_versions(chain: ChainVersions) -> tuple[list[Named], list[tuple[str, str]]]:
    """Every (version, source) the run records and winning audit events name, sorted; and the
    ``(check, reason)`` problems met reading them (an unreadable record or event is itself a finding)."""
    named: list[Named] = []
    problems: list[tuple[str, str]] = []
    for info in chain.objects(chain.key(paths.RUNS)):
        if not info.key.endswith(".json") or info.key.endswith(".claim.json"):
            continue
        try:
            record = RunRecord.model_validate_json(chain.store.get(info.key, max_bytes=RECORD_MAX_BYTES))
        except NotFoundError:
            continue
        except (ValidationError, ObjectTooLargeError, UnsafeObjectError):
            problems.append(("run_index", f"{chain.store.uri(info.key)} is no valid run record"))
            continue
        named.append(Named(**record.model_dump(exclude={"full_config_hash"}), source=info.key))
    for info in chain.objects(chain.key(paths.AUDIT)):
        try:
            event = AuditEvent.model_validate_json(chain.store.get(info.key, max_bytes=RECORD_MAX_BYTES))
        except NotFoundError:
            continue
        except (ValidationError, ObjectTooLargeError, UnsafeObjectError):
            problems.append(("audit_event", f"{chain.store.uri(info.key)} is no valid audit event"))
            continue
        winning = event.event in WINNING_EVENTS
        if (winning or event.event == "sealed") and event.version_dir and event.counter is not None:
            named.append(
                Named(
                    version_dir=event.version_dir,
                    counter=event.counter,
                    block_hash=event.block_hash,
                    source=info.key,
                    intent=not winning,
                )
            )
    return sorted(named, key=lambda n: (n.counter, n.version_dir, n.source)), problems


def reachable_now(chain: ChainVersions, named: Named, read: ChainVersion | None = None) -> bool:
    """Whether ``named`` is on the chain from the head as it is *now* (a fresh read, no cache): a commit
    that landed after a verifier's listing is not evidence of anything. With ``read``, the head the reader
    checked must be on that chain too: a commit that landed since descends from it, whereas a head flipped
    to a sibling branch for the reader's one read (and back) does not."""
    wanted = {named.counter: named.block_hash}
    if read is not None:
        if wanted.setdefault(read.counter, read.block_hash) != read.block_hash:
            return False  # the read head and the committed version are siblings at one counter
    reader = ChainVersions(chain.store, chain.name)
    try:
        for version in reader.walk():
            if version.counter in wanted and wanted.pop(version.counter) != version.block_hash:
                return False
            if not wanted:
                return True
    except ChainError:
        return False
    return False


def index_problems(
    chain: ChainVersions, walked: list[ChainVersion], named: list[Named]
) -> list[tuple[str, str, ChainVersion]]:
    """(check, reason, version) for each walked version whose run claim (recorded in its header) is
    missing or edited, or that no audit event names."""
    audited = {n.version_dir for n in named if n.source.startswith(chain.key(paths.AUDIT) + "/")}
    found: list[tuple[str, str, ChainVersion]] = []
    for version in walked:
        header = version.header
        if not header.run_claim_sha256:
            continue  # a block from before claims were recorded in headers
        key = chain.key(paths.RUNS, f"{header.full_config_hash}.claim.json")
        try:
            digest = sha256_hex(chain.store.get(key, max_bytes=RECORD_MAX_BYTES))
        except NotFoundError:
            found.append(("run_index", f"its run claim {chain.store.uri(key)} is missing (runs/ deleted?)", version))
            digest = header.run_claim_sha256
        except (ObjectTooLargeError, UnsafeObjectError) as exc:
            found.append(("run_index", f"its run claim is unreadable: {exc.message}", version))
            digest = header.run_claim_sha256
        if digest != header.run_claim_sha256:
            found.append(("run_index", f"its run claim {chain.store.uri(key)} was edited (sha256 {digest})", version))
        if version.version_dir not in audited:
            found.append(("audit_missing", "no audit event records its commit (audit/ edited or deleted?)", version))
    return found


def findings(
    chain: ChainVersions, reachable: set[str], walked: list[ChainVersion], present: Collection[str]
) -> list[tuple[str, str, int | None, str]]:
    """verify's evidence findings, (check, reason, counter, version_dir): unreadable records and events,
    ``index_problems`` of the walked versions, and ``committed_off_chain`` for each version recorded as
    committed that is not in ``reachable`` (nor reachable from the head read now); ``present``: the
    version directories whose block could be read."""
    named, problems = named_versions(chain)
    found: list[tuple[str, str, int | None, str]] = [(check, reason, None, "") for check, reason in problems]
    found += [(c, r, v.counter, v.version_dir) for c, r, v in index_problems(chain, walked, named)]
    sources: dict[str, list[Named]] = {}
    for item in named:
        if not item.intent and item.version_dir not in reachable:
            sources.setdefault(item.version_dir, []).append(item)
    for version_dir, items in sorted(sources.items()):
        if reachable_now(chain, items[0], walked[0] if walked else None):
            continue  # committed after the verifier's listing
        said = ", ".join(sorted({i.source.removeprefix(chain.prefix + "/") for i in items}))
        gone = "" if version_dir in present else " (its directory is gone)"
        reason = f"recorded as committed by {said} but not on the chain{gone}: rolled back or rewritten"
        found.append(("committed_off_chain", reason, items[0].counter, version_dir))
    return found
