"""Files a user names on the command line for ml8s to write (``predict --output``, ``audit bundle -o``,
``chain keygen|root|anchor --out``).

- :func:`write_output` replaces a regular file whole or keeps it: a temporary file beside it, fsync, rename,
  then the directory fsynced, so a crash leaves the old file or the new one, never an empty or short one.
  The new file keeps the old one's permission bits (a new file gets ``0666 & ~umask``, as a shell
  redirection would; ``mkstemp`` alone gives 0600). A symlink is followed: its target is replaced and the
  link stays. Anything else that already exists (a character device such as ``/dev/stdout`` or
  ``/dev/null``, a FIFO) is written in place, never renamed over: as root, a rename onto ``/dev/full``
  replaced the device node itself with a regular file.
- :func:`replace_file` is that replacement alone, for a path known to be a regular file or none (the demo
  dataset's files).
- :func:`write_new` creates a file that must not exist yet (a private key, a trust root), with ``mode``;
  a failed write (a full disk) removes the partial file, so a retry is not refused with "File exists".

Both raise the error ``fail`` builds from the reason, so each command keeps its own error code.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from collections.abc import Callable

from ml8s.errors import Ml8sError
from ml8s.store import fsync_dir

__all__ = ["replace_file", "write_new", "write_output"]

Fail = Callable[[str], Ml8sError]
Step = Callable[[], None]


def write_output(path: str, data: bytes, fail: Fail) -> None:
    """Write ``data`` to the user-named ``path`` (module docstring); ``fail(reason)`` is raised on error."""
    try:
        existing: os.stat_result | None = os.stat(path)  # the kernel follows the links (/proc's magic ones too)
    except FileNotFoundError:
        existing = None
    except OSError as exc:
        raise fail(_reason(exc)) from exc
    if existing is not None and stat.S_ISDIR(existing.st_mode):
        raise fail("Is a directory")
    if existing is not None and not stat.S_ISREG(existing.st_mode):
        _write_in_place(path, data, fail)
        return
    target = os.path.realpath(path)  # a symlink's target is what the user means to replace; the link stays
    mode = stat.S_IMODE(existing.st_mode) if existing is not None else 0o666 & ~_umask()
    replace_file(target, data, mode, fail)


def write_new(path: str, data: bytes, mode: int, fail: Fail) -> None:
    """Create ``path`` (refused if anything is there, a dangling link included) holding ``data``, fsynced."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    except OSError as exc:
        raise fail(_reason(exc)) from exc
    _fill(fd, path, data, fail)
    _durable(os.path.dirname(os.path.abspath(path)), fail)


def replace_file(target: str, data: bytes, mode: int, fail: Fail) -> None:
    """Replace (or create) the regular file ``target`` whole, with permission bits ``mode``: a temporary file
    ``.{name}.*.tmp`` beside it, fsynced, renamed over it, the directory fsynced. An interrupted write removes
    its temporary file."""
    directory = os.path.dirname(target) or "."
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(target)}.", suffix=".tmp", dir=directory)
    except OSError as exc:
        raise fail(_reason(exc)) from exc
    _fill(fd, tmp, data, fail, mode=mode, then=lambda: os.replace(tmp, target))
    _durable(directory, fail)


def _fill(fd: int, path: str, data: bytes, fail: Fail, *, mode: int | None = None, then: Step | None = None) -> None:
    """Write ``data`` to the new file ``fd`` (at ``path``), set ``mode``, fsync, close, then ``then``; on any
    failure or interruption the file at ``path`` is removed (``fail`` raised for an OSError)."""
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            if mode is not None:
                os.fchmod(handle.fileno(), mode)
            os.fsync(handle.fileno())
        if then is not None:
            then()
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(path)
        if isinstance(exc, OSError):
            raise fail(_reason(exc)) from exc
        raise


def _write_in_place(target: str, data: bytes, fail: Fail) -> None:
    try:
        with open(target, "wb") as handle:
            handle.write(data)
    except OSError as exc:
        raise fail(_reason(exc)) from exc


def _durable(directory: str, fail: Fail) -> None:
    """The new name survives a crash (``ml8s.store.fsync_dir``)."""
    try:
        fsync_dir(directory)
    except OSError as exc:
        raise fail(_reason(exc)) from exc


def _umask() -> int:
    """The process's umask, read without changing it where Linux shows it (``os.umask`` can only set it, and
    setting it for a moment would race a thread creating a file meanwhile)."""
    with contextlib.suppress(OSError, ValueError), open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    current = os.umask(0o022)
    os.umask(current)
    return current


def _reason(exc: OSError) -> str:
    return exc.strerror or str(exc)
