"""Hashing a shard's data section as it streams past: its sha256 and the sha256 of each block."""

from __future__ import annotations

import hashlib

import numpy as np


class DataHasher:
    """Feed the data section in order, in chunks of any size; ``data_sha256`` and ``blocks`` at the end."""

    def __init__(self, block_size: int) -> None:
        self.block_size = block_size
        self._data = hashlib.sha256()
        self._block = hashlib.sha256()
        self._in_block = 0
        self._blocks: list[str] = []

    def update(self, chunk: bytes | bytearray | memoryview) -> None:
        view = np.frombuffer(chunk, dtype=np.uint8).data  # any contiguous buffer as bytes, no copy
        self._data.update(view)
        while view:
            take = min(len(view), self.block_size - self._in_block)
            self._block.update(view[:take])
            self._in_block += take
            view = view[take:]
            if self._in_block == self.block_size:
                self._close_block()

    def _close_block(self) -> None:
        self._blocks.append(self._block.hexdigest())
        self._block, self._in_block = hashlib.sha256(), 0

    def finish(self) -> tuple[str, tuple[str, ...]]:
        """(data sha256, block sha256s), the last block possibly short; call once, after the last chunk."""
        if self._in_block:
            self._close_block()
        return self._data.hexdigest(), tuple(self._blocks)
