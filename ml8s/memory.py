"""Freed memory goes back to the operating system, so a step's peak RSS is what it holds, not what came before.

Two allocators keep freed pages by default, and at millions of rows that is hundreds of MiB carried from one
step into the next (measured at 2M rows: the typed columns are 200 MiB, the process held 490 MiB once they
were made):

- glibc raises its mmap threshold each time a large block is freed (up to 32 MiB), so the next column-sized
  arrays come from the heap, which ``free`` trims only from its top: a fragmented heap keeps its pages. A fixed
  threshold of 2 MiB keeps every larger block (a column, a piece's float64 chunk) in its own mapping, unmapped
  when freed. Smaller blocks (the CSV parser's per-block buffers, a piece's dictionary codes) reuse heap pages
  instead of each faulting fresh ones in, and :func:`give_back` returns the heap's free pages where a step has
  just freed many (``malloc_trim``: after a column is typed, the rows are prepared, the features fitted).
  Measured at 20M rows, the steps before training: 10.3M page faults and 31 s of system time with glibc's
  initial 128 KiB threshold, 5.1M and 21 s with 1 MiB; 2 MiB and :func:`give_back` took about 4 s less system time
  than 1 MiB and 3.3 s less wall time, for the same peak (docs/sizing.md).
- Arrow's default pool (mimalloc or jemalloc) caches freed pages for reuse. The system pool is glibc's malloc,
  and with the fixed threshold Arrow's column buffers are unmapped when freed too.

Neither changes a value computed: only where buffers live.
"""

from __future__ import annotations

import ctypes
import sys

import pyarrow as pa

_M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter (malloc.h); setting it turns the dynamic threshold off
_THRESHOLD = 2 * 1024 * 1024  # smaller blocks reuse heap pages, trimmed by give_back(); see the docstring

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


def give_back() -> None:
    """Return the heap's free pages to the OS now: glibc's ``malloc_trim``, which Arrow's system pool calls
    (numpy's buffers come from the same heap). Blocks under the threshold are freed into the heap, not unmapped;
    without this, a step's freed ones would still count in the next step's peak."""
    pa.default_memory_pool().release_unused()
