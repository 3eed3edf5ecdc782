"""Shared helpers of the tests/test_shards_*.py files: a small deterministic state dict and file surgery."""

from __future__ import annotations

import hashlib
import struct

import torch

from ml8s.shards import PlanConfig, WriterConfig, checkpoint_id_for
from ml8s.store import Store

CID = checkpoint_id_for("run-1/step-100")
OTHER_CID = checkpoint_id_for("run-2/step-100")
# small blocks and a low split threshold so small tensors exercise row splits and ranged block reads
SMALL = WriterConfig(block_size=1024, chunk_bytes=1000, plan=PlanConfig(split_bytes=2048))
PREFIX = "ckpt/step_100/model"


def make_state(seed: int = 0) -> dict[str, torch.Tensor]:
    """Tensors of many dtypes and shapes (0-d, empty, odd rows), the same bytes in every process."""
    g = torch.Generator().manual_seed(seed)
    return {
        "layer.weight": torch.randn(257, 33, generator=g),
        "layer.bias": torch.randn(33, generator=g),
        "embed": torch.randn(101, 16, generator=g).to(torch.bfloat16),
        "step": torch.tensor(1234, dtype=torch.int64),
        "scale": torch.tensor(0.5, dtype=torch.float16),
        "mask": torch.rand(64, 9, generator=g) > 0.5,
        "empty": torch.zeros(0, 5),
        "ids": torch.arange(3000, dtype=torch.int32),
        "cplx": torch.randn(7, 3, generator=g, dtype=torch.complex64),
    }


def reseal(header: bytes) -> bytes:
    """A header with its header_sha256 recomputed after an edit (header_length taken from the header)."""
    (length,) = struct.unpack_from("<Q", header, 56)
    return header[: length - 32] + hashlib.sha256(header[: length - 32]).digest() + header[length:]


def rewrite(store: Store, key: str, data: bytes) -> None:
    store.put_atomic(key, data, tmp_key=".tmp/rewrite")


def flip(data: bytes, at: int) -> bytes:
    """``data`` with one bit of byte ``at`` (negative: from the end) flipped."""
    at %= len(data)
    return data[:at] + bytes([data[at] ^ 0x01]) + data[at + 1 :]
