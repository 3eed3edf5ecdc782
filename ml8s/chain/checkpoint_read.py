"""How ``hash_checkpoint`` (ml8s.chain.checkpoint) reads a checkpoint's bytes into its two hashes.

Both feeders take the file in order (``feed(count, whole, weights)``): every byte into the file hash,
the bytes of a tensor next in name order also into the weights hash, each hash in its own thread
(hashlib releases the GIL on large updates), each thread seeing its pieces in the order fed; ``also``
puts a tensor's framing into the weights hash in that order too.

- ``BufferFeeder`` (nothing staged: S3, or a DELTA due) reads the source into two buffers in turn; both
  hashes take the same buffer, so they see the same bytes even if the file changes meanwhile.
- ``StagedFeeder`` (a FULL on a local store) has the kernel copy the source into the staged file a window
  at a time (``StagedWriter.copy_from``: no read into this process, no write from it), then maps that window
  of the staged copy and hashes it in place: the hashes are of the staged bytes themselves, the ones the
  store links into place, and the source is read once, by the copy. Only the staged copy, a fresh file of
  ours, is mapped, never the source, which anyone may truncate (a mapped page past a file's end is SIGBUS).
  Two windows are mapped at most (one hashed while the next is copied), so memory does not grow with
  the checkpoint. On a file system that cannot map files, a window is read into memory instead.
"""

from __future__ import annotations

import collections
import io
import mmap
import os
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Self

from ml8s.errors import ConfigError, StoreError
from ml8s.store import StagedWriter

CHUNK = 1024 * 1024
_WINDOW = 16 * 1024 * 1024  # staged bytes copied, mapped and hashed at a time (a multiple of mmap's granularity)
_MAPPED = 2  # windows mapped at once: the hash threads work through one while the next is copied
Update = Callable[[memoryview], None]


class _Hashing:
    """The two hash threads (file hash, weights hash); leaving waits for everything queued on them."""

    def __init__(self) -> None:
        self.pools = [ThreadPoolExecutor(1, thread_name_prefix=f"ml8s-hash{n}") for n in range(2)]

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        for pool in self.pools:  # waits for the hashes still queued: their buffers outlive them
            pool.shutdown()

    def also(self, weights: Callable[[bytes], None], data: bytes) -> None:
        """``data`` into the weights hash, in order with the pieces queued for it."""
        self.pools[1].submit(weights, data)

    def submit(self, chunk: memoryview, whole: Update, weights: Update | None) -> list[Future[None]]:
        pending = [self.pools[0].submit(whole, chunk)]
        if weights is not None:
            pending.append(self.pools[1].submit(weights, chunk))
        return pending


class BufferFeeder(_Hashing):
    """Reads ``handle`` on from where it is into two buffers in turn, each read while the two hashes take the
    other in their threads; a buffer is read into again once both are done with it."""

    def __init__(self, path: str, handle: io.FileIO) -> None:
        super().__init__()
        self.path, self.handle = path, handle
        self.buffers = [memoryview(bytearray(CHUNK)) for _ in range(2)]
        self.pending: list[list[Future[None]]] = [[], []]
        self.turn = 0

    def __call__(self, count: int, whole: Update, weights: Update | None) -> None:
        while count > 0:
            for future in self.pending[self.turn]:
                future.result()
            buffer = self.buffers[self.turn]
            got = self.handle.readinto(buffer[: min(count, len(buffer))])
            if not got:
                raise ConfigError(f"--payload {self.path}: the file shrank while it was read; expected it unchanged")
            chunk = buffer[:got]
            self.pending[self.turn] = self.submit(chunk, whole, weights)
            self.turn ^= 1
            count -= got


@dataclass
class _Window:
    """``length`` staged bytes from ``offset`` on, mapped (or read); the hashes queued on them."""

    offset: int
    length: int
    mapping: mmap.mmap | bytes
    pending: list[Future[None]] = field(default_factory=list)


class StagedFeeder(_Hashing):
    """Copies ``source`` (an open descriptor, from its first byte to ``size``) into ``stage`` window by window
    and hashes the staged windows, mapped (module docstring)."""

    def __init__(self, path: str, source: int, stage: StagedWriter, size: int) -> None:
        super().__init__()
        self.path, self.source, self.stage, self.size = path, source, stage, size
        self.windows: collections.deque[_Window] = collections.deque()
        self.at = 0  # the file offset of the next byte fed

    def __exit__(self, *exc: object) -> None:
        super().__exit__(*exc)
        self.windows.clear()  # unmapped as the last reference goes (a hash thread may hold a slice a moment)

    def __call__(self, count: int, whole: Update, weights: Update | None) -> None:
        while count > 0:
            window = self.windows[-1] if self.windows else None
            if window is None or self.at == window.offset + window.length:
                window = self._next_window()
            take = min(count, window.offset + window.length - self.at)
            window.pending += self._submit(window, self.at - window.offset, take, whole, weights)
            self.at += take
            count -= take

    def _submit(
        self, window: _Window, start: int, count: int, whole: Update, weights: Update | None
    ) -> list[Future[None]]:
        with memoryview(window.mapping) as view:
            return self.submit(view[start : start + count], whole, weights)

    def _next_window(self) -> _Window:
        while len(self.windows) >= _MAPPED:  # the oldest window's hashes done, its pages unmapped
            for future in self.windows.popleft().pending:
                future.result()
        length = min(_WINDOW, self.size - self.at)
        if length <= 0 or self.stage.copy_from(self.source, self.at, length) < length:
            raise ConfigError(f"--payload {self.path}: the file shrank while it was read; expected it unchanged")
        self.windows.append(_Window(self.at, length, self._map(length)))
        return self.windows[-1]

    def _map(self, length: int) -> mmap.mmap | bytes:
        flags = mmap.MAP_SHARED | mmap.MAP_POPULATE  # its pages are in the page cache, just written: map them all
        try:
            return mmap.mmap(self.stage.fd, length, flags=flags, prot=mmap.PROT_READ, offset=self.at)
        except OSError:  # a file system that cannot map files (ENODEV): the window read, the same bytes
            pass
        try:
            data = os.pread(self.stage.fd, length, self.at)
        except OSError as exc:
            raise StoreError(f"cannot read back {self.stage.path} (staged): {exc.strerror or exc}") from exc
        if len(data) != length:
            raise StoreError(f"{self.stage.path} (staged): {len(data)} bytes at {self.at}, {length} copied there")
        return data
