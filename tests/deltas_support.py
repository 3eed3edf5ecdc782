"""Helpers of the tests/test_deltas_*.py files; run as a script, the out-of-process worker they spawn.

python tests/deltas_support.py encode OUT     write OUT/delta.bin and OUT/full.bin of the fixed weights
python tests/deltas_support.py rebuild DIR... per DIR, rebuild full.bin + delta_*.bin, print the hops' hashes
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch

from ml8s.deltas import apply_delta_in_place, decode_full, encode_delta, encode_full, weights_hash

REPO = Path(__file__).resolve().parent.parent
SHAPES: dict[str, tuple[int, ...]] = {
    "block.0.bias": (48,),
    "block.0.weight": (64, 48),
    "embed.weight": (300, 16),
    "empty": (0, 4),
    "scale": (),
}


def make_weights(seed: int, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """Small weights, normal(0, 0.02) like an initialized model, the same in every process."""
    rng = np.random.default_rng(seed)
    return {
        name: torch.from_numpy(np.asarray(rng.standard_normal(shape) * 0.02, dtype=np.float32)).to(dtype)
        for name, shape in SHAPES.items()
    }


def perturb(weights: dict[str, torch.Tensor], fraction: float, seed: int) -> dict[str, torch.Tensor]:
    """A copy with ``fraction`` of each tensor's elements (at least one) moved by a small random step."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, tensor in weights.items():
        flat = tensor.clone().reshape(-1)
        if flat.numel():
            count = max(1, round(flat.numel() * fraction))
            positions = torch.from_numpy(rng.choice(flat.numel(), size=count, replace=False))
            step = torch.from_numpy(rng.standard_normal(count).astype(np.float32) * 0.01)
            flat[positions] = (flat[positions].float() + step).to(tensor.dtype)
        out[name] = flat.reshape(tensor.shape)
    return out


def run_worker(*args: str, hash_seed: str = "random") -> str:
    """This file as a script in a fresh interpreter; its stdout."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONHASHSEED": hash_seed}
    done = subprocess.run(
        [sys.executable, str(Path(__file__)), *args], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def _encode(out: Path) -> None:
    base = make_weights(11, torch.bfloat16) | {"f32": make_weights(12, torch.float32)["block.0.weight"]}
    new = perturb(base, 0.05, seed=13)
    (out / "delta.bin").write_bytes(encode_delta(base, new))
    (out / "full.bin").write_bytes(encode_full(new))
    print(weights_hash(new))


def _rebuild(directory: Path) -> None:
    tensors = decode_full((directory / "full.bin").read_bytes())
    hashes = [weights_hash(tensors)]
    for path in sorted(directory.glob("delta_*.bin")):
        header = apply_delta_in_place(tensors, path.read_bytes(), base_hash=hashes[-1])
        hashes.append(weights_hash(tensors))
        assert header.result_hash == hashes[-1]
    print(json.dumps(hashes))


if __name__ == "__main__":
    mode, *paths = sys.argv[1:]
    for path in paths:
        _encode(Path(path)) if mode == "encode" else _rebuild(Path(path))
