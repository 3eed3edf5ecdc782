"""Benchmark: the record history's sampler and gather against the per-sample designs they replace, same run.

Four measurements over one history of float32 records (136 features + target, 548 bytes each, as in the
design this follows), written through ``RecordStore`` to a local store and memory-mapped:

1. sampling: ``RecencySampler.sample`` (whole batch, numpy) against a per-sample Python loop shaped like the
   original design (``np.random.choice(p=...)`` then ``randint`` per draw); indices only, then end to end
   (indices + rows as tensors) against that design's dataset/sampler pair (target: >= 50x);
2. the same end to end against a torch ``DataLoader`` with a ``WeightedRandomSampler`` over the same maps,
   with per-row weights giving the same distribution;
3. training-input throughput: sample + gather + one step of a small torch MLP, rows gathered from the
   maps against the same rows held in RAM (target: mapped / RAM >= 0.9);
4. peak RSS (``ru_maxrss`` of a fresh subprocess) sampling a 1x and a 10x larger history, with the files
   evicted from the page cache first (a history on disk, not in RAM). Mapped pages a process has read count
   in its RSS, and the kernel maps up to 64 KiB around each page faulted (more for large folios), so the
   figure is shown with and without ``MappedHistory.release()`` after every batch (target: 10x / 1x <= 1.2).

Nothing is asserted: the script prints figures and ratios; thresholds on wall time would measure the machine.
"""

from __future__ import annotations

import argparse
import json
import mmap
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import torch
from numpy.typing import NDArray

from ml8s.records import RecencySampler, RecordSchema, RecordStore, SamplerConfig, gather
from ml8s.store import LocalStore

FEATURES = 136
SCHEMA = RecordSchema.build([f"f{i:03d}" for i in range(FEATURES)], "target", ["a", "b", "c", "d"])
ALPHA = 1.0


def write_history(root: str, generations: int, rows: int) -> RecordStore:
    history = RecordStore(LocalStore(root), "history")
    for generation in range(generations):
        history.append_generation(SCHEMA, _chunks(generation, rows))
    return history


def _chunks(generation: int, rows: int, chunk: int = 50_000) -> Iterator[NDArray[np.float32]]:
    rng = np.random.default_rng(generation)
    for start in range(0, rows, chunk):
        n = min(chunk, rows - start)
        block = rng.standard_normal((n, SCHEMA.columns), dtype=np.float32)
        block[:, FEATURES] = rng.integers(0, 4, n)
        yield block


@dataclass(frozen=True)
class Rate:
    """Samples per second of wall time and per second of this process's CPU time (best run of each)."""

    wall: float
    cpu: float

    def __truediv__(self, other: Rate) -> str:
        return f"ratio {self.wall / other.wall:7.2f}x wall, {self.cpu / other.cpu:7.2f}x CPU time"


def race(repeat: int, contenders: dict[str, tuple[int, Callable[[], object]]]) -> dict[str, Rate]:
    """Run every contender ``repeat`` times, interleaved (so a busy moment of a shared machine hits all of
    them alike); each contender's best wall and best CPU time, as samples per second."""
    wall = dict.fromkeys(contenders, float("inf"))
    cpu = dict.fromkeys(contenders, float("inf"))
    for _ in range(repeat):
        for name, (_, action) in contenders.items():
            cpu0, wall0 = time.process_time(), time.perf_counter()
            action()
            wall[name] = min(wall[name], time.perf_counter() - wall0)
            cpu[name] = min(cpu[name], max(time.process_time() - cpu0, 1e-9))
    return {name: Rate(wall=n / wall[name], cpu=n / cpu[name]) for name, (n, _) in contenders.items()}


