"""FULL payloads, and determinism of every payload and hash across separate processes."""

from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path

import pytest
import safetensors.torch
import torch
from deltas_support import make_weights, perturb, run_worker

from ml8s.deltas import decode_full, encode_delta, encode_full, read_full_hash, weights_hash
from ml8s.deltas.full import HASH_KEY
from ml8s.errors import DeltaDtypeError, DeltaFormatError, DeltaIntegrityError


def test_full_round_trip_is_plain_safetensors() -> None:
    weights = make_weights(41, torch.bfloat16) | {"f16": torch.arange(6, dtype=torch.float16).reshape(2, 3)}
    full = encode_full(weights)
    assert read_full_hash(full) == weights_hash(weights)
    decoded = decode_full(full)
    assert list(decoded) == sorted(weights) and weights_hash(decoded) == weights_hash(weights)
    decoded["f16"][0, 0] = 5.0  # writable, and not aliasing the payload bytes
    assert decode_full(full)["f16"][0, 0] == 0.0
    plain = safetensors.torch.load(full)  # any safetensors reader loads it
    assert all(torch.equal(plain[n], weights[n]) for n in weights)
    (length,) = struct.unpack_from("<Q", full)
    assert json.loads(full[8 : 8 + length])["__metadata__"] == {HASH_KEY: weights_hash(weights)}


def test_full_of_non_contiguous_weights_matches_contiguous() -> None:
    weights = {"w": torch.arange(12, dtype=torch.float32).reshape(3, 4)}
    assert not weights["w"].t().is_contiguous()
    assert encode_full({"w": weights["w"].t()}) == encode_full({"w": weights["w"].t().contiguous()})
    assert weights_hash({"w": weights["w"].t()}) == weights_hash({"w": weights["w"].t().contiguous()})


def test_full_of_tied_and_empty_tensors() -> None:
    shared = torch.arange(16, dtype=torch.float32).reshape(4, 4)
    weights = {"a": shared, "b": shared, "row": shared[1], "none": torch.zeros(0), "none2": torch.zeros(0, 3)}
    decoded = decode_full(encode_full(weights))  # safetensors alone refuses tensors that share memory
    assert weights_hash(decoded) == weights_hash(weights)
    decoded["a"][0, 0] = 9.0
    assert decoded["b"][0, 0] == 0.0 and shared[0, 0] == 0.0


def test_full_refuses_non_float_tensors() -> None:
    with pytest.raises(DeltaDtypeError, match="steps"):
        encode_full({"w": torch.zeros(2), "steps": torch.zeros(1, dtype=torch.int64)})
    forged = safetensors.torch.save({"steps": torch.zeros(1, dtype=torch.int64)}, metadata={HASH_KEY: "0" * 64})
    with pytest.raises(DeltaDtypeError):
        decode_full(forged)


def test_full_tampering_is_refused() -> None:
    weights = make_weights(42, torch.float32)
    full = encode_full(weights)
    (length,) = struct.unpack_from("<Q", full)
    flipped = bytearray(full)
    flipped[-3] ^= 0x10  # a data byte of the last tensor
    with pytest.raises(DeltaIntegrityError, match="records"):
        decode_full(bytes(flipped))
    for cut in (0, 7, 8, 20, length + 8, len(full) - 1):
        with pytest.raises(DeltaFormatError):
            decode_full(full[:cut])
    with pytest.raises(DeltaFormatError, match="header length"):
        decode_full(struct.pack("<Q", 2**63) + full[8:])
    with pytest.raises(DeltaFormatError, match="not JSON"):
        decode_full(full[:8] + b"\xff" + full[9:])
    for metadata in (None, {}, {HASH_KEY: "0" * 64, "extra": "x"}, {HASH_KEY: "nothex"}):
        payload = safetensors.torch.save({"w": torch.zeros(2)}, metadata=metadata)
        with pytest.raises(DeltaFormatError):
            decode_full(payload)


def test_payloads_are_identical_across_processes(tmp_path: Path) -> None:
    """Two fresh interpreters (different string-hash seeds) and this one must agree on every byte."""
    outs = [tmp_path / "one", tmp_path / "two"]
    printed = []
    for seed, out in enumerate(outs):
        out.mkdir()
        printed.append(run_worker("encode", str(out), hash_seed=str(seed)).strip())
    base = make_weights(11, torch.bfloat16) | {"f32": make_weights(12, torch.float32)["block.0.weight"]}
    new = perturb(base, 0.05, seed=13)
    assert printed == [weights_hash(new)] * 2
    for name, here in (("delta.bin", encode_delta(base, new)), ("full.bin", encode_full(new))):
        digests = {hashlib.sha256((out / name).read_bytes()).hexdigest() for out in outs}
        assert digests == {hashlib.sha256(here).hexdigest()}, name
