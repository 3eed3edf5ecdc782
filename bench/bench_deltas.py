"""Benchmark: DELTA payloads against their baselines, measured in the same run.

- size: DELTA bytes / FULL bytes at 0.1%, 1%, 5% and 10% of the elements changed at random, float32 and
  bfloat16 (goals at 1%: <= 1.35% for float32, <= 1.7% for bfloat16);
- encode: zstd level 3 over the FULL bytes (what compressing a FULL costs) against encode_delta, both when
  the base hash is known (a producer's steady state: it hashed the base as the previous result) and cold
  (both hashes computed), and diff + compress alone (goal: >= 1.0x);
- apply: a plain copy of every changed tensor (the cheapest way to install new weights) against
  apply_delta_in_place: without hashing, warm (base hash known: the result is hashed) and cold (both);
- choices behind the codec's defaults: zstd level and threads, values compressed or raw, index byte planes.

The weights are normal(0, 0.02) like an initialized model; a changed element moves by normal(0, 1e-3)
(new values near the old ones, as after an optimizer step). Each timing is the best of ``--repeat``, as
wall time and as this process's CPU time (steadier when other work shares the machine); ratios are
given for both. "No hashing" swaps the module's ``weights_hash`` for a lookup of the known digests
(unittest.mock), so it times exactly the rest of the same code path. Nothing is asserted: the script
prints ratios for a human (or CI) to read.
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from unittest import mock

import numpy as np
import torch
import zstandard

from ml8s.deltas import DeltaOptions, apply_delta_in_place, encode_delta, encode_full, weights_hash
from ml8s.deltas.indices import encode_positions

FRACTIONS = (0.001, 0.01, 0.05, 0.1)
GOALS = {torch.float32: 1.35, torch.bfloat16: 1.7}
INT_VIEW = {torch.float32: torch.int32, torch.bfloat16: torch.int16}
Weights = dict[str, torch.Tensor]


@dataclass(frozen=True)
class Timing:
    """Best wall seconds and best CPU seconds (this process, all threads) over several runs."""

    wall: float
    cpu: float


def best_of(repeat: int, action: Callable[[], object], reset: Callable[[], object] | None = None) -> Timing:
    """The fastest of ``repeat`` runs of ``action`` (``reset`` runs untimed before each)."""
    wall = cpu = float("inf")
    for _ in range(repeat):
        if reset is not None:
            reset()
        cpu0, wall0 = time.process_time(), time.perf_counter()
        action()
        wall, cpu = min(wall, time.perf_counter() - wall0), min(cpu, time.process_time() - cpu0)
    return Timing(wall, cpu)


def row(label: str, nbytes: int, timing: Timing, baseline: Timing | None, goal: float | None = None) -> str:
    """One table line: throughput, wall and CPU milliseconds, and the speed ratios to the baseline."""
    text = f"  {label:31} {nbytes / timing.wall / 1e6:7,.0f} MB/s {timing.wall * 1e3:8.1f} {timing.cpu * 1e3:8.1f}"
    if baseline is None:
        return text + "   (baseline)"
    wall_ratio, cpu_ratio = baseline.wall / timing.wall, baseline.cpu / timing.cpu
    text += f" {wall_ratio:7.2f}x {cpu_ratio:6.2f}x"
    if goal is not None:
        text += f"  goal >= {goal}x: {'ok' if min(wall_ratio, cpu_ratio) >= goal else 'MISSED'}"
    return text


HEAD = f"  {'':31} {'throughput':>12} {'wall ms':>8} {'CPU ms':>8} {'wall':>8} {'CPU':>7}"


@contextmanager
def hashing_skipped(module: str, digests: dict[int, str]) -> Iterator[None]:
    """``module.weights_hash`` answers from ``digests`` (keyed by the id of the first tensor) instead of hashing."""

    def lookup(tensors: Mapping[str, torch.Tensor]) -> str:
        return digests[id(tensors[min(tensors)])]

    with mock.patch(f"{module}.weights_hash", lookup):
        yield


def make_weights(params: int, dtype: torch.dtype, seed: int) -> Weights:
    """A transformer-like set of tensors totalling about ``params`` elements."""
    rng = np.random.default_rng(seed)
    width = max(8, int((params / 12) ** 0.5) // 8 * 8)
    shapes = {
        "attn.qkv.weight": (3 * width, width),
        "attn.out.weight": (width, width),
        "ffn.up.weight": (4 * width, width),
    }
    shapes |= {"ffn.down.weight": (width, 4 * width), "ffn.up.bias": (4 * width,), "norm.weight": (width,)}
    remaining = params - sum(int(np.prod(shape)) for shape in shapes.values())
    shapes["embed.weight"] = (max(1, remaining // width), width)
    return {
        name: torch.from_numpy(np.asarray(rng.standard_normal(shape) * 0.02, dtype=np.float32)).to(dtype)
        for name, shape in sorted(shapes.items())
    }


def perturb(weights: Weights, fraction: float, seed: int) -> Weights:
    """``fraction`` of every tensor's elements, at random positions, moved by normal(0, 1e-3)."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, tensor in weights.items():
        flat = tensor.clone().reshape(-1)
        count = max(1, round(flat.numel() * fraction))
        positions = torch.from_numpy(rng.choice(flat.numel(), size=count, replace=False))
        step = torch.from_numpy(np.asarray(rng.standard_normal(count) * 1e-3, dtype=np.float32))
        flat[positions] = (flat[positions].float() + step).to(tensor.dtype)
        out[name] = flat.reshape(tensor.shape)
    return out


