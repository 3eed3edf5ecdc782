"""Per-column work of the data path on every core, with the results and errors of doing it one column at a time.

After the files are parsed, the data path works a column at a time: typing a column over all files, keeping a
column's rows, fitting a column's features. Each column's result depends on that column alone, and numpy's and
Arrow's kernels release the GIL, so two columns can run at once on two cores.

:func:`in_order` does that and keeps what a caller could see of the order: the results come back in the order of
the items, and when items fail, the error raised is the first failing item's in that order (the one a loop would
have raised), whatever finished first. Items not yet started when one fails are not started.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import numpy as np
import numpy.typing as npt

__all__ = ["COLUMN_THREADS", "ThreadArrays", "in_order", "lower_priority"]

_T = TypeVar("_T")
_Item = TypeVar("_Item", bound=np.generic)
_R = TypeVar("_R")

# Two: both cores of the 2-core machine the memory bounds are set for (docs/sizing.md). Each thread holds one
# column's temporaries, so more threads would raise the peak by a column each.
COLUMN_THREADS = max(1, min(2, os.cpu_count() or 1))


def in_order(
    function: Callable[[_T], _R], items: Sequence[_T], *, threads: int, name: str, lead: int | None = None
) -> list[_R]:
    """``[function(item) for item in items]``, run on up to ``threads`` threads (named ``ml8s-{name}``).

    ``lead``: the index of an item started before the others (a caller that wants that item's work done early,
    by a side effect of ``function``); the results and the error raised are those of the loop all the same.

    Raises:
        Exception: the first item's error, in the order of ``items``, among those that failed.
    """
    order = list(range(len(items)))
    if lead is not None:
        order.insert(0, order.pop(lead))
    failed: list[int] = []  # the items that failed so far
    lock = threading.Lock()

    def run(index: int) -> _R | _Skipped:
        with lock:
            if failed and min(failed) < index:  # an item before it failed: its error is the one raised
                return _SKIPPED
        try:
            return function(items[index])
        except Exception:
            with lock:
                failed.append(index)
            raise

    if threads <= 1 or len(items) <= 1:
        outcomes: dict[int, _R | _Skipped | _Failed] = {}
        for index in order:
            try:
                outcomes[index] = run(index)
            except Exception as exc:  # raised below, in the order of the items
                outcomes[index] = _Failed(exc)
        return [_result(outcomes[index]) for index in range(len(items))]
    with ThreadPoolExecutor(min(threads, len(items)), thread_name_prefix=f"ml8s-{name}") as pool:
        futures = {index: pool.submit(run, index) for index in order}
        try:
            return [_result(futures[index].result()) for index in range(len(items))]
        finally:
            for future in futures.values():  # after a failure, the items not yet started are not run
                future.cancel()


class _Skipped:
    """The outcome of an item not run because an item before it had failed."""


_SKIPPED = _Skipped()


class _Failed:
    """The outcome of an item that raised ``error`` (run without threads: raised in the order of the items)."""

    def __init__(self, error: Exception) -> None:
        self.error = error


def _result(outcome: _R | _Skipped | _Failed) -> _R:
    if isinstance(outcome, _Failed):
        raise outcome.error
    if isinstance(outcome, _Skipped):  # never reached: the failure before it is raised first
        raise RuntimeError("an item after a failed one was asked for its result")
    return outcome


class ThreadArrays:
    """Arrays each thread makes once and reuses, by name: per-column work on several threads (fitting, writing
    the hand-over's rows) reuses its arrays from one column or slice to the next, where an array per use was fresh
    memory the kernel faulted in and zeroed every time. Dropping the object frees every thread's arrays."""

    def __init__(self) -> None:
        self._local = threading.local()

    def get(self, name: str, shape: int | tuple[int, ...], dtype: type[_Item]) -> npt.NDArray[_Item]:
        """This thread's array ``name``, made (uninitialised) the first time with ``shape`` and ``dtype``."""
        kept: npt.NDArray[_Item] | None = getattr(self._local, name, None)
        if kept is None:
            kept = np.empty(shape, dtype=dtype)
            setattr(self._local, name, kept)
        return kept


def lower_priority(niceness: int) -> None:
    """Give the calling thread ``niceness`` (Linux keeps one per thread; raising one's own is always allowed): work
    beside the run's critical path (the matrix file written while training runs, torch loaded while the data steps
    run) gets what the critical path's threads leave. Where the system refuses, the thread runs as it was."""
    with contextlib.suppress(OSError):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), niceness)
