"""Processes for the tests that race many of them: forked from one warm server per test worker.

multiprocessing's fork server imports the support modules (ml8s.chain, boto3, torch) once; each process it
forks is still a separate process with its own memory, pid, store clients and file descriptors, racing the
others through the store alone, but it starts in milliseconds instead of the 0.8 to 3 CPU seconds of a fresh
interpreter's imports. A test that proves bytes do not depend on the process starts fresh interpreters
instead (``spawn``): forks of one server share its hash seed.

The server is started once per worker, with the first use's preload: the list is one constant so that
whichever test starts it, every later one finds its modules imported. Python 3.11's server is handed the
parent's sys.path but never sets it (forkserver.main drops it), and it ignores a preload that does not import:
it is started with this folder on its PYTHONPATH, else under pytest (run from the repository root) it found
none of them and every fork imported them itself (0.55 CPU s each, torch more) as it unpickled its target.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.forkserver
import os
from collections.abc import Iterable
from multiprocessing.context import ForkServerContext, SpawnContext
from multiprocessing.process import BaseProcess

PRELOAD = ("test_chain_support", "serving_support")
TESTS = os.path.dirname(os.path.abspath(__file__))


def process_context(*, fresh: bool = False) -> ForkServerContext | SpawnContext:
    """The fork server's context, or with ``fresh`` the spawn context (a fresh interpreter per process)."""
    if fresh:
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(list(PRELOAD))
    _ensure_server()
    return context


def _ensure_server() -> None:
    """Start the fork server (if it is not running) with this folder on its PYTHONPATH, then restore ours."""
    before = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (TESTS, before) if p)
    try:
        multiprocessing.forkserver.ensure_running()
    finally:
        if before is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = before


def reap(processes: Iterable[BaseProcess], timeout: float) -> None:
    """Wait for each process up to ``timeout`` seconds, and kill one still running then (a hung racer must not
    outlive its test)."""
    for process in processes:
        process.join(timeout=timeout)
        if process.is_alive():
            process.kill()
            process.join()
