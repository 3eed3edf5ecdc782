"""One logging setup for the CLI, the Flyte tasks and the tests: the ``ml8s`` logger to stderr, for people.

A line is ``2026-01-02T03:04:05.678Z +12.3s INFO  [train] epoch 3/10 loss 0.512``: the UTC time, the
seconds since the process started logging, the level, the step and the message. The run's id and hash are
logged once, when bootstrap has computed them, not on every line. A line at INFO or below never exceeds
:data:`MAX_LINE` characters (a longer message is clipped with "…"; warnings and errors are kept whole).

None of it enters an artifact: the lines go to stderr only, so timestamps and timings cannot reach a hash.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import resource
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import ParamSpec, TextIO, TypeVar

from ml8s.errors import ConfigError, Ml8sError, without_credentials
from ml8s.text import terminal_text

LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
MAX_LINE = 160
"""The longest line of ours at INFO (a terminal's width, twice)."""

_P = ParamSpec("_P")
_R = TypeVar("_R")
_logger = logging.getLogger("ml8s")


class _Ml8sHandler(logging.StreamHandler[TextIO]):
    """Marks the handler configure() adds, so calling it twice adds one handler."""


class HumanFormatter(logging.Formatter):
    """``time +elapsed LEVEL [step] message``; INFO lines clipped at :data:`MAX_LINE`."""

    def format(self, record: logging.LogRecord) -> str:
        clock = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        millis = int(record.created * 1000) % 1000
        step = getattr(record, "step", "")
        head = f"{clock}.{millis:03d}Z +{record.relativeCreated / 1000:.1f}s {record.levelname:<5}"
        line = f"{head} [{step}] {record.getMessage()}" if step else f"{head} {record.getMessage()}"
        if record.exc_info:
            line = f"{line}\n{self.formatException(record.exc_info)}"
        line = without_credentials(line)  # a library's line may name a tracking URL with its password
        # a file, column or model name with a newline forged a log line of its own, an escape sequence reached the
        # terminal: escaped as the CLI's error lines are
        line = terminal_text(line)
        if record.levelno <= logging.INFO and len(line) > MAX_LINE:
            line = line[: MAX_LINE - 1] + "…"
        return line


def configure(level: str | None = None) -> None:
    """Send the ``ml8s`` logger to stderr once (idempotent); ML8S_LOG_LEVEL overrides the level.

    A misspelt ML8S_LOG_LEVEL is a ConfigError naming it, even where ``level`` overrides it: a user who set
    it expects it to mean something (and a CLI error prints its traceback only for DEBUG)."""
    setting = os.environ.get("ML8S_LOG_LEVEL", "").strip().upper()
    if setting and setting not in LEVELS:
        raise ConfigError(
            f"ML8S_LOG_LEVEL={os.environ['ML8S_LOG_LEVEL']!r} is invalid; expected one of {', '.join(LEVELS)}"
        )
    _logger.setLevel((level or setting or "INFO").upper())
    if not any(isinstance(h, _Ml8sHandler) for h in _logger.handlers):
        handler = _Ml8sHandler(sys.stderr)
        handler.setFormatter(HumanFormatter())
        _logger.addHandler(handler)
        _logger.propagate = False


def step_info(step: str, message: str) -> None:
    """One INFO line of ``step``."""
    _logger.info("%s", message, extra={"step": step})


def peak_rss_mib() -> float:
    """The peak resident memory of this process or of its largest finished child (rank processes), in MiB."""
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return max(own, children) / 1024  # Linux reports KiB


@contextlib.contextmanager
def timing(step: str) -> Iterator[None]:
    """Log the step's wall time and the peak RSS when it ends (and that it failed, when it raises: at DEBUG for
    a named ml8s error, which the caller reports in its own words)."""
    start = time.monotonic()
    try:
        yield
    except BaseException as exc:
        # A named error is the command's one line already (a CLI user sees it alone); its timing is for DEBUG.
        level = logging.DEBUG if isinstance(exc, Ml8sError) else logging.INFO
        message = f"failed after {time.monotonic() - start:.1f}s, peak RSS {peak_rss_mib():.0f} MiB"
        _logger.log(level, "%s", message, extra={"step": step})
        raise
    step_info(step, f"done in {time.monotonic() - start:.1f}s, peak RSS {peak_rss_mib():.0f} MiB")


@contextlib.contextmanager
def heartbeat(step: str, waiting_on: str, every_s: float = 30.0) -> Iterator[None]:
    """While inside, log "still waiting on <waiting_on>: N s so far" every ``every_s`` seconds.

    For waits on another service whose client says nothing while it retries (MLflow's waits up to minutes
    per request): the user sees that the step is alive and what it waits on. A wait shorter than
    ``every_s`` logs nothing.
    """

    def say(waited: float) -> None:
        step_info(step, f"still waiting on {waiting_on}: {waited:.0f}s so far")

    with while_waiting(say, first_s=every_s, every_s=every_s, name=f"ml8s-heartbeat-{step}"):
        yield


@contextlib.contextmanager
def while_waiting(
    say: Callable[[float], None], *, first_s: float, every_s: float, name: str, since: float | None = None
) -> Iterator[None]:
    """While inside, call ``say(seconds since since)`` after ``first_s`` seconds, then every ``every_s``, from a
    daemon thread named ``name`` (stopped and joined on leaving). ``since`` defaults to entering."""
    done, start = threading.Event(), time.monotonic() if since is None else since

    def watch() -> None:
        wait = first_s
        while not done.wait(wait):
            say(time.monotonic() - start)
            wait = every_s

    thread = threading.Thread(target=watch, name=name, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


def timed(step: str) -> Callable[[Callable[_P, _R]], Callable[_P, _R]]:
    """Decorate a pipeline step so that it logs its wall time and peak RSS when it ends (see :func:`timing`)."""

    def wrap(function: Callable[_P, _R]) -> Callable[_P, _R]:
        @functools.wraps(function)
        def run(*args: _P.args, **kwargs: _P.kwargs) -> _R:
            with timing(step):
                return function(*args, **kwargs)

        return run

    return wrap


@contextlib.contextmanager
def stdout_to_stderr() -> Iterator[None]:
    """Send what libraries print on stdout (MLflow's "View run …" lines) to stderr while inside.

    stdout carries a command's one result (the manifest JSON, a table); anything printed at the Python level
    meanwhile goes to stderr instead.
    """
    with contextlib.redirect_stdout(sys.stderr):
        yield
