"""Attacker's view of DELTA payloads: every truncation, flipped byte, forged field or lie is a named error,
and an in-place apply that fails leaves its target exactly as it was."""

from __future__ import annotations

import random
import struct

import numpy as np
import pytest
import torch
from deltas_support import make_weights, perturb

from ml8s.deltas import apply_delta, apply_delta_in_place, container, encode_delta, read_delta_header, weights_hash
from ml8s.deltas.header import FORMAT_VERSION, DeltaHeader, DeltaTensorInfo, decode_header, encode_header
from ml8s.errors import DeltaError, DeltaFormatError, DeltaIntegrityError

PREFIX = struct.Struct("<8sHHIQQQQ32s")


@pytest.fixture(scope="module")
def pair() -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor], bytes]:
    base = make_weights(31, torch.bfloat16) | {"f32": make_weights(32, torch.float32)["embed.weight"]}
    new = perturb(base, 0.05, seed=33)
    return base, new, encode_delta(base, new)


def frame(data: bytes) -> bytes:
    return container.compress(data, 3, 1)


def forge(header: DeltaHeader | bytes, index: bytes, values: bytes) -> bytes:
    """A payload from raw parts, with correct frames and prefix: only what the parts say is wrong."""
    raw = header if isinstance(header, bytes) else encode_header(header)
    return container.pack(FORMAT_VERSION, raw, frame(index), frame(values), 3, 1)


def assert_refused(base: dict[str, torch.Tensor], payload: bytes) -> None:
    """A named error from every entry point, and an untouched target."""
    target = {name: tensor.clone() for name, tensor in base.items()}
    with pytest.raises(DeltaError):
        apply_delta_in_place(target, payload)
    assert all(torch.equal(target[n].view(torch.int16), base[n].view(torch.int16)) for n in base if n != "f32")
    assert torch.equal(target["f32"], base["f32"])
    with pytest.raises(DeltaError):
        apply_delta(base, payload)