def changed_fraction(base: Weights, new: Weights) -> float:
    dtype = next(iter(base.values())).dtype
    changed = sum(int((base[n].view(INT_VIEW[dtype]) != new[n].view(INT_VIEW[dtype])).sum()) for n in base)
    return changed / sum(t.numel() for t in base.values())


def bench_sizes(params: int, dtype: torch.dtype) -> None:
    base = make_weights(params, dtype, seed=1)
    full = len(encode_full(base))
    print(f"\n[size] {dtype}, {params:,} parameters, FULL = {full:,} bytes")
    print(f"  {'changed':>8} {'DELTA bytes':>12} {'DELTA/FULL':>11}  goal")
    for fraction in FRACTIONS:
        new = perturb(base, fraction, seed=2)
        size = len(encode_delta(base, new))
        goal = (
            f"<= {GOALS[dtype]}%: {'ok' if size / full * 100 <= GOALS[dtype] else 'MISSED'}" if fraction == 0.01 else ""
        )
        print(f"  {changed_fraction(base, new) * 100:7.3f}% {size:12,} {size / full * 100:10.3f}%  {goal}")


def bench_speed(params: int, dtype: torch.dtype, repeat: int) -> None:
    base = make_weights(params, dtype, seed=1)
    new = perturb(base, 0.01, seed=2)
    full = encode_full(new)
    nbytes = sum(t.numel() * t.element_size() for t in new.values())
    base_hash = weights_hash(base)
    zstd3 = zstandard.ZstdCompressor(level=3)
    t_zstd = best_of(repeat, lambda: zstd3.compress(full))
    t_hash = best_of(repeat, lambda: weights_hash(new))
    with hashing_skipped("ml8s.deltas.codec", {id(new[min(new)]): weights_hash(new)}):
        t_bare = best_of(repeat, lambda: encode_delta(base, new, base_hash=base_hash))
    t_warm = best_of(repeat, lambda: encode_delta(base, new, base_hash=base_hash))
    t_cold = best_of(repeat, lambda: encode_delta(base, new))
    print(f"\n[encode] {dtype}, {nbytes / 1e6:,.1f} MB of weights, 1% changed, best of {repeat}")
    print(HEAD)
    print(row("zstd -3 over the FULL bytes", nbytes, t_zstd, None))
    print(row("weights_hash (one pass)", nbytes, t_hash, t_zstd))
    print(row("diff + compress (no hashing)", nbytes, t_bare, t_zstd, goal=1.0))
    print(row("encode_delta, base hash known", nbytes, t_warm, t_zstd))
    print(row("encode_delta, cold", nbytes, t_cold, t_zstd))

    delta = encode_delta(base, new)
    changed = [n for n in base if not torch.equal(base[n].view(INT_VIEW[dtype]), new[n].view(INT_VIEW[dtype]))]
    target = {n: t.clone() for n, t in base.items()}

    def reset() -> None:
        for name in changed:
            target[name].copy_(base[name])

    def plain_copy() -> None:
        for name in changed:
            target[name].copy_(new[name])

    t_copy = best_of(repeat, plain_copy, reset)
    with hashing_skipped("ml8s.deltas.apply", {id(target[min(target)]): weights_hash(new)}):
        t_apply_bare = best_of(repeat, lambda: apply_delta_in_place(target, delta, base_hash=base_hash), reset)
    t_apply_warm = best_of(repeat, lambda: apply_delta_in_place(target, delta, base_hash=base_hash), reset)
    t_apply_cold = best_of(repeat, lambda: apply_delta_in_place(target, delta), reset)
    print(f"[apply] {dtype}, DELTA of {len(delta):,} bytes, best of {repeat}")
    print(HEAD)
    print(row("plain copy of changed tensors", nbytes, t_copy, None))
    print(row("apply in place, no hashing", nbytes, t_apply_bare, t_copy))
    print(row("apply in place, base hash known", nbytes, t_apply_warm, t_copy))
    print(row("apply in place, cold", nbytes, t_apply_cold, t_copy))


