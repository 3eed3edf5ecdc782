"""Retrying commits: exponential backoff with full jitter, a bounded number of attempts and a deadline.

Full jitter (a uniform delay in [0, cap]) spreads contending committers out instead of letting them
collide again in lockstep; each attempt re-reads the head, so a retry builds on the latest version.
Retried: ConflictError (another committer won; includes an unknown swap outcome) and
RetryableStoreError (the store was briefly unavailable). Not retried: NotFastForwardError and
integrity errors, which another attempt cannot fix.

Waits are bounded and never silent: an attempt still running after ``report_after_s`` (a hung
endpoint) and every store error retried say so in one line naming the store's endpoint (stderr by
default), and no attempt starts after ``deadline_s``: CommitDeadlineError. A single request that hangs
is bounded by the S3 client (ml8s/store/s3: AWS_MAX_ATTEMPTS tries, each within its timeouts and deadline), not
by this loop.
"""

from __future__ import annotations

import random
import sys
import time
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager

from pydantic import BaseModel, ConfigDict, Field

from ml8s import log
from ml8s.chain.commit import commit
from ml8s.chain.models import ChainVersion, CommitMeta, PayloadBuilder, PayloadSource
from ml8s.chain.payload import payload_files
from ml8s.chain.versions import ChainVersions
from ml8s.errors import CommitDeadlineError, ConflictError, RetryableStoreError
from ml8s.store import Store
from ml8s.text import terminal_text

REPEAT_REPORT_S = 30.0  # after the first "still waiting" line, one more per this many seconds


class RetryPolicy(BaseModel):
    """How hard ``commit_with_retry`` tries: attempt n waits uniform(0, min(max_delay_s, base_delay_s * 2**n));
    no attempt starts after ``deadline_s`` (default 120 s); an attempt slower than ``report_after_s`` is reported."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_attempts: int = Field(default=20, ge=1)
    base_delay_s: float = Field(default=0.05, ge=0)
    max_delay_s: float = Field(default=5.0, ge=0)
    deadline_s: float = Field(default=120.0, gt=0)
    report_after_s: float = Field(default=5.0, gt=0)

    def delay(self, attempt: int) -> float:
        return random.uniform(0.0, min(self.max_delay_s, self.base_delay_s * 2.0**attempt))


def endpoint_of(store: Store) -> str:
    """Where the store's requests go: the S3 endpoint URL (and bucket URI), else the root URI."""
    if not store.root_uri.startswith("s3://"):
        return store.root_uri
    from ml8s.store import S3Store  # here: a local root's commit (a gate hit's too) loads no S3 client

    return f"{store.endpoint} ({store.root_uri})" if isinstance(store, S3Store) else store.root_uri


def to_stderr(line: str) -> None:
    """``line`` on stderr as the CLI prints its error lines (:func:`~ml8s.text.terminal_text`): a notice quotes a
    store's message, which may name a key holding an escape sequence, a carriage return, a newline or a
    bidirectional override (a cleared terminal, a forged ``ml8s:`` line)."""
    print(terminal_text(line), file=sys.stderr, flush=True)


def commit_with_retry(
    chain: ChainVersions,
    payload: Mapping[str, PayloadSource] | PayloadBuilder,
    meta: CommitMeta,
    policy: RetryPolicy,
    *,
    sleep: Callable[[float], None] = time.sleep,
    notify: Callable[[str], None] = to_stderr,
    expected_parent: str | None = None,
) -> ChainVersion:
    """Commit until won (or the run is found in the chain); the last error after ``max_attempts``,
    CommitDeadlineError once ``deadline_s`` has passed. With ``expected_parent`` (a warm start's parent),
    a head that moved is NotFastForwardError at once: retrying cannot make a stale parent the head."""
    files = payload_files(payload) if isinstance(payload, Mapping) else None  # a builder lists per attempt
    start = time.monotonic()
    what = f"chain {chain.name!r}: the store at {endpoint_of(chain.store)}"
    where = f"ml8s: {what}"
    last: ConflictError | RetryableStoreError | None = None
    for attempt in range(policy.max_attempts):
        if attempt:
            left = policy.deadline_s - (time.monotonic() - start)
            if left <= 0:
                raise CommitDeadlineError(
                    f"{what}: gave up after {policy.deadline_s:.0f} s (RetryPolicy.deadline_s) and {attempt} "
                    f"attempts; last: {last.message if last else '?'}"
                ) from last
            sleep(min(policy.delay(attempt - 1), left))
        try:
            with _watchdog(policy, start, where, notify):
                return commit(chain, payload, meta, expected_parent, files=files, check_record=attempt == 0)
        except RetryableStoreError as exc:
            left = max(0.0, policy.deadline_s - (time.monotonic() - start))
            notify(f"{where} failed ({exc.message}); retrying for up to {left:.0f} s more")
            last = exc
        except ConflictError as exc:
            last = exc
    assert last is not None
    if isinstance(last, ConflictError):
        raise ConflictError(f"gave up after {policy.max_attempts} attempts; last: {last.message}") from last
    raise last


def _watchdog(
    policy: RetryPolicy, start: float, where: str, notify: Callable[[str], None]
) -> AbstractContextManager[None]:
    """Say so while an attempt is stuck (a hung endpoint answers nothing, so no error would ever tell)."""

    def say(waited: float) -> None:
        notify(
            f"{where} has not answered for {waited:.0f} s; still waiting "
            f"(no new attempt after {policy.deadline_s:.0f} s)"
        )

    return log.while_waiting(
        say, first_s=policy.report_after_s, every_s=REPEAT_REPORT_S, name="ml8s-commit-watchdog", since=start
    )
