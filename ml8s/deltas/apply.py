"""Applying a DELTA: validate everything first, then assign, then prove the result by its weights hash.

The in-place variant never leaves its target half-applied: every section is decompressed and every index
checked before the first write, the overwritten elements are kept, and if the resulting weights hash is
not the recorded one (or anything interrupts the writes) they are put back before the error is raised.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import torch

from ml8s.deltas import container
from ml8s.deltas.dtypes import RawBits, kind_by_name, tensor_kind, writable_bits
from ml8s.deltas.hashing import check_hex_digest, weights_hash
from ml8s.deltas.header import FORMAT_VERSION, DeltaHeader, decode_header, section_sizes
from ml8s.deltas.indices import Positions, decode_positions
from ml8s.errors import DeltaBaseMismatchError, DeltaDtypeError, DeltaIntegrityError, DeltaNanError


@dataclass(frozen=True)
class _Edit:
    """One tensor's assignment: where to write (a view of the target's memory), which elements, what bits."""

    name: str
    nan_above: tuple[int, int]  # (mask, bits): an element whose bits & mask exceed bits is a NaN
    target: RawBits
    positions: Positions
    values: RawBits


# per dtype: the bits of +inf with the sign masked off; anything above (an all-ones exponent and a non-zero
# mantissa) is a NaN
_NAN_ABOVE = {"float32": (0x7FFFFFFF, 0x7F800000), "float16": (0x7FFF, 0x7C00), "bfloat16": (0x7FFF, 0x7F80)}


def apply_delta(
    base: Mapping[str, torch.Tensor], delta: bytes, *, base_hash: str | None = None
) -> dict[str, torch.Tensor]:
    """New tensors: ``base`` with ``delta`` applied; ``base`` itself is not modified.

    Args:
        base: the weights the DELTA was computed from (CPU tensors).
        delta: DELTA payload bytes.
        base_hash: the caller's already-verified ``weights_hash(base)``, to skip hashing it again.

    Returns:
        The new weights, contiguous CPU tensors by name (sorted), verified against the recorded hash.

    Raises:
        DeltaFormatError, DeltaBaseMismatchError, DeltaIntegrityError, DeltaDtypeError: as
        ``apply_delta_in_place``.
    """
    result = {}
    for name in sorted(base):
        tensor_kind(base[name], name)
        result[name] = base[name].detach().clone(memory_format=torch.contiguous_format)
    apply_delta_in_place(result, delta, base_hash=base_hash)
    return result


def apply_delta_in_place(
    tensors: Mapping[str, torch.Tensor], delta: bytes, *, base_hash: str | None = None, refuse_nan: bool = False
) -> DeltaHeader:
    """Assign the DELTA's new values into ``tensors`` (contiguous CPU tensors), all or nothing.

    Args:
        tensors: the weights to update; they must be the DELTA's base.
        delta: DELTA payload bytes.
        base_hash: the caller's already-verified ``weights_hash(tensors)`` (e.g. the result hash of the
            previous hop), to skip hashing the base before applying; the result is hashed regardless.
        refuse_nan: refuse a DELTA that writes a NaN (read from its new values, before any write).

    Returns:
        The DELTA's header (its ``result_hash`` is now the weights hash of ``tensors``).

    Raises:
        DeltaFormatError: the payload is malformed (nothing was changed).
        DeltaBaseMismatchError: ``tensors`` are not the recorded base (nothing was changed).
        DeltaIntegrityError: the result would not have the recorded hash (the originals were restored).
        DeltaDtypeError: a target tensor is not a contiguous CPU tensor.
        DeltaNanError: ``refuse_nan`` and a new value is a NaN (nothing was changed).
    """
    frames = container.unpack(delta, FORMAT_VERSION)
    header = decode_header(frames.header, frames.version)
    _check_target(tensors, header)
    edits = _decode_edits(tensors, header, frames)
    if refuse_nan:
        _refuse_nan(edits)
    if base_hash is not None:
        if check_hex_digest(base_hash, "base_hash") != header.base_hash:
            raise DeltaBaseMismatchError(
                f"the weights' hash is {base_hash}, the DELTA applies to {header.base_hash}: nothing was changed"
            )
    else:
        _check_base_hash(tensors, header)
    _assign_verified(tensors, header, edits, base_trusted=base_hash is not None)
    return header


def _check_target(tensors: Mapping[str, torch.Tensor], header: DeltaHeader) -> None:
    expected = {info.name for info in header.tensors}
    if set(tensors) != expected:
        missing, extra = sorted(expected - set(tensors)), sorted(set(tensors) - expected)
        raise DeltaBaseMismatchError(f"the weights lack tensors {missing} and have extra tensors {extra}")
    for info in header.tensors:
        tensor = tensors[info.name]
        if tensor.dtype != kind_by_name(info.dtype).torch_dtype or tuple(tensor.shape) != info.shape:
            raise DeltaBaseMismatchError(
                f"tensor {info.name!r} is {tensor.dtype}{list(tensor.shape)}, the DELTA's base has"
                f" {info.dtype}{list(info.shape)}"
            )
        tensor_kind(tensor, info.name)
        if not tensor.is_contiguous():
            raise DeltaDtypeError(f"tensor {info.name!r} is not contiguous: it cannot be updated in place")


def _decode_edits(tensors: Mapping[str, torch.Tensor], header: DeltaHeader, frames: container.Frames) -> list[_Edit]:
    index_size, values_size = section_sizes(header)
    planes = np.frombuffer(container.decompress(frames.index_frame, index_size, "DELTA index frame"), np.uint8)
    values = container.decompress(frames.values_frame, values_size, "DELTA values frame")
    edits: list[_Edit] = []
    index_at = values_at = 0
    for info in header.tensors:
        if info.count == 0:
            continue
        kind = kind_by_name(info.dtype)
        plane_bytes = planes[index_at : index_at + info.count * info.index_width]
        positions = decode_positions(plane_bytes, info, f"DELTA tensor {info.name!r}")
        new_bits = np.frombuffer(values, dtype=kind.le_dtype, count=info.count, offset=values_at)
        target = writable_bits(tensors[info.name], kind)
        edits.append(_Edit(info.name, _NAN_ABOVE[info.dtype], target, positions, new_bits))
        index_at += info.count * info.index_width
        values_at += info.count * kind.itemsize
    return edits


def _refuse_nan(edits: list[_Edit]) -> None:
    for edit in edits:
        mask, inf = edit.nan_above
        nan = (edit.values & mask) > inf
        if nan.any():
            raise DeltaNanError(
                f"the DELTA writes NaN into tensor {edit.name!r} (element {int(edit.positions[int(np.argmax(nan))])}); "
                "expected no NaN weight (a model with one predicts NaN): nothing was changed"
            )


def _check_base_hash(tensors: Mapping[str, torch.Tensor], header: DeltaHeader) -> None:
    actual = weights_hash(tensors)
    if actual != header.base_hash:
        raise DeltaBaseMismatchError(
            f"the weights' hash is {actual}, the DELTA applies to {header.base_hash}: nothing was changed"
        )


def _assign_verified(
    tensors: Mapping[str, torch.Tensor], header: DeltaHeader, edits: list[_Edit], *, base_trusted: bool
) -> None:
    """Assign every edit, then check the result hash; on any failure put the overwritten bits back."""
    saved: list[tuple[_Edit, RawBits]] = []
    try:
        for edit in edits:
            saved.append((edit, edit.target[edit.positions]))
            edit.target[edit.positions] = edit.values
        result = weights_hash(tensors)
    except BaseException:
        _restore(saved)
        raise
    if result == header.result_hash:
        return
    _restore(saved)
    if base_trusted:
        _check_base_hash(tensors, header)  # the caller's base hash was wrong: say so rather than blame the DELTA
    raise DeltaIntegrityError(
        f"applying the DELTA gives weights hash {result}, it records {header.result_hash}: the originals were restored"
    )


def _restore(saved: list[tuple[_Edit, RawBits]]) -> None:
    # Reverse order, so tensors that share memory (tied weights) end with their original bits.
    for edit, original in reversed(saved):
        edit.target[edit.positions] = original
