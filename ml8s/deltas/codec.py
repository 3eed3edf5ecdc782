"""DELTA payloads: the elements that changed between two sets of weights, and their new values.

A DELTA holds, per tensor, the flat positions whose raw bits changed (so -0.0/+0.0 and NaN payload changes
count) and the *actual new values* at those positions: applying it is assignment, never arithmetic, so a
chain FULL -> DELTA x N rebuilds bit-exact weights however long it is. Layout: ``container`` (prefix and
zstd frames), ``header`` (hashes and per-tensor layout), ``indices`` (gaps in byte planes); values are the
new elements' raw bits, little-endian, tensor after tensor in header order.

Why a binary layout of our own rather than safetensors sections: every size is a fixed-width field that
is checked against the others and against the weights before anything large is decompressed; the bytes
are canonical (sorted names, narrowest index width, no free-form metadata whose key order could vary);
and a parser error is always one of ours, naming the field.

Measured choices (``bench/bench_deltas.py``, 4M parameters, 1% of the elements changed):

- zstd level 3, one thread. Levels 1 to 6 take the same CPU time within noise (finding the changed
  elements dominates) and their sizes differ by under 1%; level 9 costs 5-25% more CPU for 0.5% less.
  A second thread gains nothing while the sections stay under zstd's job size (several MB, i.e. models
  of a few hundred million parameters); the thread count never changes the bytes (``container.compress``),
  so a producer of large deltas may raise it freely.
- values are compressed: zstd stores incompressible blocks raw, so it is never meaningfully larger, and
  real weights compress (bf16 values to 78%, f32 to 93%: sign and exponent bits repeat), while
  decompressing them takes a fraction of a millisecond next to the weights-hash pass of every apply.

Every decode checks the magic, version, section sizes, index bounds, that the target is the recorded
base (names, dtypes, shapes, weights hash) and, after applying, the resulting weights hash.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import NamedTuple

import numpy as np
import numpy.typing as npt
import torch
from pydantic import BaseModel, ConfigDict, Field

from ml8s.deltas import container
from ml8s.deltas.dtypes import raw_bits, tensor_kind
from ml8s.deltas.hashing import WeightsHasher, check_hex_digest
from ml8s.deltas.header import FORMAT_VERSION, DeltaHeader, DeltaTensorInfo, decode_header, encode_header
from ml8s.deltas.indices import encode_positions
from ml8s.errors import DeltaShapeError


class DeltaOptions(BaseModel):
    """How a DELTA is compressed. The level changes the bytes; the thread count does not."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    level: int = Field(default=3, ge=1, le=19)
    threads: int = Field(default=1, ge=1, le=256)


def read_delta_header(delta: bytes) -> DeltaHeader:
    """The header of a DELTA payload (hashes and tensor layout) without applying it.

    Raises:
        DeltaFormatError: not a well-formed DELTA payload of a supported version.
    """
    frames = container.unpack(delta, FORMAT_VERSION)
    return decode_header(frames.header, frames.version)


def encode_delta(
    base: Mapping[str, torch.Tensor],
    new: Mapping[str, torch.Tensor],
    *,
    options: DeltaOptions | None = None,
    base_hash: str | None = None,
) -> bytes:
    """A DELTA payload that turns ``base`` into ``new``.

    Args:
        base: the weights the consumer holds (CPU tensors of a supported dtype).
        new: the weights to produce: the same names, dtypes and shapes as ``base``.
        options: compression settings (defaults: the measured ones).
        base_hash: ``weights_hash(base)`` when the caller already has it (e.g. the result hash of the
            previous DELTA), to skip hashing the base again. A wrong value yields a DELTA that every
            consumer refuses with ``DeltaBaseMismatchError``.

    Returns:
        The payload bytes; the same inputs and options give the same bytes in any process.

    Raises:
        DeltaDtypeError: a tensor of an unsupported dtype or not on the CPU.
        DeltaShapeError: the tensor names, a dtype or a shape differ: only a FULL payload can carry that.
    """
    names = _same_layout(base, new)
    pairs = encode_delta_by_tensor(names, lambda name: (base[name], new[name]), options=options, base_hash=base_hash)
    return pairs.payload


