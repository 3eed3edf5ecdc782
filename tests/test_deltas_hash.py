"""The weights hash follows its documented framing, and no two different tensor sets frame alike."""

from __future__ import annotations

import hashlib
import struct

import pytest
import torch

from ml8s.deltas import weights_hash
from ml8s.errors import DeltaDtypeError, DeltaFormatError


def by_the_documentation(tensors: dict[str, tuple[str, tuple[int, ...], bytes]]) -> str:
    """The framing of ml8s.deltas.hashing written out by hand from its docstring."""
    out = [b"ml8s.weights.v1\x00", struct.pack("<Q", len(tensors))]
    for name in sorted(tensors):
        dtype, shape, raw = tensors[name]
        out += [struct.pack("<I", len(name.encode())), name.encode(), struct.pack("<I", len(dtype)), dtype.encode()]
        out += [struct.pack("<I", len(shape)), *(struct.pack("<Q", d) for d in shape), struct.pack("<Q", len(raw)), raw]
    return hashlib.sha256(b"".join(out)).hexdigest()


def test_hash_matches_the_documented_framing() -> None:
    tensors = {
        "z.bias": torch.tensor([1.0, -0.0], dtype=torch.float32),
        "a.weight": torch.tensor([[0.5], [2.0]], dtype=torch.bfloat16),
        "é": torch.tensor(3.0, dtype=torch.float16),
    }
    expected = by_the_documentation(
        {
            "z.bias": ("float32", (2,), struct.pack("<2f", 1.0, -0.0)),
            "a.weight": ("bfloat16", (2, 1), bytes([0x00, 0x3F, 0x00, 0x40])),
            "é": ("float16", (), struct.pack("<e", 3.0)),
        }
    )
    assert weights_hash(tensors) == expected
    assert weights_hash(dict(reversed(list(tensors.items())))) == expected  # insertion order does not matter


def test_different_sets_hash_differently() -> None:
    one = torch.zeros(4)
    variants = [
        {"a": one},
        {"a": one.reshape(2, 2)},  # same bytes, other shape
        {"a": one.reshape(4, 1)},
        {"a": torch.zeros(8, dtype=torch.bfloat16)[:4]},  # other dtype
        {"a": torch.zeros(8, dtype=torch.bfloat16)},  # other dtype, same byte count
        {"b": one},  # other name
        {"a": one[:2], "b": one[:2]},  # the same bytes split differently
        {"ab": one[:2], "": one[:2]},
        {"a": torch.tensor([0.0, 0.0, 0.0, -0.0])},  # one sign bit
        {},
    ]
    assert len({weights_hash(v) for v in variants}) == len(variants)


def test_hash_ignores_layout_and_autograd() -> None:
    base = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    parameter = torch.nn.Parameter(base.clone())
    transposed_back = base.t().contiguous().t()
    assert not transposed_back.is_contiguous()
    assert weights_hash({"w": base}) == weights_hash({"w": parameter}) == weights_hash({"w": transposed_back})


def test_hash_refuses_what_payloads_cannot_carry() -> None:
    with pytest.raises(DeltaDtypeError, match="int64"):
        weights_hash({"steps": torch.zeros(1, dtype=torch.int64)})
    with pytest.raises(DeltaFormatError, match="not valid Unicode"):
        weights_hash({"\ud800": torch.zeros(1)})
