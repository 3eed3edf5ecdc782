"""Tensor element types of the shard format: a stable one-byte code and name per torch dtype.

The codes are part of format version 1 and never change meaning; a new dtype gets a new code.
"""

from __future__ import annotations

import math

import torch

from ml8s.errors import ShardFormatError, ShardInputError

# name -> (code written in the shard header, torch dtype)
_DTYPES: dict[str, tuple[int, torch.dtype]] = {
    "float32": (1, torch.float32),
    "float64": (2, torch.float64),
    "float16": (3, torch.float16),
    "bfloat16": (4, torch.bfloat16),
    "int8": (5, torch.int8),
    "uint8": (6, torch.uint8),
    "int16": (7, torch.int16),
    "int32": (8, torch.int32),
    "int64": (9, torch.int64),
    "bool": (10, torch.bool),
    "complex64": (11, torch.complex64),
    "complex128": (12, torch.complex128),
    "uint16": (13, torch.uint16),
    "uint32": (14, torch.uint32),
    "uint64": (15, torch.uint64),
    "float8_e4m3fn": (16, torch.float8_e4m3fn),
    "float8_e5m2": (17, torch.float8_e5m2),
}
_BY_CODE = {code: name for name, (code, _) in _DTYPES.items()}
_BY_TORCH = {dtype: name for name, (_, dtype) in _DTYPES.items()}

SUPPORTED_DTYPES = tuple(sorted(_DTYPES))


def dtype_name(dtype: torch.dtype, *, where: str) -> str:
    """The format's name of a torch dtype; ShardInputError for one the format cannot store."""
    try:
        return _BY_TORCH[dtype]
    except KeyError:
        raise ShardInputError(f"{where}: dtype {dtype} cannot be stored; expected one of {SUPPORTED_DTYPES}") from None


def tensor_dtype(name: object, value: object, *, where: str) -> str:
    """The format's dtype name of a state dict entry; ShardInputError for a name that is no ``str``, a value
    that is no ``torch.Tensor`` (an epoch count, a numpy array) or a dtype the format cannot store."""
    if not isinstance(name, str) or not isinstance(value, torch.Tensor):
        raise ShardInputError(
            f"{where}: entry {name!r} is {type(value).__name__} (key type {type(name).__name__}); expected a "
            "torch.Tensor under a str key (keep other values, such as an epoch count, beside the state dict)"
        )
    return dtype_name(value.dtype, where=f"{where}: tensor {name!r}")


def dtype_code(name: str) -> int:
    return _DTYPES[name][0]


def name_from_code(code: int, *, where: str) -> str:
    """The dtype name of a header code; ShardFormatError for an unknown code."""
    try:
        return _BY_CODE[code]
    except KeyError:
        raise ShardFormatError(f"{where}: unknown dtype code {code}; expected 1..{max(_BY_CODE)}") from None


def torch_dtype(name: str, *, where: str) -> torch.dtype:
    """The torch dtype of a format dtype name (metadata JSON); ShardFormatError for an unknown name."""
    try:
        return _DTYPES[name][1]
    except KeyError:
        raise ShardFormatError(f"{where}: unknown dtype {name!r}; expected one of {SUPPORTED_DTYPES}") from None


def itemsize(name: str) -> int:
    return _DTYPES[name][1].itemsize


def row_count(shape: tuple[int, ...]) -> int:
    """Rows along dim 0, the only dimension a tensor is split on; a 0-d tensor is one row."""
    return shape[0] if shape else 1


def row_bytes(dtype: str, shape: tuple[int, ...]) -> int:
    """Bytes of one dim-0 row (a 0-d tensor: its one element)."""
    return math.prod(shape[1:]) * itemsize(dtype)


def shape_fits(dtype: str, shape: tuple[int, ...]) -> bool:
    """Whether torch can describe the shape: its strides in bytes (zero dims aside) stay below 2**63."""
    return math.prod(max(d, 1) for d in shape) * itemsize(dtype) < 2**63