def test_every_truncation_is_refused(pair: tuple[dict[str, torch.Tensor], dict[str, torch.Tensor], bytes]) -> None:
    base, _, delta = pair
    cuts = sorted({*range(0, 100), *random.Random(1).sample(range(len(delta)), 40), len(delta) - 1})
    for cut in cuts:
        with pytest.raises(DeltaFormatError):
            read_delta_header(delta[:cut]) if cut < 90 else apply_delta(base, delta[:cut])
    assert_refused(base, delta[: len(delta) // 2])
    assert_refused(base, delta + b"\x00")


def test_random_byte_flips_are_refused(pair: tuple[dict[str, torch.Tensor], dict[str, torch.Tensor], bytes]) -> None:
    base, _, delta = pair
    rng = random.Random(2)
    positions = [*range(PREFIX.size), *rng.sample(range(PREFIX.size, len(delta)), 60)]
    for position in positions:
        flipped = bytearray(delta)
        flipped[position] ^= 1 << rng.randrange(8)
        target = {name: tensor.clone() for name, tensor in base.items()}
        with pytest.raises(DeltaError):
            apply_delta_in_place(target, bytes(flipped))
        assert weights_hash(target) == weights_hash(base), f"flip at {position} changed the target"


def test_garbage_and_foreign_payloads(pair: tuple[dict[str, torch.Tensor], dict[str, torch.Tensor], bytes]) -> None:
    base, _, delta = pair
    rng = np.random.default_rng(3)
    for size in (0, 1, 79, 80, 100, 5000):
        assert_refused(base, rng.bytes(size))
    with pytest.raises(DeltaFormatError, match="magic"):
        read_delta_header(b"PK\x03\x04" + delta[4:])
    with pytest.raises(DeltaFormatError, match="version 2"):
        read_delta_header(delta[:8] + struct.pack("<H", 2) + delta[10:])
    with pytest.raises(DeltaFormatError, match="flags"):
        read_delta_header(delta[:10] + struct.pack("<H", 1) + delta[12:])


def test_huge_sizes_in_the_prefix(pair: tuple[dict[str, torch.Tensor], dict[str, torch.Tensor], bytes]) -> None:
    _, _, delta = pair
    fields = list(PREFIX.unpack_from(delta))
    for slot, value in [(4, 2**40), (5, 2**63), (6, 2**64 - 1), (7, 2**64 - 1), (4, 0)]:
        forged = list(fields)
        forged[slot] = value
        with pytest.raises(DeltaFormatError):
            read_delta_header(PREFIX.pack(*forged) + delta[PREFIX.size :])


def _header(**changes: object) -> DeltaHeader:
    info = {"name": "w", "dtype": "float32", "shape": (10,), "count": 2, "index_width": 1} | changes
    return DeltaHeader(version=1, base_hash="0" * 64, result_hash="1" * 64, tensors=(DeltaTensorInfo(**info),))


VALUES = np.ones(2, dtype="<f4").tobytes()
FORGED_SECTIONS = {
    "position past the end": (_header(), bytes([3, 9]), VALUES),  # positions 3 and 13 of 10
    "gap larger than the tensor": (_header(count=1), bytes([200]), VALUES[:4]),
    "wider index than needed": (_header(index_width=2), bytes([1, 2, 0, 0]), VALUES),
    "short index section": (_header(), bytes([1]), VALUES),
    "long values section": (_header(), bytes([1, 2]), VALUES + VALUES),
}


@pytest.mark.parametrize("case", sorted(FORGED_SECTIONS))
def test_forged_sections_are_refused(case: str) -> None:
    header, index, values = FORGED_SECTIONS[case]
    with pytest.raises(DeltaFormatError):
        apply_delta({"w": torch.zeros(10)}, forge(header, index, values))


def test_forged_headers_are_refused() -> None:
    bad_headers = [
        (encode_header(_header()) + b"\x00", "unexpected bytes"),
        (encode_header(_header())[:-1], "truncated"),
        (encode_header(_header()).replace(b"w", b"\xff"), "not UTF-8"),
        (encode_header(_header(count=11)), "11 changed elements in a tensor of 10"),
        (encode_header(_header(count=0, index_width=2)), "must be 1"),
    ]
    for raw, message in bad_headers:
        with pytest.raises(DeltaFormatError, match=message):
            decode_header(raw, 1)
    names_out_of_order = DeltaHeader.model_construct(
        version=1, base_hash="0" * 64, result_hash="1" * 64, tensors=(_header().tensors[0], _header().tensors[0])
    )
    with pytest.raises(DeltaFormatError, match="strictly increasing"):
        decode_header(encode_header(names_out_of_order), 1)
    raw = bytearray(encode_header(_header()))
    raw[64 + 4 + 2 + 1] = 9  # dtype code
    with pytest.raises(DeltaFormatError, match="dtype code"):
        decode_header(bytes(raw), 1)
    raw[64 + 4 + 2 + 1] = 1
    raw[64 + 4 + 2 + 3] = 200  # ndim
    with pytest.raises(DeltaFormatError, match="dimensions"):
        decode_header(bytes(raw), 1)
    with pytest.raises(DeltaFormatError, match="more elements"):
        decode_header(encode_header(_header(shape=(2**32, 2**32), count=0)), 1)
    with pytest.raises(DeltaFormatError, match="cannot fit"):
        decode_header(encode_header(_header())[:64] + struct.pack("<I", 2**32 - 1), 1)


def test_consistent_forgery_is_caught_by_the_result_hash(
    pair: tuple[dict[str, torch.Tensor], dict[str, torch.Tensor], bytes],
) -> None:
    """A DELTA whose every frame is valid but whose values are not the recorded result: restored, named."""
    base, _, delta = pair
    frames = container.unpack(delta, FORMAT_VERSION)
    header = decode_header(frames.header, frames.version)
    other_new = perturb(base, 0.05, seed=34)
    other = container.unpack(encode_delta(base, other_new), FORMAT_VERSION)
    liar = container.pack(
        FORMAT_VERSION,
        encode_header(header.model_copy(update={"tensors": decode_header(other.header, 1).tensors})),
        bytes(other.index_frame),
        bytes(other.values_frame),
        3,
        1,
    )
    target = {name: tensor.clone() for name, tensor in base.items()}
    with pytest.raises(DeltaIntegrityError, match="originals were restored"):
        apply_delta_in_place(target, liar)
    assert weights_hash(target) == weights_hash(base)
    with pytest.raises(DeltaIntegrityError):
        apply_delta_in_place(target, liar, base_hash=header.base_hash)
    assert weights_hash(target) == weights_hash(base)
