"""The boto3 clients of one S3 store: one per number of tries botocore may make of a request.

A request's tries are one count, AWS_MAX_ATTEMPTS, whether botocore retries it (a timeout, a 5xx) or the store
tries again after a late answer (:mod:`.deadline`). A request running in a :class:`~.deadline.Job` goes through
the client whose botocore retries stop at the tries the job may make (the tries the request has left); a client
for a count not asked for before (after a late answer) is made before that job's deadline starts. Every client
counts the tries its job sends, and sends none for an abandoned job.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from botocore.config import Config

from ml8s.store.s3.deadline import Job, count_attempt, running_job

if TYPE_CHECKING:
    import boto3
    from mypy_boto3_s3 import S3Client


class Clients:
    """The clients of ``session`` at ``endpoint`` (None: AWS), each with ``config`` but its own number of tries.

    ``tries``: a request's tries (AWS_MAX_ATTEMPTS); ``on_retry``: botocore's ``needs-retry`` handler;
    ``on_build``: a ``before-parameter-build`` handler run last, or None."""

    def __init__(
        self,
        session: boto3.session.Session,
        endpoint: str | None,
        config: Config,
        tries: int,
        *,
        on_retry: Callable[..., None],
        on_build: Callable[..., None] | None,
    ) -> None:
        self._session, self._endpoint, self._config, self.tries = session, endpoint, config, tries
        self._on_retry, self._on_build = on_retry, on_build
        self._made: dict[int, S3Client] = {}
        self._lock = threading.Lock()
        for made in sorted({1, tries}):  # a conditional write's one try, and every request's first: made now
            self.with_tries(made)

    def with_tries(self, tries: int) -> S3Client:
        """The client whose botocore makes at most ``tries`` tries of a request."""
        with self._lock:
            if tries not in self._made:
                config = self._config.merge(Config(retries={"mode": "standard", "total_max_attempts": tries}))
                client = self._session.client("s3", endpoint_url=self._endpoint, config=config)
                client.meta.events.register("needs-retry.s3", self._on_retry)
                client.meta.events.register("before-send.s3", count_attempt)
                if self._on_build is not None:
                    client.meta.events.register_last("before-parameter-build.s3", self._on_build)
                self._made[tries] = client
            return self._made[tries]

    def job(self, *, first: int, limit: int) -> Job:
        """A job for tries ``first`` to ``first + limit - 1`` of a request, its client made already: not on the
        time its deadline gives (a new client takes a fifth of a second, more on a loaded machine)."""
        self.with_tries(min(limit, self.tries))
        return Job(first=first, limit=limit)

    def running(self) -> S3Client:
        """The client for the request running on this thread: as many tries as its job may make (all, outside one)."""
        job = running_job()
        return self.with_tries(min(job.limit, self.tries) if job else self.tries)