class SeedDataset:
    """The original design's dataset: an mmap per file, a linear search for the file of a global index."""

    def __init__(self, paths: list[str], record_size: int) -> None:
        self.record_size, self.cumulative, self.mmaps = record_size, [0], []
        for path in paths:
            with open(path, "rb") as handle:
                self.mmaps.append(mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ))
            self.cumulative.append(self.cumulative[-1] + os.path.getsize(path) // record_size)

    def __getitem__(self, idx: int) -> tuple[torch.Tensor, torch.Tensor]:
        file_idx = 0
        for i, cumsize in enumerate(self.cumulative[1:], 1):
            if idx < cumsize:
                file_idx = i - 1
                break
        offset = (idx - self.cumulative[file_idx]) * self.record_size
        record = self.mmaps[file_idx][offset : offset + self.record_size]
        state = np.frombuffer(record[: FEATURES * 4], dtype=np.float32)
        target = np.frombuffer(record[FEATURES * 4 :], dtype=np.float32)
        return torch.from_numpy(state.copy()), torch.from_numpy(target.copy())


def seed_indices(probabilities: list[float], cumulative: list[int], batch: int) -> list[int]:
    out = []
    for _ in range(batch):
        epoch = np.random.choice(len(probabilities), p=probabilities)
        out.append(np.random.randint(cumulative[epoch], cumulative[epoch + 1]))
    return out


def seed_batch(dataset: SeedDataset, probabilities: list[float], batch: int) -> tuple[torch.Tensor, torch.Tensor]:
    pairs = [dataset[i] for i in seed_indices(probabilities, dataset.cumulative, batch)]
    return torch.stack([p[0] for p in pairs]), torch.stack([p[1] for p in pairs])


class MapsDataset(torch.utils.data.Dataset[tuple[torch.Tensor, int]]):
    """Per-item access to the same maps, for a stock DataLoader."""

    def __init__(self, maps: tuple[NDArray[np.float32], ...]) -> None:
        self.maps = maps
        self.offsets = np.concatenate(([0], np.cumsum([len(m) for m in maps])))

    def __len__(self) -> int:
        return int(self.offsets[-1])

    def __getitem__(self, idx: int) -> tuple[torch.Tensor, int]:
        generation = int(np.searchsorted(self.offsets, idx, side="right")) - 1
        row = self.maps[generation][idx - self.offsets[generation]]
        return torch.from_numpy(row[:FEATURES].copy()), int(row[FEATURES])


def bench_sampling(history: RecordStore, cache: str, batch: int, repeat: int) -> None:
    mapped = history.open_mapped(cache)
    sizes, probabilities = mapped.generation_rows, mapped.sampler(SamplerConfig(batch_size=1, seed=0)).probabilities
    for array in mapped.maps:
        np.asarray(array).sum()  # page cache and mappings warm for every contender
    sampler = RecencySampler(sizes, SamplerConfig(alpha=ALPHA, batch_size=batch, seed=0))
    np.random.seed(0)
    dataset = SeedDataset(list(mapped.paths), SCHEMA.record_size)
    probs = [float(p) for p in probabilities]
    weights = torch.from_numpy(np.repeat(probabilities / np.asarray(sizes), sizes))
    loader = torch.utils.data.DataLoader(
        MapsDataset(mapped.maps),
        batch_size=batch,
        sampler=torch.utils.data.WeightedRandomSampler(weights, 4 * batch, generator=torch.Generator().manual_seed(0)),
    )

    def ours_e2e() -> None:
        for _ in range(20):
            x, y = mapped.gather(sampler.sample())
            _ = torch.from_numpy(x), torch.from_numpy(y)

    rates = race(
        repeat,
        {
            "ours_idx": (20 * batch, lambda: [sampler.sample() for _ in range(20)]),
            "ours_e2e": (20 * batch, ours_e2e),
            "loop_idx": (batch, lambda: seed_indices(probs, dataset.cumulative, batch)),
            "loop_e2e": (batch, lambda: seed_batch(dataset, probs, batch)),
            "torch_e2e": (4 * batch, lambda: list(loader)),
        },
    )
    print(
        f"[sampling] {len(sizes)} generations, {sum(sizes):,} records, batch {batch}, alpha {ALPHA}, best of {repeat}"
    )
    r = rates
    print("  samples/s (wall)                     target: ours / per-sample loop >= 50x")
    print(f"  indices     RecencySampler.sample {r['ours_idx'].wall:12,.0f}")
    print(f"              per-sample loop       {r['loop_idx'].wall:12,.0f}   {r['ours_idx'] / r['loop_idx']}")
    print(f"  end to end  sample + gather       {r['ours_e2e'].wall:12,.0f}")
    print(f"              seed dataset+sampler  {r['loop_e2e'].wall:12,.0f}   {r['ours_e2e'] / r['loop_e2e']}")
    print(f"              torch DataLoader      {r['torch_e2e'].wall:12,.0f}   {r['ours_e2e'] / r['torch_e2e']}")
    print("              (DataLoader: per-item Dataset over the same maps, WeightedRandomSampler, same distribution)")


def bench_training(history: RecordStore, cache: str, batch: int, steps: int, repeat: int) -> None:
    mapped = history.open_mapped(cache)
    in_ram = tuple(np.array(array) for array in mapped.maps)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(FEATURES, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)

    def train(maps: tuple[NDArray[np.float32], ...], release_every: int) -> None:
        sampler = mapped.sampler(SamplerConfig(alpha=ALPHA, batch_size=batch, seed=1))
        for step in range(1, steps + 1):
            x, y = gather(maps, sampler.sample())
            loss = torch.nn.functional.cross_entropy(model(torch.from_numpy(x)), torch.from_numpy(y))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if release_every and step % release_every == 0:
                mapped.release()

    train(mapped.maps, 0)  # warm
    rates = race(
        repeat,
        {
            "ram": (batch * steps, lambda: train(in_ram, 0)),
            "mapped": (batch * steps, lambda: train(mapped.maps, 0)),
            "release_1": (batch * steps, lambda: train(mapped.maps, 1)),
            "release_16": (batch * steps, lambda: train(mapped.maps, 16)),
        },
    )
    print(
        f"[training input] sample + gather + MLP step ({FEATURES}-64-4), batch {batch}, {steps} steps, best of {repeat}"
    )
    print("  samples/s (wall)                       target: mapped / RAM >= 0.9")
    print(f"  rows in RAM                        {rates['ram'].wall:12,.0f}")
    print(f"  rows mapped                        {rates['mapped'].wall:12,.0f}   {rates['mapped'] / rates['ram']}")
    print(
        f"  mapped, release() every batch      {rates['release_1'].wall:12,.0f}   {rates['release_1'] / rates['ram']}"
    )
    print(
        f"  mapped, release() every 16 batches {rates['release_16'].wall:12,.0f}   {rates['release_16'] / rates['ram']}"
    )


_RSS_CHILD = """
import json, resource, sys
from ml8s.records import RecordStore, SamplerConfig
from ml8s.store import LocalStore
root, batch, batches, release, alpha = sys.argv[1:6]
batch, batches, release, alpha = int(batch), int(batches), release == "1", float(alpha)
mapped = RecordStore(LocalStore(root), "history").open_mapped(root, verify_hash=False)
sampler = mapped.sampler(SamplerConfig(alpha=alpha, batch_size=batch, seed=2))
for _ in range(batches):
    mapped.gather(sampler.sample())
    if release:
        mapped.release()
hwm = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM"))
print(json.dumps({"maxrss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, "hwm_kb": hwm}))
"""

# Linux records the pre-exec address space's peak in the new program's ru_maxrss, and subprocess execs from
# (a vfork of) this large process: a small launcher in between keeps that inherited peak small.
_LAUNCHER = "import subprocess, sys; sys.exit(subprocess.run(sys.argv[1:]).returncode)"


def peak_rss(root: str, batch: int, batches: int, release: bool) -> tuple[int, int]:
    """(ru_maxrss, VmHWM) in KiB of a fresh process sampling the history under ``root``."""
    for name in os.listdir(os.path.join(root, "history")):
        fd = os.open(os.path.join(root, "history", name), os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)  # as if the history had never been read
        os.close(fd)
    child = [sys.executable, "-c", _RSS_CHILD, root, str(batch), str(batches), "1" if release else "0", str(ALPHA)]
    out = subprocess.run([sys.executable, "-c", _LAUNCHER, *child], check=True, capture_output=True, text=True)
    figures = json.loads(out.stdout)
    return int(figures["maxrss_kb"]), int(figures["hwm_kb"])


def bench_rss(workdir: str, generations: int, rows: int, batch: int, batches: int) -> None:
    roots = {scale: os.path.join(workdir, f"rss-{scale}x") for scale in (1, 10)}
    for scale, root in roots.items():
        write_history(root, generations * scale, rows)
    size_mb = generations * rows * SCHEMA.record_size / 1e6
    print(
        f"[peak RSS] 1x = {generations} x {rows:,} records ({size_mb:,.0f} MB), 10x = {10 * generations} generations; "
        f"{batches} batches of {batch}, page cache evicted first"
    )
    for release in (True, False):
        (small, small_hwm), (large, large_hwm) = (peak_rss(roots[s], batch, batches, release) for s in (1, 10))
        label = "release() every batch" if release else "no release()         "
        target = "  (target <= 1.2)" if release else ""
        print(f"  {label}  1x {small / 1024:7.1f} MiB  10x {large / 1024:7.1f} MiB  ratio {large / small:5.2f}{target}")
        print(f"  {'':21}  (VmHWM 1x {small_hwm / 1024:.1f} MiB, 10x {large_hwm / 1024:.1f} MiB)", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller history and fewer repeats")
    args = parser.parse_args()
    torch.set_num_threads(1)  # one core each for every contender: the comparison, not the machine
    generations, rows, repeat = (4, 10_000, 2) if args.quick else (10, 20_000, 5)
    with tempfile.TemporaryDirectory(prefix="ml8s-bench-records-") as workdir:
        started = time.perf_counter()
        history = write_history(os.path.join(workdir, "main"), generations, rows)
        written = generations * rows * SCHEMA.record_size
        print(f"[append] {generations} generations, {written / 1e6:,.0f} MB in {time.perf_counter() - started:.1f} s")
        cache = os.path.join(workdir, "cache")
        bench_sampling(history, cache, 4096, repeat)
        bench_training(history, cache, 1024, 20 if args.quick else 100, repeat)
        bench_rss(workdir, generations, rows, 1024, 16 if args.quick else 64)
    print(f"python {sys.version.split()[0]}, numpy {np.__version__}, torch {torch.__version__}, {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
