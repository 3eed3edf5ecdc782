"""SIGTERM and SIGINT as an orderly stop, and child processes that end with their parent.

A command stopped by SIGTERM (a scheduler, ``kill``) or SIGINT (Ctrl-C) unwinds like an exception: every
``with`` block closes, so the ranks it started are terminated and reaped and its temp directories are
removed; the CLI then prints one line and exits 128 + the signal number (143, 130). A second signal while
unwinding is ignored, so that cleanup is never cut short. SIGKILL cannot be caught: what it leaves in
``$TMPDIR`` is removed by ``ml8s tmp-cleanup`` (:mod:`ml8s.tempdirs`), and the ranks die with their parent
(:func:`die_with_parent`).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import threading
from collections.abc import Iterator
from types import FrameType

PARENT_PID_VARIABLE = "ML8S_PARENT_PID"
_PR_SET_PDEATHSIG = 1


class Interrupted(KeyboardInterrupt):
    """The process received SIGTERM or SIGINT; raised where it was, to unwind to the command line."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + self.signum

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name


@contextlib.contextmanager
def stopping_on_signals() -> Iterator[None]:
    """While inside, SIGTERM and SIGINT raise :class:`Interrupted` (main thread only: Python delivers
    signals there; elsewhere this does nothing)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    fired: list[int] = []

    def handler(signum: int, frame: FrameType | None) -> None:
        if fired:
            return
        fired.append(signum)
        raise Interrupted(signum)

    previous = {signum: signal.signal(signum, handler) for signum in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)


def die_with_parent() -> None:
    """End this process when the process named by ML8S_PARENT_PID (the launcher that started it) ends.

    On Linux the kernel sends SIGKILL when the parent exits (``PR_SET_PDEATHSIG``); a parent that died
    before the request was made is caught by comparing ``getppid``. Elsewhere a daemon thread polls.
    """
    expected = os.environ.get(PARENT_PID_VARIABLE, "")
    if not expected.isdigit():
        return
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    else:
        threading.Thread(target=_watch_parent, args=(int(expected),), daemon=True).start()
    if os.getppid() != int(expected):
        os.kill(os.getpid(), signal.SIGKILL)


def _watch_parent(parent: int) -> None:
    import time

    while os.getppid() == parent:
        time.sleep(0.5)
    os.kill(os.getpid(), signal.SIGKILL)