def bench_encode_rates(params: int, dtype: torch.dtype, repeat: int) -> None:
    """The encode goal at every change rate: diff + compress (and the warm encode, hash included) vs zstd -3."""
    base = make_weights(params, dtype, seed=1)
    base_hash = weights_hash(base)
    zstd3 = zstandard.ZstdCompressor(level=3)
    print(f"\n[encode by change rate] {dtype}, speed-up against zstd -3 over the FULL (wall/CPU), best of {repeat}")
    print(f"  {'changed':>8} {'zstd -3 ms':>11} {'diff+compress ms':>17} {'speed-up':>15}  goal    {'warm encode':>16}")
    for fraction in FRACTIONS:
        new = perturb(base, fraction, seed=2)
        full = encode_full(new)
        t_zstd = best_of(repeat, partial(zstd3.compress, full))
        encode = partial(encode_delta, base, new, base_hash=base_hash)
        with hashing_skipped("ml8s.deltas.codec", {id(new[min(new)]): weights_hash(new)}):
            t_bare = best_of(repeat, encode)
        t_warm = best_of(repeat, encode)
        wall, cpu = t_zstd.wall / t_bare.wall, t_zstd.cpu / t_bare.cpu
        verdict = "ok" if min(wall, cpu) >= 1.0 else "MISSED"
        print(
            f"  {changed_fraction(base, new) * 100:7.3f}% {t_zstd.wall * 1e3:11.1f} {t_bare.wall * 1e3:17.1f}"
            f" {wall:6.2f}x/{cpu:5.2f}x  >= 1.0x: {verdict:6} {t_zstd.wall / t_warm.wall:6.2f}x (hashed)"
        )


def bench_choices(params: int, dtype: torch.dtype, repeat: int) -> None:
    """The measurements behind DeltaOptions' defaults and the section layout."""
    base = make_weights(params, dtype, seed=1)
    new = perturb(base, 0.01, seed=2)
    base_hash = weights_hash(base)
    print(f"\n[choices] {dtype}, 1% changed: zstd level and threads (warm encode; thread count never changes bytes)")
    for level in (1, 3, 6, 9):
        cells = []
        for threads in (1, 2):
            options = DeltaOptions(level=level, threads=threads)
            size = len(encode_delta(base, new, options=options, base_hash=base_hash))
            seconds = best_of(repeat, lambda o=options: encode_delta(base, new, options=o, base_hash=base_hash))
            cells.append(f"threads {threads}: {seconds.wall * 1e3:6.1f} ms wall {seconds.cpu * 1e3:6.1f} ms CPU")
        print(f"  level {level}: {size:10,} bytes   " + "   ".join(cells))
    kind_view = INT_VIEW[dtype]
    planes, interleaved, values = [], [], []
    for name in base:
        old, fresh = base[name].view(kind_view).reshape(-1).numpy(), new[name].view(kind_view).reshape(-1).numpy()
        positions = np.flatnonzero(old != fresh)
        width, plane = encode_positions(positions)
        planes.append(plane.tobytes())
        interleaved.append(plane.reshape(width, -1).T.tobytes())
        values.append(fresh[positions].tobytes())
    zstd3, unzstd = zstandard.ZstdCompressor(level=3), zstandard.ZstdDecompressor()
    raw_values = b"".join(values)
    packed_values = zstd3.compress(raw_values)
    t_unpack = best_of(repeat, lambda: unzstd.decompress(packed_values))
    t_memcpy = best_of(repeat, lambda: bytearray(raw_values))
    index_planes, index_mixed = len(zstd3.compress(b"".join(planes))), len(zstd3.compress(b"".join(interleaved)))
    shrink = len(packed_values) / len(raw_values)
    print(f"  values: raw {len(raw_values):,} bytes, zstd {len(packed_values):,} ({shrink:.1%} of raw)")
    print(f"          decompress {t_unpack.wall * 1e3:.2f} ms vs copy {t_memcpy.wall * 1e3:.2f} ms")
    print(f"  index gaps after zstd: byte planes {index_planes:,} bytes, interleaved {index_mixed:,}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--params", type=int, default=4_000_000, help="parameters per model (default 4,000,000)")
    parser.add_argument("--repeat", type=int, default=5, help="timings per measurement, best kept (default 5)")
    parser.add_argument("--quick", action="store_true", help="1,000,000 parameters")
    args = parser.parse_args(argv)
    params: int = 1_000_000 if args.quick else args.params
    torch.set_num_threads(1)  # the codec's numpy work is single-threaded; keep torch's copies comparable
    print(
        f"bench_deltas: python {platform.python_version()}, torch {torch.__version__}, zstd {zstandard.ZSTD_VERSION},"
        f" {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}"
    )
    for dtype in (torch.float32, torch.bfloat16):
        bench_sizes(params, dtype)
    for dtype in (torch.float32, torch.bfloat16):
        bench_speed(params, dtype, args.repeat)
    for dtype in (torch.float32, torch.bfloat16):
        bench_encode_rates(params, dtype, args.repeat)
    for dtype in (torch.float32, torch.bfloat16):
        bench_choices(params, dtype, args.repeat)
    print(f"\nbench_deltas: load average {os.getloadavg()[0]:.2f} at the end (other work on the machine skews timings)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
