"""SIGTERM, SIGINT and SIGHUP as an orderly stop, and child processes that end with their parent.

A command stopped by SIGTERM (a scheduler, ``kill``), SIGINT (Ctrl-C) or SIGHUP (its terminal closed: an ssh
session that dropped) unwinds like an exception: every ``with`` block closes, so the ranks it started are
terminated and reaped and its temp directories are removed; the CLI then prints one line and exits 128 + the
signal number (143, 130, 129). SIGHUP is left alone where it is ignored (``nohup ml8s run``). A second signal while
unwinding is ignored, so that cleanup is never cut short. Where something is created and then recorded for
cleanup (a child process started, a temp directory made), :func:`signals_deferred` holds the signal until
both are done: a signal between the two would leave the thing with nobody to clean it up.

SIGKILL cannot be caught: what it leaves in ``$TMPDIR`` is removed by ``ml8s tmp-cleanup``
(:mod:`ml8s.tempdirs`), and the ranks die with their parent (:func:`die_with_parent`).
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
    """The process received SIGTERM, SIGINT or SIGHUP; raised where it was, to unwind to the command line."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + self.signum

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name


class _Fired:
    """The signal :func:`stopping_on_signals` last turned into :class:`Interrupted`, kept after it returns."""

    signum: int | None = None


def interrupted() -> Interrupted | None:
    """The stop a signal caused in the last :func:`stopping_on_signals` block, even where code it ran turned the
    :class:`Interrupted` into its own error: a C extension importing when the signal came answers ``ImportError:
    import numpy failed`` or ``initialization failed``, not the interrupt (None: no signal came)."""
    return None if _Fired.signum is None else Interrupted(_Fired.signum)


class _Deferral:
    """The main thread's deferral state: how deep in :func:`signals_deferred`, and the signal held."""

    depth = 0
    held: int | None = None


@contextlib.contextmanager
def stopping_on_signals() -> Iterator[None]:
    """While inside, SIGTERM, SIGINT and (unless ignored) SIGHUP raise :class:`Interrupted` (main thread only:
    Python delivers signals there; elsewhere this does nothing)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    fired: list[int] = []
    _Fired.signum = None

    def handler(signum: int, frame: FrameType | None) -> None:
        if fired:
            return
        fired.append(signum)
        _Fired.signum = signum
        if _Deferral.depth:
            _Deferral.held = signum
            return
        raise Interrupted(signum)

    stops = [signal.SIGTERM, signal.SIGINT]
    if signal.getsignal(signal.SIGHUP) is not signal.SIG_IGN:  # nohup: the caller asked to outlive the terminal
        stops.append(signal.SIGHUP)
    previous = {signum: signal.signal(signum, handler) for signum in stops}
    try:
        yield
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)


@contextlib.contextmanager
def signals_deferred() -> Iterator[None]:
    """Inside, a SIGTERM or SIGINT that :func:`stopping_on_signals` would raise is held, and raised on leaving.

    For the few lines that create something and record it for cleanup (``procs.append(Popen(...))``), so
    that a signal cannot fall between the two: the caller's ``finally`` then always knows what to clean.
    Only the main thread defers (signals are delivered there); elsewhere this does nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _Deferral.depth += 1
    try:
        yield
    finally:
        _Deferral.depth -= 1
        held, _Deferral.held = (_Deferral.held, None) if _Deferral.depth == 0 else (None, _Deferral.held)
        if held is not None:
            raise Interrupted(held)


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