def encode_delta_by_tensor(
    names: Sequence[str],
    load: Callable[[str], tuple[torch.Tensor, torch.Tensor]],
    *,
    options: DeltaOptions | None = None,
    base_hash: str | None = None,
) -> DeltaEncoding:
    """``encode_delta`` one tensor pair at a time: ``load(name)`` gives the base's and the new tensor of
    ``name``, called once per name of ``names`` (sorted, no duplicates), so only one pair need be in memory
    (e.g. read lazily from safetensors files). The payload bytes are those ``encode_delta`` gives for the
    same tensors; the result's hashes are computed on the way (the base's unless ``base_hash`` is given).

    Raises:
        DeltaDtypeError: a tensor of an unsupported dtype or not on the CPU.
        DeltaShapeError: a pair differs in dtype or shape, or ``names`` is not sorted and unique.
    """
    if list(names) != sorted(set(names)):
        raise DeltaShapeError(f"tensor names must be sorted and unique, got {list(names)[:8]}")
    settings = options if options is not None else DeltaOptions()
    known_base = check_hex_digest(base_hash, "base_hash") if base_hash is not None else None
    base_hasher, result_hasher = WeightsHasher(len(names)), WeightsHasher(len(names))
    infos: list[DeltaTensorInfo] = []
    index_parts: list[npt.NDArray[np.uint8]] = []
    value_parts: list[npt.NDArray[np.signedinteger]] = []
    for name in names:
        old, fresh = load(name)
        kind, fresh_kind = tensor_kind(old, name), tensor_kind(fresh, name)
        if kind != fresh_kind or old.shape != fresh.shape:
            raise DeltaShapeError(
                f"tensor {name!r} changed from {old.dtype}{list(old.shape)} to {fresh.dtype}{list(fresh.shape)}:"
                " send a FULL payload"
            )
        old_bits, new_bits = raw_bits(old, kind), raw_bits(fresh, kind)
        shape = tuple(old.shape)
        if known_base is None:
            base_hasher.add_bits(name, kind.name, shape, old_bits)
        result_hasher.add_bits(name, kind.name, shape, new_bits)
        changed = np.flatnonzero(old_bits != new_bits)
        width, planes = encode_positions(changed)
        infos.append(DeltaTensorInfo(name=name, dtype=kind.name, shape=shape, count=changed.size, index_width=width))
        index_parts.append(planes)
        value_parts.append(new_bits[changed])
        del old, fresh, old_bits, new_bits, changed  # before the next pair is loaded
    header = DeltaHeader(
        version=FORMAT_VERSION,
        base_hash=known_base if known_base is not None else base_hasher.hexdigest(),
        result_hash=result_hasher.hexdigest(),
        tensors=tuple(infos),
    )
    index_frame = container.compress(_joined(index_parts), settings.level, settings.threads)
    values_frame = container.compress(_joined(value_parts), settings.level, settings.threads)
    payload = container.pack(
        FORMAT_VERSION, encode_header(header), index_frame, values_frame, settings.level, settings.threads
    )
    return DeltaEncoding(payload=payload, base_hash=header.base_hash, result_hash=header.result_hash)


class DeltaEncoding(NamedTuple):
    """A DELTA payload and the weights hashes it records (base, result)."""

    payload: bytes
    base_hash: str
    result_hash: str


def _joined(parts: Sequence[npt.NDArray[np.integer]]) -> memoryview:
    """The arrays' bytes, one after the other."""
    return np.concatenate([np.empty(0, dtype=np.uint8), *(part.view(np.uint8) for part in parts)]).data


def _same_layout(base: Mapping[str, torch.Tensor], new: Mapping[str, torch.Tensor]) -> list[str]:
    """The sorted tensor names, once every tensor is known supported and ``new`` has ``base``'s layout."""
    for weights in (base, new):
        for name in sorted(weights):
            tensor_kind(weights[name], name)
    if set(base) != set(new):
        added, removed = sorted(set(new) - set(base)), sorted(set(base) - set(new))
        raise DeltaShapeError(f"tensor set changed (added {added}, removed {removed}): send a FULL payload")
    names = sorted(base)
    for name in names:
        old, fresh = base[name], new[name]
        if old.dtype != fresh.dtype or old.shape != fresh.shape:
            raise DeltaShapeError(
                f"tensor {name!r} changed from {old.dtype}{list(old.shape)} to {fresh.dtype}{list(fresh.shape)}:"
                " send a FULL payload"
            )
    return names
