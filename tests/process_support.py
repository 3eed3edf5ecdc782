"""Processes for the tests that race many of them: forked from one warm server per test worker.

multiprocessing's fork server imports the support modules (ml8s.chain, boto3, torch) once; each process it
forks is still a separate process with its own memory, pid, store clients and file descriptors, racing the
others through the store alone, but it starts in milliseconds instead of the 0.8 to 3 CPU seconds of a fresh
interpreter's imports. A test that proves bytes do not depend on the process starts fresh interpreters
instead (``spawn``): forks of one server share its hash seed.

The server is started once per worker, with the first use's preload: the list is one constant so that
whichever test starts it, every later one finds its modules imported.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Iterable
from multiprocessing.context import ForkServerContext, SpawnContext
from multiprocessing.process import BaseProcess

PRELOAD = ("test_chain_support", "serving_support")


def process_context(*, fresh: bool = False) -> ForkServerContext | SpawnContext:
    """The fork server's context, or with ``fresh`` the spawn context (a fresh interpreter per process)."""
    if fresh:
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(list(PRELOAD))
    return context


def reap(processes: Iterable[BaseProcess], timeout: float) -> None:
    """Wait for each process up to ``timeout`` seconds, and kill one still running then (a hung racer must not
    outlive its test)."""
    for process in processes:
        process.join(timeout=timeout)
        if process.is_alive():
            process.kill()
            process.join()
