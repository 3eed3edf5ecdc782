"""The run index: a run (FULL_CONFIG_HASH) is committed to the chain at most once, even racing, even crashing.

Two create-only objects per run under ``runs/``:

- ``{hash}.claim.json`` (RunClaim): written before a committer of the run reads the head it builds on,
  recording ``since_counter``, the head's counter read *before* the claim was created. It is never
  changed afterwards; later committers of the run read it.
- ``{hash}.json`` (RunRecord): the version holding the run, written after the head swap won. A shortcut
  only: correctness never depends on it.

Why that is enough, without leases or locks: every committer of run R touches the claim before its
head swap, and head counters only grow, so every block of R ever committed has a counter greater
than ``since_counter``. Before uploading, a committer walks the chain from the head it read (token T)
down to ``since_counter + 1`` looking for R, and then swaps with ``If-Match: T``. The swap succeeds
only if the head is still T, i.e. the chain is exactly the one it searched: so R cannot be in the chain
twice. Two identical runs racing: one wins the swap; the loser's next attempt finds the winner's block
in its walk and returns it. A crash between the swap and the record write leaves the claim in place;
the next commit of R walks from the head, finds the block and writes the missing record. The walk is
short (the versions committed since the claim) and each verified block is cached by ChainVersions.

A record or claim that is not valid JSON of its model is corruption (ChainCorruptionError), never
silently replaced: the index is part of the audit trail.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, ValidationError

from ml8s.chain import paths
from ml8s.chain._util import rfc3339, sha256_hex, utc_now
from ml8s.chain.limits import RECORD_MAX_BYTES
from ml8s.chain.models import ChainVersion, CommitMeta
from ml8s.chain.versions import ChainVersions
from ml8s.errors import (
    ChainCorruptionError,
    ChainForkError,
    ChainRollbackError,
    NotFoundError,
    ObjectTooLargeError,
    UnsafeObjectError,
)

_FROZEN = ConfigDict(extra="forbid", frozen=True)


class RunClaim(BaseModel):
    """``runs/{hash}.claim.json``: every block of this run has a counter above ``since_counter``."""

    model_config = _FROZEN

    full_config_hash: str
    since_counter: int
    claimed_at: str
    creator: str


class RunRecord(BaseModel):
    """``runs/{hash}.json``: the version that holds the run."""

    model_config = _FROZEN

    full_config_hash: str
    counter: int
    block_hash: str
    version_dir: str


def _key(chain: ChainVersions, full_config_hash: str, suffix: str) -> str:
    return chain.key(paths.RUNS, f"{full_config_hash}{suffix}")


def committed(chain: ChainVersions, full_config_hash: str) -> ChainVersion | None:
    """The version recorded for the run, checked against its block; None when none is recorded."""
    key = _key(chain, full_config_hash, ".json")
    if not chain.store.exists(key):  # the usual answer; a HEAD, cheaper than a GET's 404 on some servers
        return None
    try:
        record = RunRecord.model_validate_json(chain.store.get(key, max_bytes=RECORD_MAX_BYTES))
    except NotFoundError:
        return None
    except (ValidationError, ObjectTooLargeError, UnsafeObjectError) as exc:
        raise ChainCorruptionError(None, f"{chain.store.uri(key)} is no valid run record", check="run_index") from exc
    version = chain.load(record.version_dir)
    if (version.block_hash, version.header.full_config_hash) != (record.block_hash, full_config_hash):
        raise ChainCorruptionError(
            record.counter,
            f"{chain.store.uri(key)} names {record.version_dir}, which holds another run",
            check="run_index",
        )
    _on_chain(chain, version, chain.store.uri(key))
    return version


def _on_chain(chain: ChainVersions, version: ChainVersion, where: str) -> None:
    """A record is trusted only for a version reachable from the head: records are written after the
    swap won, so one off the chain means the head was rolled back (or history rewritten) since."""
    head = chain.head()
    for seen in chain.walk(head):
        if seen.counter <= version.counter:
            if seen.block_hash == version.block_hash:
                return
            break
    why = (
        f"{where} names {version.version_dir}, which is not on the chain from the head {head.version_dir}: "
        "the head was {what}; restore it (verify --known-head, an anchor) before committing"
    )
    if version.counter > head.counter:
        raise ChainRollbackError(version.counter, why.format(what="rolled back"), check="run_index")
    raise ChainForkError(version.counter, why.format(what="forked (history rewritten)"), check="run_index")


def claim(chain: ChainVersions, meta: CommitMeta, head_counter: int) -> tuple[int, bool, str]:
    """Create the run's claim (or read the existing one); returns its ``since_counter``, whether the
    claim is this committer's (new), and the sha256 of its bytes (the block records it). A new claim
    proves nothing about the past when ``runs/`` was deleted, so the caller then searches the whole
    chain, not just above ``since_counter``.

    A claim never changes once created, so ChainVersions remembers its bytes: retries skip the read.
    """
    key = _key(chain, meta.full_config_hash, ".claim.json")
    mine = RunClaim(
        full_config_hash=meta.full_config_hash,
        since_counter=head_counter,
        claimed_at=rfc3339(utc_now()),
        creator=meta.creator,
    )
    data = mine.model_dump_json().encode("utf-8")
    try:
        stored = chain.put_once(key, data)
        return RunClaim.model_validate_json(stored).since_counter, stored == data, sha256_hex(stored)
    except ValidationError as exc:
        raise ChainCorruptionError(None, f"{chain.store.uri(key)} is no valid run claim", check="run_index") from exc


def find(chain: ChainVersions, head: ChainVersion, full_config_hash: str, since_counter: int) -> ChainVersion | None:
    """The block of the run among the versions from ``head`` down to ``since_counter + 1``, if any."""
    for version in chain.walk(head):
        if version.counter <= since_counter:
            return None
        if version.header.full_config_hash == full_config_hash:
            return version
    return None


def record(chain: ChainVersions, version: ChainVersion) -> None:
    """Write the run's record (create-only: a second writer can only be writing the same version)."""
    data = RunRecord(
        full_config_hash=version.header.full_config_hash,
        counter=version.counter,
        block_hash=version.block_hash,
        version_dir=version.version_dir,
    )
    chain.store.put_if_absent(_key(chain, version.header.full_config_hash, ".json"), data.model_dump_json().encode())
