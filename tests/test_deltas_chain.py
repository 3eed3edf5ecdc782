"""FULL -> DELTA x 100: a fresh consumer process rebuilds every hop bit for bit from the FULL anchor."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from deltas_support import make_weights, perturb, run_worker

from ml8s.deltas import apply_delta, decode_full, encode_delta, encode_full, read_delta_header, weights_hash

HOPS = 100


def _produce(directory: Path, dtype: torch.dtype) -> list[str]:
    """FULL then HOPS DELTAs of 1% random changes each, written to ``directory``; the producer's hashes."""
    directory.mkdir()
    weights = make_weights(21, dtype)
    (directory / "full.bin").write_bytes(encode_full(weights))
    produced = [weights_hash(weights)]
    for hop in range(1, HOPS + 1):
        new = perturb(weights, 0.01, seed=1000 + hop)
        delta = encode_delta(weights, new, base_hash=produced[-1])
        (directory / f"delta_{hop:03d}.bin").write_bytes(delta)
        produced.append(weights_hash(new))
        assert read_delta_header(delta).result_hash == produced[-1]
        weights = new
    assert len(set(produced)) == HOPS + 1, "every hop must change the weights"
    return produced


def test_hundred_hops_rebuilt_by_a_fresh_decoder(tmp_path: Path) -> None:
    chains = {tmp_path / "f32": torch.float32, tmp_path / "bf16": torch.bfloat16}
    produced = [_produce(directory, dtype) for directory, dtype in chains.items()]
    rebuilt = run_worker("rebuild", *(str(directory) for directory in chains))
    assert [json.loads(line) for line in rebuilt.splitlines()] == produced


def test_rebuild_in_process_matches_the_producer_bit_for_bit() -> None:
    weights = make_weights(22, torch.bfloat16)
    rebuilt = decode_full(encode_full(weights))
    for hop in range(10):
        new = perturb(weights, 0.05, seed=hop)
        rebuilt = apply_delta(rebuilt, encode_delta(weights, new))
        weights = new
    assert all(torch.equal(rebuilt[n].view(torch.int16), weights[n].view(torch.int16)) for n in weights)
