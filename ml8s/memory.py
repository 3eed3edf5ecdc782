"""Freed memory goes back to the operating system, so a step's peak RSS is what it holds, not what came before.

Two allocators keep freed pages by default, and at millions of rows that is hundreds of MiB carried from one
step into the next (measured at 2M rows: the typed columns are 200 MiB, the process held 490 MiB once they
were made):

- glibc raises its mmap threshold each time a large block is freed (up to 32 MiB), so the next column-sized
  arrays come from the heap, which it trims only from the top: a fragmented heap is never given back. A fixed
  threshold of 1 MiB keeps every larger block (a column, a block's chunk) in its own mapping, unmapped when
  freed, while the many temporaries between 128 KiB and 1 MiB reuse heap pages instead of each faulting fresh
  ones in: at 20M rows the steps before training took 10.3M page faults and 31 s of system time with glibc's
  initial 128 KiB, and 5.1M and 21 s with 1 MiB (50 s against 62 s, the peak 2,760 MiB against 2,709; at 2M
  rows the run's peak is training's, 580 MiB either way).
- Arrow's default pool (mimalloc or jemalloc) caches freed pages for reuse. The system pool is glibc's malloc,
  and with the fixed threshold Arrow's column buffers are unmapped when freed too.

Neither changes a value computed: only where buffers live.
"""

from __future__ import annotations

import ctypes
import sys

import pyarrow as pa

_M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter (malloc.h); setting it turns the dynamic threshold off
_THRESHOLD = 1024 * 1024  # blocks from 1 MiB up are mapped (and unmapped when freed); see the docstring

_done: list[bool] = []


def return_freed_memory() -> None:
    """Make freed buffers go back to the OS from now on (idempotent; a no-op where glibc is not the allocator)."""
    if _done:
        return
    _done.append(True)
    pa.set_memory_pool(pa.system_memory_pool())
    if not sys.platform.startswith("linux"):
        return
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (AttributeError, OSError):  # not glibc (a libc without mallopt)
        return
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    mallopt(_M_MMAP_THRESHOLD, _THRESHOLD)
