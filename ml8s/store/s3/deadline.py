"""A total deadline for each S3 request, so an endpoint that trickles its answer cannot hold a reader for hours.

botocore's read timeout bounds each wait for the next bytes, not the whole answer: an endpoint that sends its
headers or body a byte every few seconds never trips it, and ``ml8s run``, ``follow`` or ``predict --chain``
hung with no message. So each request runs on a thread of its own, and its caller stops waiting once it has
taken longer than its allowance::

    ML8S_S3_REQUEST_DEADLINE seconds + the bytes the request moved / MIN_RATE

Scaled by size, not flat, so that no honest transfer is cut however large: a download of any size at
``MIN_RATE`` or faster stays within its allowance, while a request that moves next to nothing ends at the
deadline. The bytes counted are those sent (known before sending) and those received so far (a GET's body),
never a size the server announces, which a hostile server would inflate.

An abandoned request cannot be cancelled: its thread (a daemon) ends when its read does (the endpoint sends
enough, closes, or is silent for the 30 s read timeout), and whatever it got is dropped: it writes nothing
(``Job.guard``) once the caller has taken its buffer back to try again. Closing its body from the caller would
wait for that read too (the buffered reader's lock), so it is left alone.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import TypeVar

from ml8s.errors import ConfigError
from ml8s.text import is_digits, quoted

VARIABLE = "ML8S_S3_REQUEST_DEADLINE"
DEFAULT_SECONDS = 300  # an honest small request answers in well under a second; a busy endpoint in seconds
MAX_SECONDS = 86_400
MIN_RATE = 1024 * 1024  # bytes a second a large transfer must average, after the deadline itself
_T = TypeVar("_T")


def request_deadline(env: Mapping[str, str]) -> int:
    """``ML8S_S3_REQUEST_DEADLINE`` in whole seconds; ConfigError naming it when it is no number in range."""
    text = env.get(VARIABLE, "").strip() or str(DEFAULT_SECONDS)
    if not is_digits(text) or len(text) > 6 or not 1 <= int(text) <= MAX_SECONDS:
        raise ConfigError(f"{VARIABLE}={quoted(text)}; expected a whole number of seconds from 1 to {MAX_SECONDS}")
    return int(text)


class Late(Exception):
    """A request still unanswered after its allowance (S3Base turns it into a StoreUnavailableError)."""

    def __init__(self, allowed: float) -> None:
        super().__init__(f"no complete answer within {allowed:.0f} s")
        self.allowed = allowed


class Job:
    """One request on its thread: ``received`` counts the body bytes in so far; ``guard`` is held while they are
    written, so a request abandoned by its caller never writes after the caller took its buffer back."""

    def __init__(self) -> None:
        self.received = 0
        self.guard = threading.Lock()
        self.abandoned = False

    def abandon(self) -> None:
        with self.guard:
            self.abandoned = True


def within(call: Callable[[Job], _T], *, seconds: float, sent: int) -> _T:
    """``call(job)`` run on its own thread, its result or its exception; :class:`Late` once it has run longer than
    ``seconds`` + (``sent`` + the bytes it received) / ``MIN_RATE``."""
    job, done = Job(), threading.Event()
    results: list[_T] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            results.append(call(job))
        except BaseException as exc:  # handed to the caller, which raises it
            errors.append(exc)
        finally:
            done.set()

    start = time.monotonic()
    threading.Thread(target=run, name="ml8s-s3-request", daemon=True).start()
    while True:
        allowed = seconds + (sent + job.received) / MIN_RATE
        left = start + allowed - time.monotonic()
        if done.wait(max(0.0, min(left, 1.0))):  # wakes each second: bytes received extend the allowance
            break
        if left <= 0:
            job.abandon()
            raise Late(allowed)
    if errors:
        raise errors[0]
    return results[0]
