"""The ``ml8s`` command's standard streams: closed ones reopened, stdout's write errors named.

stdout carries a command's one result (a manifest, a table, JSON) for scripts to read; stderr carries the
progress and the ``ml8s: CODE: message`` line. Three ways they used to break:

- A stream the caller closed (``ml8s run >&-``, ``2>&-``). Python then sets ``sys.stdout`` or ``sys.stderr``
  to None, and ``print(..., file=sys.stderr)`` falls back to stdout, so the progress lines landed in the
  manifest a script was reading. Worse, the next file ml8s opened took the free descriptor 1 or 2, and a
  child process (a training rank, a tool) writing "to its stdout" wrote into that file. Every closed
  descriptor 0-2 is therefore reopened on the null device first, as daemons do; a closed stdout is then
  refused before any work (:func:`closed_stdout_error`), since the result would be lost.
- A stdout that fails to take the result (a full disk, an I/O error): an ``OSError`` deep in ``print``,
  reported as an ml8s bug. :class:`NamedStdout` turns it into an :class:`~ml8s.errors.OutputError`, as it does
  a result its encoding cannot hold (``PYTHONIOENCODING=ascii``, a Latin-1 locale: JSON with an ``é``). A closed
  pipe (``| head``) stays a ``BrokenPipeError``: ending quietly is what Unix tools do there.
- A stderr that fails (``2>/dev/full``): the first progress line raised and the command died without its
  result. :class:`QuietStderr` drops what it cannot write; the result and the exit status still arrive.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys

from ml8s.errors import OutputError

__all__ = ["NamedStdout", "QuietStderr", "closed_stdout_error", "output_failed", "prepare_streams", "write_binary"]


def prepare_streams() -> OutputError | None:
    """Reopen closed descriptors 0-2 on the null device; wrap stdout (:class:`NamedStdout`) and stderr
    (:class:`QuietStderr`).

    Returns:
        The error to report when stdout was closed (the command must not run), else None.
    """
    closed = [fd for fd in (0, 1, 2) if not _open(fd)]
    for fd in closed:
        null = os.open(os.devnull, os.O_RDWR)
        if null != fd:  # the lowest free descriptor: it is ``fd`` itself unless a lower one is closed too
            os.dup2(null, fd)
            os.close(null)
    if 0 in closed or sys.stdin is None:
        sys.stdin = open(0, encoding="utf-8", closefd=False)
    if 2 in closed or sys.stderr is None:
        sys.stderr = open(2, "w", encoding="utf-8", errors="backslashreplace", closefd=False)
    if isinstance(sys.stderr, io.TextIOWrapper):
        sys.stderr = QuietStderr(sys.stderr)
    if 1 in closed or sys.stdout is None:
        sys.stdout = open(1, "w", encoding="utf-8", closefd=False)  # the null device now
        return closed_stdout_error()
    if isinstance(sys.stdout, io.TextIOWrapper):  # else someone already replaced it (an embedding host): kept
        sys.stdout = NamedStdout(sys.stdout)
    return None


def write_binary(data: bytes) -> None:
    """``data`` to stdout's byte stream, after the text written before it (a Parquet file, encoded CSV): a failed
    write is an :class:`~ml8s.errors.OutputError` here too, since it bypasses :class:`NamedStdout`'s text layer."""
    sys.stdout.flush()
    try:
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
    except BrokenPipeError:
        raise
    except OSError as exc:
        raise output_failed(exc) from exc


def closed_stdout_error() -> OutputError:
    return OutputError(
        "standard output is closed; expected it open (the command prints its result there): redirect it to a "
        "file, or to /dev/null to discard the result. Nothing was done"
    )


def _open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


class _Rewrapped(io.TextIOWrapper):
    """A new text layer over an existing stream's buffer, with its encoding and buffering."""

    def __init__(self, wrapper: io.TextIOWrapper) -> None:
        with contextlib.suppress(OSError):  # nothing is printed before the command starts; never fail on it
            wrapper.flush()
        super().__init__(
            wrapper.buffer,
            encoding=wrapper.encoding,
            errors=wrapper.errors,
            line_buffering=wrapper.line_buffering,
            write_through=wrapper.write_through,
        )


class NamedStdout(_Rewrapped):
    """``sys.stdout`` whose failed writes and flushes raise a named :class:`~ml8s.errors.OutputError` (a
    closed pipe stays a ``BrokenPipeError``)."""

    def write(self, text: str) -> int:
        try:
            return super().write(text)
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise output_failed(exc) from exc
        except UnicodeEncodeError as exc:  # PYTHONIOENCODING=ascii, a Latin-1 locale: an INTERNAL_ERROR before
            raise OutputError(
                f"standard output's encoding ({self.encoding}) cannot write {exc.object[exc.start : exc.end]!r} of "
                "the command's result; expected an encoding that holds it: set PYTHONIOENCODING=utf-8 (or a UTF-8 "
                "locale) and run it again (what it printed there is incomplete)"
            ) from exc

    def flush(self) -> None:
        try:
            super().flush()
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise output_failed(exc) from exc


class QuietStderr(_Rewrapped):
    """``sys.stderr`` that drops what it cannot write: progress and error lines are for people, and a stderr
    on a full disk must not fail a command whose result and exit status are still delivered."""

    def write(self, text: str) -> int:
        try:
            return super().write(text)
        except OSError:
            return len(text)

    def flush(self) -> None:
        with contextlib.suppress(OSError):
            super().flush()


def output_failed(exc: OSError) -> OutputError:
    """The error of a write to stdout that failed (a full disk, an I/O error)."""
    reason = exc.strerror or str(exc)
    return OutputError(
        f"writing to standard output failed ({reason}); expected it to take the command's whole result: what "
        "it printed there is incomplete (its other writes are not affected; run it again to print the result)"
    )
