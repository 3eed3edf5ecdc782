"""Benchmark: weights on a chain (ml8s.serving) against their baselines, measured in the same run.

Per dtype (float32, bfloat16) and fraction of elements changed at random (0.1%, 1%, 5%, 10%), on a local
chain in a temp directory:

- size: the stored bytes of a DELTA version against the FULL version of the same weights (goals at 1%:
  <= 1.35% for float32, <= 1.7% for bfloat16);
- encode: ``encode_delta`` (diff + compress, base hash known) against zstd level 3 alone over the FULL
  bytes (goal >= 1.0x);
- apply: the consumer's fast path (fetch the DELTA, apply it to a copy of the served weights, verify the
  weights hash: what an inference client does per version) and the bare in-place apply, against a plain
  copy of every changed tensor (``memcpy`` of the tensors a DELTA touches); and the slow path (FULL +
  one DELTA rebuilt from the store);
- commit: a FULL commit against a DELTA commit (each a whole chain commit: claim, upload, swap).

Each timing is the best of ``--repeat`` (wall seconds). Nothing is asserted: the script prints ratios.
Run: ``PYTHONPATH=$PWD python bench/bench_serving.py [--params 4000000] [--repeat 3]``.
"""

from __future__ import annotations

import argparse
import hashlib
import tempfile
import time
from collections.abc import Callable

import numpy as np
import torch
import zstandard
from bench_deltas import perturb  # the same changes as the codec bench (bench/ is on sys.path)

from ml8s.chain import ChainStore, CommitMeta
from ml8s.deltas import apply_delta_in_place, encode_delta, encode_full, weights_hash
from ml8s.serving import DeltaProducer
from ml8s.store import open_store
from ml8s.weights import apply_hop, rebuild_weights

FRACTIONS = (0.001, 0.01, 0.05, 0.1)
GOALS = {torch.float32: 1.35, torch.bfloat16: 1.7}
Weights = dict[str, torch.Tensor]


def best_of(repeat: int, action: Callable[[], object]) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        action()
        best = min(best, time.perf_counter() - start)
    return best


def make_weights(params: int, dtype: torch.dtype) -> Weights:
    """A model-like set of tensors (a few large matrices, some vectors), normal(0, 0.02)."""
    rng = np.random.default_rng(0)
    side = int((params / 4) ** 0.5)
    shapes = {f"layer.{i}.weight": (side, side) for i in range(4)} | {f"layer.{i}.bias": (side,) for i in range(4)}
    return {n: torch.from_numpy(rng.normal(0, 0.02, s).astype(np.float32)).to(dtype) for n, s in shapes.items()}


def meta(tag: str) -> CommitMeta:
    digest = hashlib.sha256(tag.encode()).hexdigest()
    return CommitMeta(
        run_id=digest[:12], full_config_hash=digest, artifact_root="bench", architecture="b", parameter_count=0
    )


def one(dtype: torch.dtype, fraction: float, params: int, repeat: int) -> list[str]:
    base = make_weights(params, dtype)
    new = perturb(base, fraction, seed=int(fraction * 1e6))
    base_hash = weights_hash(base)
    with tempfile.TemporaryDirectory(prefix="ml8s-bench-serving-") as tmp:
        chain = ChainStore(open_store(f"file://{tmp}"), "bench")
        chain.init()
        producer = DeltaProducer(chain, interval=1000)
        tag = f"{dtype}-{fraction}"
        start = time.perf_counter()
        full = producer.publish_sync(base, meta(f"{tag}-full"))
        commit_full = time.perf_counter() - start
        start = time.perf_counter()
        delta = producer.publish_sync(new, meta(f"{tag}-delta"))
        commit_delta = time.perf_counter() - start
        assert (full.payload_kind, delta.payload_kind) == ("full", "delta")
        v1, v2 = chain.get(1), chain.get(2)
        served = rebuild_weights(chain, v1)
        full_bytes = encode_full(new)
        zstd3 = best_of(repeat, lambda: zstandard.ZstdCompressor(level=3).compress(full_bytes))
        encode = best_of(repeat, lambda: encode_delta(base, new, base_hash=base_hash))
        blob = encode_delta(base, new, base_hash=base_hash)
        fast = best_of(repeat, lambda: apply_hop(chain, served.cloned(), v2))
        slow = best_of(repeat, lambda: rebuild_weights(chain, v2))
        targets = {n: t.clone() for n, t in base.items()}
        changed = [n for n in base if not torch.equal(base[n], new[n])]
        memcpy = best_of(repeat, lambda: [targets[n].copy_(new[n]) for n in changed])
        bare_total = float("inf")
        for _ in range(repeat):
            copy = {n: t.clone() for n, t in base.items()}
            start = time.perf_counter()
            apply_delta_in_place(copy, blob, base_hash=base_hash)
            bare_total = min(bare_total, time.perf_counter() - start)
    ratio = 100 * delta.stored_bytes / full.stored_bytes
    goal = GOALS[dtype] if fraction == 0.01 else None
    verdict = f"  goal <= {goal}%: {'ok' if ratio <= goal else 'MISSED'}" if goal else ""
    nbytes = full.weights_bytes
    return [
        f"{str(dtype).removeprefix('torch.'):9} {fraction * 100:5.1f}%  size {delta.stored_bytes:>10,} / "
        f"{full.stored_bytes:>11,} B = {ratio:6.2f}%{verdict}",
        f"    encode {nbytes / encode / 1e6:7.0f} MB/s vs zstd-3 alone {nbytes / zstd3 / 1e6:7.0f} MB/s: "
        f"{zstd3 / encode:5.2f}x (goal >= 1.0x: {'ok' if zstd3 / encode >= 1.0 else 'MISSED'})",
        f"    apply  memcpy of changed tensors {memcpy * 1e3:7.2f} ms (baseline); in place {bare_total * 1e3:7.2f} ms "
        f"({bare_total / memcpy:5.1f}x its time); fast path {fast * 1e3:7.2f} ms ({fast / memcpy:5.1f}x); "
        f"slow path {slow * 1e3:7.2f} ms",
        f"    commit FULL {commit_full * 1e3:7.1f} ms, DELTA {commit_delta * 1e3:7.1f} ms (one run each)",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--params", type=int, default=4_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    threads = torch.get_num_threads()
    print(f"weights on a chain: {args.params:,} parameters, best of {args.repeat}, torch threads {threads}")
    for dtype in (torch.float32, torch.bfloat16):
        for fraction in FRACTIONS:
            for line in one(dtype, fraction, args.params, args.repeat):
                print(line, flush=True)


if __name__ == "__main__":
    main()
