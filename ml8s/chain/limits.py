"""The documented bounds of every chain read: nothing read from the store is larger than these.

A payload file is read up to the size its (signed) block records, never more; the objects below have
no size recorded anywhere, so each has a cap far above any legitimate one. An object over its bound is
refused before its bytes are read (``ObjectTooLargeError``, a finding in verify), as is, on the local
backend, anything that is no regular file (``UnsafeObjectError``): a FIFO, a device, a symbolic link.
"""

from __future__ import annotations

import os

HEAD_MAX_BYTES = 64 * 1024  # chain.json: a counter, a hash, a directory name (about 300 bytes)
BLOCK_MAX_BYTES = 16 * 1024 * 1024  # block.pb: the header lists every payload file (~150 bytes each)
RECORD_MAX_BYTES = 1024 * 1024  # a run record or claim, an audit event, a trust policy (< 10 KiB each)
# A payload read into memory (fetch_payload): its block's size, and never more than half this machine's
# memory, since an unsigned block's size is whatever its writer put there (verify streams, uncapped).
PAYLOAD_MEMORY_MAX_BYTES = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 2
