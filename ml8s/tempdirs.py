"""Local temporary directories that ``ml8s tmp-cleanup`` can tell from a live process's.

Every scratch directory ml8s makes in ``$TMPDIR`` (``ml8s-<RUN_ID>-*``, ``ml8s-ranks-*``,
``ml8s-mlflow-model-*``, ``ml8s-pyfunc-*`` ...) holds an owner file that its process keeps locked with
``flock`` for as long as the directory lives. The kernel drops that lock when the process dies, however it
dies (SIGKILL included), so a directory whose owner lock can be taken belongs to a dead process: no
clock, no process id (which the kernel reuses) and no age decides it. Children started with
``subprocess`` (the ranks) never inherit the lock: Python opens file descriptors non-inheritable. The lock is
taken by hand (:func:`ml8s.locks.flock_fd`, which says why ``filelock`` does not fit).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator

from ml8s.interrupts import signals_deferred
from ml8s.locks import flock_fd

OWNER_FILE = ".ml8s-owner"
PREFIX = "ml8s-"


@contextlib.contextmanager
def owned_tempdir(prefix: str) -> Iterator[str]:
    """Like ``tempfile.TemporaryDirectory(prefix=prefix)``, with the owner lock held while inside."""
    path, fd = "", -1
    try:
        with signals_deferred():  # a directory made is a directory the finally removes
            path = tempfile.mkdtemp(prefix=prefix)
            # locked under another name first: tmp-cleanup must never find the owner file unlocked while we live
            staged = os.path.join(path, OWNER_FILE + ".new")
            fd = os.open(staged, os.O_RDWR | os.O_CREAT, 0o600)
        flock_fd(fd, wait=True)
        os.write(fd, f"{os.getpid()}\n".encode())
        os.rename(staged, os.path.join(path, OWNER_FILE))
        yield path
    finally:
        if path:
            shutil.rmtree(path, ignore_errors=True)
        if fd >= 0:
            os.close(fd)


def owner_gone(path: str) -> bool:
    """True when ``path`` is an ml8s temp directory whose owning process has ended (its lock is free).

    A directory without an owner file is never judged gone: it is not ml8s's, or its owner is between
    ``mkdtemp`` and taking the lock.
    """
    try:
        # $TMPDIR is anyone's: a FIFO planted as the owner file would block a plain open (and the cleanup) forever
        fd = os.open(os.path.join(path, OWNER_FILE), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        return stat.S_ISREG(os.fstat(fd).st_mode) and flock_fd(fd, wait=False)
    except OSError:
        return False
    finally:
        os.close(fd)


def dead_tempdirs(directory: str | None = None) -> list[str]:
    """The ml8s temp directories in ``directory`` (default ``$TMPDIR``) whose owners have ended, sorted."""
    base = directory or tempfile.gettempdir()
    try:
        names = sorted(os.listdir(base))
    except OSError:
        return []
    found = []
    for name in names:
        path = os.path.join(base, name)
        if name.startswith(PREFIX) and os.path.isdir(path) and not os.path.islink(path) and owner_gone(path):
            found.append(path)
    return found
