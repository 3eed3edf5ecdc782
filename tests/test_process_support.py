"""The warm fork server (process_support) imports its preload itself, so that the processes it forks start without
importing ml8s, boto3 and torch again.

Python 3.11's fork server is handed the parent's sys.path and drops it: it searched only its own (PYTHONPATH, the
working directory), where tests/ is not when pytest runs from the repository root, and an ImportError of a
preloaded module is silently ignored there. Every fork then imported the support modules (0.55 CPU s each) when
it unpickled its target, 16 at a time.
"""

from __future__ import annotations

import os

from process_support import PRELOAD
from test_chain_support import preload_worker, spawn_all


def test_forks_find_the_preload_imported_by_the_server() -> None:
    outcomes = list(spawn_all(preload_worker, [(), ()]))
    for pid, server, imported_in in outcomes:
        assert server != os.getpid()  # forked by the server, not by this process
        assert imported_in == {name: server for name in PRELOAD}, (pid, server, imported_in)
