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

A late request is tried again, and botocore retries a failed one (a timeout, a 5xx): both draw on one count,
AWS_MAX_ATTEMPTS tries for the request. Each :class:`Job` may make the tries the request has left, botocore's
retries included (its client's, :mod:`.clients`; :func:`count_attempt` counts them): when each layer had its
own count, a hung endpoint (it accepts and never answers) took up to AWS_MAX_ATTEMPTS x AWS_MAX_ATTEMPTS tries,
each a 30 s read timeout, and up to AWS_MAX_ATTEMPTS x the deadline (20 x 300 s, where the tries allowed
20 x 35 s). Now a request ends within AWS_MAX_ATTEMPTS tries, each at most the 5 s connect and 30 s read
timeouts or the deadline, whichever ends first, plus botocore's back-off between them.

An abandoned request cannot be cancelled: its thread (a daemon) ends when its read does (the endpoint sends
enough, closes, or is silent for the 30 s read timeout), tries nothing more, and whatever it got is dropped: it
writes nothing (``Job.guard``) once the caller has taken its buffer back to try again. Closing its body from the
caller would wait for that read too (the buffered reader's lock), so it is left alone.
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


class Abandoned(Exception):
    """Raised on an abandoned request's thread instead of sending another try (nobody waits for its outcome)."""


class Job:
    """One request on its thread: ``received`` counts the body bytes in so far; ``guard`` is held while they are
    written, so a request abandoned by its caller never writes after the caller took its buffer back.

    ``first`` is the number of its first try among the request's, ``limit`` how many tries it may make (botocore's
    retries included), ``started`` how many it has sent."""

    def __init__(self, first: int = 1, limit: int = 1) -> None:
        self.received = 0
        self.guard = threading.Lock()
        self.abandoned = False
        self.first, self.limit, self.started = first, limit, 0

    def abandon(self) -> None:
        with self.guard:
            self.abandoned = True

    @property
    def used(self) -> int:
        """The tries it took: one at least (a request late before it was sent still took its time)."""
        return max(1, self.started)


_running = threading.local()


def running_job() -> Job | None:
    """The job whose thread this is (botocore's event handlers run on it), or None outside :func:`within`."""
    job = getattr(_running, "job", None)
    return job if isinstance(job, Job) else None


def count_attempt(**kwargs: object) -> None:
    """botocore's ``before-send``: one more try of the running job; an abandoned job sends none."""
    job = running_job()
    if job is None:
        return
    if job.abandoned:
        raise Abandoned()
    job.started += 1


def within(call: Callable[[Job], _T], *, seconds: float, sent: int, job: Job | None = None) -> _T:
    """``call(job)`` run on its own thread, its result or its exception; :class:`Late` once it has run longer than
    ``seconds`` + (``sent`` + the bytes it received) / ``MIN_RATE``. ``job``: its tries (default: one)."""
    job, done = job or Job(), threading.Event()
    results: list[_T] = []
    errors: list[BaseException] = []

    def run() -> None:
        _running.job = job
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
