"""The weights hash: one sha256 over a set of named tensors, the same in every process and on every host.

Framing (all integers little-endian; names sorted by Python string order, i.e. by code point)::

    "ml8s.weights.v1\\0"                      domain tag, 16 bytes
    u64 tensor count
    per tensor, in name order:
        u32 length, name as UTF-8
        u32 length, dtype name as ASCII ("float32", "float16", "bfloat16")
        u32 ndim, then ndim x u64 dimensions
        u64 byte length, then the elements' raw bits in row-major order, little-endian

Every variable-length field carries its length, so no two different tensor sets frame to the same bytes.
Only content enters the hash: no device, no strides, no requires_grad.
"""

from __future__ import annotations

import hashlib
import re
import struct
from collections.abc import Mapping

import torch

from ml8s.deltas.dtypes import RawBits, raw_bits, tensor_kind
from ml8s.errors import DeltaFormatError

_DOMAIN = b"ml8s.weights.v1\x00"
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_HEX_DIGEST = re.compile(r"[0-9a-f]{64}")


def encode_name(name: str) -> bytes:
    """A tensor name as UTF-8.

    Raises:
        DeltaFormatError: the name is not encodable (a lone surrogate).
    """
    try:
        return name.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise DeltaFormatError(f"tensor name {name!r} is not valid Unicode text: {exc.reason}") from None


def weights_hash(tensors: Mapping[str, torch.Tensor]) -> str:
    """sha256 (hex) of the tensors' names, dtypes, shapes and raw bits, in the framing of this module.

    Raises:
        DeltaDtypeError: a tensor of an unsupported dtype, or not on the CPU.
        DeltaFormatError: a name that is not encodable as UTF-8.
    """
    names = sorted(tensors)
    hasher = WeightsHasher(len(names))
    for name in names:
        hasher.add(name, tensors[name])
    return hasher.hexdigest()


class WeightsHasher:
    """``weights_hash`` fed one tensor at a time, in name order, so no more than one tensor need be held."""

    def __init__(self, count: int) -> None:
        self.hasher = hashlib.sha256(_DOMAIN)
        self.hasher.update(_U64.pack(count))

    def add(self, name: str, tensor: torch.Tensor) -> None:
        """The next tensor (the caller keeps name order: nothing here can tell a set from a sequence)."""
        kind = tensor_kind(tensor, name)
        self.add_bits(name, kind.name, tuple(tensor.shape), raw_bits(tensor, kind))

    def add_bits(self, name: str, dtype_name: str, shape: tuple[int, ...], bits: RawBits) -> None:
        encoded, dtype = encode_name(name), dtype_name.encode("ascii")
        hasher = self.hasher
        hasher.update(_U32.pack(len(encoded)) + encoded + _U32.pack(len(dtype)) + dtype)
        hasher.update(_U32.pack(len(shape)) + struct.pack(f"<{len(shape)}Q", *shape))
        hasher.update(_U64.pack(bits.nbytes))
        hasher.update(bits.data)

    def hexdigest(self) -> str:
        return self.hasher.hexdigest()


def check_hex_digest(value: str, what: str) -> str:
    """``value`` if it is a lowercase hex sha256 digest.

    Raises:
        DeltaFormatError: anything else.
    """
    if not _HEX_DIGEST.fullmatch(value):
        raise DeltaFormatError(f"{what} must be 64 lowercase hex digits (a sha256), got {value!r}")
    return value
