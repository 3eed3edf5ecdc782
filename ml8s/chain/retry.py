"""Retrying commits: exponential backoff with full jitter, a bounded number of attempts.

Full jitter (a uniform delay in [0, cap]) spreads contending committers out instead of letting them
collide again in lockstep; each attempt re-reads the head, so a retry builds on the latest version.
Retried: ConflictError (another committer won; includes an unknown swap outcome) and
RetryableStoreError (the store was briefly unavailable). Not retried: NotFastForwardError and
integrity errors, which another attempt cannot fix.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping

from pydantic import BaseModel, ConfigDict, Field

from ml8s.chain.commit import commit, payload_files
from ml8s.chain.models import ChainVersion, CommitMeta, PayloadSource
from ml8s.chain.versions import ChainVersions
from ml8s.errors import ConflictError, RetryableStoreError


class RetryPolicy(BaseModel):
    """How hard ``commit_with_retry`` tries: attempt n waits uniform(0, min(max_delay_s, base_delay_s * 2**n))."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_attempts: int = Field(default=20, ge=1)
    base_delay_s: float = Field(default=0.05, ge=0)
    max_delay_s: float = Field(default=5.0, ge=0)

    def delay(self, attempt: int) -> float:
        return random.uniform(0.0, min(self.max_delay_s, self.base_delay_s * 2.0**attempt))


def commit_with_retry(
    chain: ChainVersions,
    payload: Mapping[str, PayloadSource],
    meta: CommitMeta,
    policy: RetryPolicy,
    *,
    sleep: Callable[[float], None] = time.sleep,
) -> ChainVersion:
    """Commit until won (or the run is found in the chain); the last error after ``max_attempts``."""
    files = payload_files(payload)
    last: ConflictError | RetryableStoreError | None = None
    for attempt in range(policy.max_attempts):
        if attempt:
            sleep(policy.delay(attempt - 1))
        try:
            return commit(chain, payload, meta, files=files, check_record=attempt == 0)
        except (ConflictError, RetryableStoreError) as exc:
            last = exc
    assert last is not None
    if isinstance(last, ConflictError):
        raise ConflictError(f"gave up after {policy.max_attempts} attempts; last: {last.message}") from last
    raise last
