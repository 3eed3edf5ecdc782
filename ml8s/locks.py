"""Exclusive file locks (the kernel's ``flock``): by path through the ``filelock`` library, on an open
descriptor by hand where filelock does not fit.

:func:`path_lock` is how ml8s locks a file it names by its path: the registration lock beside a sqlite MLflow and a
follower's ``.follower.lock``. filelock opens the file ``O_NOFOLLOW`` (a symbolic link planted there fails the lock
with ELOOP: it is never followed to create or lock a file elsewhere) and ``O_NONBLOCK`` (a FIFO planted there cannot
hang the open; it is locked like a file, by everyone who opens that path), creates it and its directories with the
umask's permissions, and leaves it in place on release (unlinking it would let a waiter lock a new file of that name
beside the holder's). Two locks of one path exclude each other in one process as in two (each opens its own file
description); a thread taking a path it already holds through another lock gets a RuntimeError where the kernel
would deadlock. A forked child closes its copy without unlocking. On NFS it is the same ``flock`` as by hand: the
client turns it into a lock the server knows, or fails with ENOLCK where the mount has none.

:func:`lock_at` locks a file by an open directory and a name, for the local store's per-key locks: the store's
writes never resolve a path through a link a store writer may plant (ml8s/store/_tree.py), which filelock does.
It opens as filelock does (``O_NOFOLLOW | O_NONBLOCK``, created 0644 less the umask, left in place) and waits in
the kernel's ``flock``; the store never takes a key's lock twice in one thread.

:func:`flock_fd` is the other hand-written lock, for :mod:`ml8s.tempdirs`' owner files, which filelock cannot serve.
The owner lock is taken on a staged file that is then renamed to its final name, so that ``tmp-cleanup`` never
finds that name unlocked while its process lives; filelock ties a lock to one path. And ``tmp-cleanup``'s probe of a
directory in ``$TMPDIR`` (anyone's) must never create the owner file (filelock opens with ``O_CREAT``: a file made
in a live process's directory before its own owner file arrives would be found unlocked, and the directory removed)
and must refuse anything but a regular file, where filelock locks a FIFO.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator

from filelock import FileLock


def path_lock(path: str) -> FileLock:
    """An exclusive lock of the file at ``path``, not yet taken (``acquire``, or ``with``).

    ``acquire`` raises ``filelock.Timeout`` (a ``TimeoutError``, so an ``OSError``: catch it first) when another
    holds the lock past its timeout, and ``OSError`` when the file cannot be opened or locked. Never a soft lock:
    filelock's fallback where the filesystem has no ``flock`` (ENOSYS) leaves a marker that a killed holder never
    removes, which every later writer would wait on; the ENOSYS is raised instead, as before filelock."""
    return FileLock(path, fallback_to_soft=False)


def flock_fd(fd: int, *, wait: bool) -> bool:
    """Lock the open file ``fd`` exclusively; False when another open file of it holds the lock (never with
    ``wait``, which waits for it). Released when every descriptor of that open file is closed."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


@contextlib.contextmanager
def lock_at(dir_fd: int, name: str) -> Iterator[None]:
    """Hold an exclusive lock of the file ``name`` in the directory ``dir_fd`` (module docstring); OSError when it
    cannot be opened or locked (ELOOP: a symbolic link there, never followed)."""
    while True:
        fd = os.open(name, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o644, dir_fd=dir_fd)
        try:
            flock_fd(fd, wait=True)
            if os.fstat(fd).st_nlink:
                break
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)  # unlinked while we waited (an operator's cleanup): it guards no name, open it again
    try:
        yield
    finally:
        os.close(fd)
