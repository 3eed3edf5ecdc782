"""FULL payloads: every tensor, as a plain safetensors file that records its weights hash.

A FULL is the anchor a consumer rebuilds from (FULL -> DELTA x N). It is an ordinary safetensors file
(any safetensors reader loads it) whose metadata holds exactly one key, ``ml8s.weights_hash``: safetensors
writes its metadata map in hash order, so a single key is what keeps the bytes deterministic. Tensors are
written by name, contiguous, with the dtypes a DELTA supports, so every FULL can be followed by DELTAs.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping

import safetensors.torch
import torch

from ml8s.deltas.dtypes import tensor_kind
from ml8s.deltas.hashing import check_hex_digest, weights_hash
from ml8s.errors import DeltaFormatError, DeltaIntegrityError
from ml8s.identity.hashing import json_loads

HASH_KEY = "ml8s.weights_hash"
_MAX_HEADER_BYTES = 100 * 1024 * 1024  # safetensors' own limit on its JSON header
_LENGTH = struct.Struct("<Q")


def encode_full(tensors: Mapping[str, torch.Tensor]) -> bytes:
    """A FULL payload of ``tensors``: the same tensors give the same bytes in any process.

    Raises:
        DeltaDtypeError: a tensor of an unsupported dtype or not on the CPU.
    """
    ordered = {}
    storages: set[int] = set()
    for name in sorted(tensors):
        tensor_kind(tensors[name], name)
        tensor = tensors[name].detach()
        storage = tensor.untyped_storage().data_ptr()
        # safetensors refuses tensors that share memory (tied weights): those after the first are copied.
        shared = storage in storages and tensor.numel() > 0
        ordered[name] = tensor.clone(memory_format=torch.contiguous_format) if shared else tensor.contiguous()
        storages.add(storage)
    return bytes(safetensors.torch.save(ordered, metadata={HASH_KEY: weights_hash(ordered)}))


def read_full_hash(full: bytes) -> str:
    """The weights hash a FULL payload records (``decode_full`` verifies it against the tensors).

    Raises:
        DeltaFormatError: not a safetensors payload with exactly the ``ml8s.weights_hash`` metadata key.
    """
    if len(full) < _LENGTH.size:
        raise DeltaFormatError(f"FULL payload of {len(full)} bytes is shorter than its 8-byte header length")
    (length,) = _LENGTH.unpack_from(full)
    if length > min(len(full) - _LENGTH.size, _MAX_HEADER_BYTES):
        raise DeltaFormatError(f"FULL payload header length {length} exceeds the {len(full)}-byte payload")
    try:
        header = json_loads(full[_LENGTH.size : _LENGTH.size + length].decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise DeltaFormatError(f"FULL payload header is not JSON: {exc}") from None
    metadata = header.get("__metadata__") if isinstance(header, dict) else None
    if not isinstance(metadata, dict) or set(metadata) != {HASH_KEY} or not isinstance(metadata[HASH_KEY], str):
        raise DeltaFormatError(f"FULL payload metadata must be exactly {{{HASH_KEY!r}: <sha256>}}, got {metadata!r}")
    return check_hex_digest(metadata[HASH_KEY], f"FULL payload {HASH_KEY}")


def decode_full(full: bytes) -> dict[str, torch.Tensor]:
    """The tensors of a FULL payload, verified against its recorded weights hash.

    Returns:
        Writable, contiguous CPU tensors by name (sorted).

    Raises:
        DeltaFormatError: not a well-formed FULL payload.
        DeltaDtypeError: a tensor of a dtype weights payloads do not carry.
        DeltaIntegrityError: the tensors do not have the recorded weights hash.
    """
    recorded = read_full_hash(full)
    try:
        loaded = safetensors.torch.load(full)
    except Exception as exc:  # the Rust parser raises its own SafetensorError, or ValueError/KeyError on odd dtypes
        raise DeltaFormatError(f"FULL payload is not valid safetensors: {exc}") from None
    tensors: dict[str, torch.Tensor] = {}
    for name in sorted(loaded):
        tensor = loaded[name]
        if not isinstance(name, str) or not isinstance(tensor, torch.Tensor):
            raise DeltaFormatError(f"FULL payload entry {name!r} is not a named tensor")
        tensor_kind(tensor, name)
        tensors[name] = tensor
    actual = weights_hash(tensors)
    if actual != recorded:
        raise DeltaIntegrityError(f"FULL payload tensors hash to {actual}, the payload records {recorded}")
    return tensors
