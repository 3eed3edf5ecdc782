"""The tensor dtypes weights payloads carry, and the raw bits of a tensor as little-endian integers.

Payloads compare and copy raw bits, never float values: an integer view of the same width makes -0.0 and
+0.0, or two NaNs with different payloads, different elements, and makes assignment bit-exact.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt
import torch

from ml8s.errors import DeltaDtypeError

RawBits = npt.NDArray[np.signedinteger]
DtypeName = Literal["bfloat16", "float16", "float32"]


@dataclass(frozen=True)
class TensorKind:
    """One supported dtype: its stable name and wire code, and the integer types that view its bits."""

    name: DtypeName
    code: int
    torch_dtype: torch.dtype
    int_dtype: torch.dtype
    le_dtype: np.dtype[np.signedinteger]

    @property
    def itemsize(self) -> int:
        """Bytes per element."""
        return self.le_dtype.itemsize


# The codes are part of the DELTA wire format: never renumber them.
KINDS: tuple[TensorKind, ...] = (
    TensorKind("float32", 1, torch.float32, torch.int32, np.dtype("<i4")),
    TensorKind("float16", 2, torch.float16, torch.int16, np.dtype("<i2")),
    TensorKind("bfloat16", 3, torch.bfloat16, torch.int16, np.dtype("<i2")),
)
_BY_TORCH = {kind.torch_dtype: kind for kind in KINDS}
_BY_CODE = {kind.code: kind for kind in KINDS}
_BY_NAME = {kind.name: kind for kind in KINDS}
_SUPPORTED = ", ".join(kind.name for kind in KINDS)


def kind_by_code(code: int) -> TensorKind | None:
    """The kind a wire code names, or None for an unknown code."""
    return _BY_CODE.get(code)


def kind_by_name(name: DtypeName) -> TensorKind:
    """The kind of a dtype name."""
    return _BY_NAME[name]


def tensor_kind(tensor: torch.Tensor, name: str) -> TensorKind:
    """The kind of a CPU tensor of a supported dtype.

    Raises:
        DeltaDtypeError: another dtype, a tensor that does not live on the CPU, or a sparse one.
    """
    kind = _BY_TORCH.get(tensor.dtype)
    if kind is None:
        raise DeltaDtypeError(f"tensor {name!r} has dtype {tensor.dtype}; weights payloads carry {_SUPPORTED}")
    if tensor.device.type != "cpu":
        raise DeltaDtypeError(f"tensor {name!r} is on {tensor.device}; weights payloads read and write CPU tensors")
    if tensor.layout != torch.strided:  # its raw bits are no row-major run of elements
        raise DeltaDtypeError(f"tensor {name!r} is a {tensor.layout} tensor; weights payloads carry dense tensors")
    return kind


def raw_bits(tensor: torch.Tensor, kind: TensorKind) -> RawBits:
    """The tensor's elements in row-major order as little-endian integers of the same width.

    No copy for a contiguous tensor on a little-endian host; the array aliases the tensor's memory.
    """
    flat = tensor.detach().contiguous().reshape(-1).view(kind.int_dtype).numpy()
    return np.asarray(flat, dtype=kind.le_dtype)


def writable_bits(tensor: torch.Tensor, kind: TensorKind) -> RawBits:
    """A flat native-order integer view of a contiguous tensor's memory: writing to it writes the tensor."""
    return tensor.detach().view(-1).view(kind.int_dtype).numpy()
