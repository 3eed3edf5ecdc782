"""Weights payloads (SPEC §8): FULL anchors and sparse DELTAs between consecutive versions of a model.

- ``weights_hash``: one sha256 over named tensors (names, dtypes, shapes, raw bits), the same everywhere.
- ``encode_full`` / ``decode_full``: every tensor, as safetensors recording its weights hash.
- ``encode_delta`` / ``apply_delta`` / ``apply_delta_in_place``: the changed elements' positions and
  actual new values, zstd-compressed, checked against the base and result hashes on every apply.

A consumer rebuilds any version from its nearest FULL and the DELTAs after it, bit for bit; float32,
bfloat16 and float16 CPU tensors are carried. Failures raise the ``ml8s.errors.DeltaError`` family.
"""

from ml8s.deltas.apply import apply_delta, apply_delta_in_place
from ml8s.deltas.codec import DeltaEncoding, DeltaOptions, encode_delta, encode_delta_by_tensor, read_delta_header
from ml8s.deltas.full import decode_full, encode_full, read_full_hash
from ml8s.deltas.hashing import weights_hash
from ml8s.deltas.header import DeltaHeader, DeltaTensorInfo

__all__ = [
    "DeltaEncoding",
    "DeltaHeader",
    "DeltaOptions",
    "DeltaTensorInfo",
    "apply_delta",
    "apply_delta_in_place",
    "decode_full",
    "encode_delta",
    "encode_delta_by_tensor",
    "encode_full",
    "read_delta_header",
    "read_full_hash",
    "weights_hash",
]
