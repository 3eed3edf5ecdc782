"""Per-column work of the data path on every core, with the results and errors of doing it one column at a time.

After the files are parsed, the data path works a column at a time: typing a column over all files, keeping a
column's rows, fitting a column's features. Each column's result depends on that column alone, and numpy's and
Arrow's kernels release the GIL, so two columns can run at once on two cores.

:func:`in_order` does that and keeps what a caller could see of the order: the results come back in the order of
the items, and when items fail, the error raised is the first failing item's in that order (the one a loop would
have raised), whatever finished first. Items not yet started when one fails are not started.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

__all__ = ["COLUMN_THREADS", "in_order"]

_T = TypeVar("_T")
_R = TypeVar("_R")

# Two: both cores of the 2-core machine the memory bounds are set for (docs/sizing.md). Each thread holds one
# column's temporaries, so more threads would raise the peak by a column each.
COLUMN_THREADS = max(1, min(2, os.cpu_count() or 1))


def in_order(function: Callable[[_T], _R], items: Sequence[_T], *, threads: int, name: str) -> list[_R]:
    """``[function(item) for item in items]``, run on up to ``threads`` threads (named ``ml8s-{name}``).

    Raises:
        Exception: the first item's error, in the order of ``items``, among those that failed.
    """
    if threads <= 1 or len(items) <= 1:
        return [function(item) for item in items]
    with ThreadPoolExecutor(min(threads, len(items)), thread_name_prefix=f"ml8s-{name}") as pool:
        futures = [pool.submit(function, item) for item in items]
        try:
            return [future.result() for future in futures]
        finally:
            for future in futures:  # after a failure, the items not yet started are not run
                future.cancel()
