"""How an ml8s process ends: Python's own shutdown, then no C++ static destructors.

Native thread pools (Arrow's, which parses the CSV files and writes Parquet; torch's) are torn down by
C++ static destructors when a process exits normally, and now and then one of them still holds a joinable
thread: ``std::terminate``, "terminate called without an active exception" and SIGABRT (exit -6), after the
command had already done its work and printed its result or its error (a known, open Arrow issue). So the
command-line entry points end with :func:`end_process`: the atexit functions run (logging flushed, temp
directories removed, multiprocessing children joined), both streams are flushed, and the process exits
with its code through ``os._exit``, which runs no C++ destructor. Every file ml8s writes is fsynced and
closed before this point, so nothing durable depends on those destructors.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
from typing import NoReturn


def end_process(code: int) -> NoReturn:
    """Run the atexit functions, flush stdout and stderr, and exit with ``code`` (module docstring)."""
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        # A closed pipe or stream, a full disk (the command has reported it): nothing left to say there.
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)
