"""The chain's append-only audit trail: one create-only object per event under ``audit/``.

One object per event (never an appended log file) because object stores cannot append, and
create-only writes (``put_if_absent``) mean no event is ever overwritten. Names start with a
fixed-width UTC timestamp, so a sorted listing is chronological. Times are fine here: events are not
hashed into blocks, but verify checks each version committed has one (evidence.py).

Commit events are best effort: the commit has already won or lost when they are written, and a
failing audit write must not turn a won commit into an error. GC deletions are audited strictly
(``required=True``): the event is written before the deletion, or nothing is deleted.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time

from pydantic import BaseModel, ConfigDict

from ml8s.chain._util import list_objects, rfc3339, utc_now
from ml8s.chain.limits import RECORD_MAX_BYTES
from ml8s.errors import RetryableStoreError, StoreError
from ml8s.identity.settings import worker_id
from ml8s.store import Store

log = logging.getLogger(__name__)
_SEQ = itertools.count()
_SEQ_LOCK = threading.Lock()
WRITE_ATTEMPTS = 3


class AuditEvent(BaseModel):
    """One thing that happened to the chain. ``event`` is one of the names in ``EVENTS``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    event: str
    chain: str
    at: str
    worker: str
    counter: int | None = None
    block_hash: str = ""
    version_dir: str = ""
    run_id: str = ""
    detail: str = ""
    rolled_back: bool | None = None  # losses: whether the loser's upload was deleted (else GC will)


EVENTS = (
    "init",  # the genesis block was committed
    "sealed",  # a commit is about to swap the head to its uploaded version (it may still lose)
    "committed",  # a commit won the head swap
    "conflict",  # a commit lost the head swap (the head moved under it); rolled_back says if its upload went
    "not_fast_forward",  # expected_parent was not the head, or global_step would go back
    "unknown_outcome",  # the head swap's outcome was unknown; resolved below or left unresolved
    "unknown_outcome_resolved",
    "already_committed",  # the run was in the chain already, with news: another payload, a repaired record
    "gc_delete",  # garbage collection deleted an orphaned or incomplete version (or a stale tmp object)
)


class AuditLog:
    """Writes and reads the events of one chain."""

    def __init__(self, store: Store, prefix: str, chain_name: str) -> None:
        self.store, self.prefix, self.chain_name = store, prefix, chain_name

    def append(self, event: str, *, required: bool = False, **fields: str | int | bool | None) -> None:
        if event not in EVENTS:
            raise ValueError(f"unknown audit event {event!r}; expected one of {EVENTS}")
        moment, worker = utc_now(), worker_id()
        record = AuditEvent.model_validate(
            {"event": event, "chain": self.chain_name, "at": rfc3339(moment), "worker": worker, **fields}
        )
        data = record.model_dump_json().encode("utf-8") + b"\n"
        stamp = moment.strftime("%Y%m%dT%H%M%S%f")
        for attempt in range(WRITE_ATTEMPTS):  # verify reports a commit without its event (audit_missing)
            try:
                while True:
                    with _SEQ_LOCK:
                        seq = next(_SEQ)
                    if self.store.put_if_absent(f"{self.prefix}/{stamp}Z-{worker}-{seq:08d}.json", data):
                        return
            except RetryableStoreError:
                if attempt < WRITE_ATTEMPTS - 1:
                    time.sleep(0.1 * 2**attempt)
                    continue
                if required:
                    raise
                log.warning("audit event %s of chain %s not written (store unavailable)", event, self.chain_name)
            except StoreError as exc:
                if required:
                    raise
                log.warning("audit event %s of chain %s not written: %s", event, self.chain_name, exc.message)
            return

    def events(self) -> list[AuditEvent]:
        """Every event, oldest first."""
        return [
            AuditEvent.model_validate_json(self.store.get(info.key, max_bytes=RECORD_MAX_BYTES))
            for info in list_objects(self.store, self.prefix)
            if info.key.endswith(".json")
        ]
