"""Benchmark: continual training on full history (recency-weighted) against a reservoir buffer, after drift.

The claim measured: a model trained continually as data generations arrive keeps its accuracy on the
*earliest* generation when every batch is drawn from the whole history (memory-mapped, weighted
``(g + 1) ** alpha``), and loses it when batches come from a fixed-size reservoir buffer; at what cost on
the *latest* generation.

Setup, deterministic from each seed:

- a synthetic tabular task: ``FEATURES - 1`` gaussian features and one categorical feature (its level
  stored as a float), ``CLASSES`` classes labelled by a small random "teacher" network. Each generation
  drifts a little: the feature means move along a fixed direction (covariate shift), the teacher's weights
  move along a fixed direction (the class boundary turns), and the categorical levels' frequencies shift;
- generation ``g``'s training rows are appended with ``RecordStore.append_generation`` to a history in a
  ``LocalStore`` on a temp dir, then the history is re-opened with ``open_mapped`` and every full-history
  contender draws its batches through ``MappedHistory.sampler`` + ``gather`` from the maps;
- after each generation arrives, every contender continues training its own model (same initial weights
  for all; weights and Adam state carried over, never reset) for the same number of optimizer steps of
  the same batch size: the sample budget is equal;
- contenders: full history with alpha 0, 1 and 2; a reservoir buffer (classic reservoir sampling,
  algorithm R, over the stream of every training row so far; capacity = one generation's rows; batches
  drawn uniformly from the buffer); and, as a reference for how much there is to forget, the latest
  generation alone;
- after the last generation: accuracy on held-out rows (never written to the history) of generation 0 and
  of the last generation, and the mean over every generation's held-out rows.

Nothing is asserted: the figures are printed, with ratios against the reservoir measured in the same run.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from numpy.typing import NDArray

from ml8s.records import MappedHistory, RecencySampler, RecordSchema, RecordStore, SamplerConfig, gather
from ml8s.store import LocalStore

FEATURES = 16
CLASSES = 3
LEVELS = 4  # levels of the categorical feature (the last one)
SCHEMA = RecordSchema.build(
    [f"x{i:02d}" for i in range(FEATURES - 1)] + ["level"], "label", [f"c{k}" for k in range(CLASSES)]
)
Arrays = tuple[NDArray[np.float32], NDArray[np.int64]]


@dataclass(frozen=True)
class Config:
    """Everything the run depends on; printed at the start."""

    generations: int
    rows: int  # training rows per generation (appended to the history)
    test_rows: int  # held-out rows per generation (never appended)
    steps: int  # optimizer steps after each generation arrives, for every contender
    batch: int
    capacity: int  # reservoir buffer rows
    seeds: tuple[int, ...]
    hidden: int = 64
    lr: float = 1e-3
    covariate_shift: float = 0.3  # feature-mean move per generation, in standard deviations
    concept_drift: float = 0.35  # teacher-weight move per generation, relative to the weights' scale


# -- data --------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Task:
    """The drifting task of one seed: a teacher network and the directions everything drifts along."""

    w1: NDArray[np.float64]
    w2: NDArray[np.float64]
    level_bias: NDArray[np.float64]
    d1: NDArray[np.float64]
    d2: NDArray[np.float64]
    mean_dir: NDArray[np.float64]
    config: Config

    @classmethod
    def build(cls, seed: int, config: Config) -> Task:
        rng = np.random.default_rng([seed, 0xD81F7])
        dense, hidden = FEATURES - 1, 24
        mean_dir = rng.standard_normal(dense)
        return cls(
            w1=rng.standard_normal((dense, hidden)) / np.sqrt(dense),
            w2=rng.standard_normal((hidden, CLASSES)) / np.sqrt(hidden),
            level_bias=0.5 * rng.standard_normal((LEVELS, CLASSES)),
            d1=rng.standard_normal((dense, hidden)) / np.sqrt(dense),
            d2=rng.standard_normal((hidden, CLASSES)) / np.sqrt(hidden),
            mean_dir=mean_dir / np.linalg.norm(mean_dir),
            config=config,
        )

    def rows(self, seed: int, generation: int, split: int, n: int) -> NDArray[np.float32]:
        """``n`` records (features then label, float32) of ``generation``; ``split`` 0 trains, 1 is held out."""
        rng = np.random.default_rng([seed, generation, split])
        c = self.config
        dense = rng.standard_normal((n, FEATURES - 1)) + generation * c.covariate_shift * self.mean_dir
        # the categorical levels drift from mostly-low to mostly-high
        level_logits = np.arange(LEVELS) * (generation / max(c.generations - 1, 1) - 0.5) * 2.0
        level_p = np.exp(level_logits) / np.exp(level_logits).sum()
        level = rng.choice(LEVELS, size=n, p=level_p)
        w1 = self.w1 + generation * c.concept_drift * self.d1
        w2 = self.w2 + generation * c.concept_drift * self.d2
        logits = np.tanh(dense @ w1) @ w2 + self.level_bias[level]
        out = np.empty((n, FEATURES + 1), dtype=np.float32)
        out[:, : FEATURES - 1] = dense
        out[:, FEATURES - 1] = level
        out[:, FEATURES] = logits.argmax(axis=1)
        return out


def split(records: NDArray[np.float32]) -> Arrays:
    return np.ascontiguousarray(records[:, :FEATURES]), records[:, FEATURES].astype(np.int64)


# -- the reservoir baseline --------------------------------------------------------------------------------
class Reservoir:
    """Classic reservoir sampling (algorithm R): after ``t`` rows streamed, a uniform sample of ``capacity``.

    Row ``t`` (0-based, over the whole stream) fills slot ``t`` while the buffer is not full; afterwards it
    replaces slot ``j ~ U{0..t}`` when ``j < capacity`` and is dropped otherwise. Vectorized per chunk: the
    draws are made for the whole chunk at once and, where several rows pick one slot, the last one keeps it,
    exactly as the one-row-at-a-time loop would.
    """

    def __init__(self, capacity: int, seed: int) -> None:
        self.buffer = np.empty((capacity, FEATURES + 1), dtype=np.float32)
        self.capacity, self.seen = capacity, 0
        self.rng = np.random.default_rng([seed, 0x5E5E])

    def add(self, chunk: NDArray[np.float32]) -> None:
        t = self.seen + np.arange(len(chunk))
        fill = t < self.capacity
        self.buffer[t[fill]] = chunk[fill]
        later = np.flatnonzero(~fill)
        slots = self.rng.integers(0, t[later] + 1)
        kept = slots < self.capacity
        rows, slots = later[kept], slots[kept]
        # last writer wins: the first occurrence of each slot in the reversed order
        uniq, first = np.unique(slots[::-1], return_index=True)
        self.buffer[uniq] = chunk[rows[::-1][first]]
        self.seen += len(chunk)

    def draw(self, batch: int) -> Arrays:
        held = min(self.seen, self.capacity)
        return split(self.buffer[np.sort(self.rng.integers(0, held, batch))])


# -- training ----------------------------------------------------------------------------------------------
class Learner:
    """One contender's model and optimizer, carried over from generation to generation (warm start)."""

    def __init__(self, seed: int, config: Config) -> None:
        torch.manual_seed(seed)  # every contender of a seed starts from the same weights
        h = config.hidden
        self.model = torch.nn.Sequential(
            torch.nn.Linear(FEATURES, h),
            torch.nn.ReLU(),
            torch.nn.Linear(h, h),
            torch.nn.ReLU(),
            torch.nn.Linear(h, CLASSES),
        )
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=config.lr)

    def train(self, draw: Callable[[], Arrays], steps: int) -> None:
        self.model.train()
        for _ in range(steps):
            x, y = draw()
            loss = torch.nn.functional.cross_entropy(self.model(torch.from_numpy(x)), torch.from_numpy(y))
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()

    @torch.no_grad()
    def accuracy(self, data: Arrays) -> float:
        self.model.eval()
        predicted = self.model(torch.from_numpy(data[0])).argmax(dim=1).numpy()
        return float((predicted == data[1]).mean())


ALPHAS = (0.0, 1.0, 2.0)


def _full(alpha: float) -> str:
    return f"full history, alpha {alpha:g}"


CONTENDERS = (*(_full(a) for a in ALPHAS), "reservoir", "latest generation only")
BASELINE = "reservoir"


def full_history_draw(mapped: MappedHistory, alpha: float, batch: int, seed: int) -> Callable[[], Arrays]:
    sampler = mapped.sampler(SamplerConfig(alpha=alpha, batch_size=batch, seed=seed))
    return lambda: mapped.gather(sampler.sample())


def latest_draw(mapped: MappedHistory, batch: int, seed: int) -> Callable[[], Arrays]:
    latest = mapped.maps[-1:]
    sampler = RecencySampler((len(latest[0]),), SamplerConfig(alpha=0.0, batch_size=batch, seed=seed))
    return lambda: gather(latest, sampler.sample())


@dataclass(frozen=True)
class Outcome:
    """Held-out accuracies of one contender after the last generation, and on generation 0 after each one."""

    earliest: float
    latest: float
    all_generations: float
    earliest_over_time: tuple[float, ...]


def run_seed(seed: int, config: Config, workdir: str) -> dict[str, Outcome]:
    task = Task.build(seed, config)
    tests = [split(task.rows(seed, g, 1, config.test_rows)) for g in range(config.generations)]
    history = RecordStore(LocalStore(os.path.join(workdir, f"seed-{seed}")), "history")
    learners = {name: Learner(seed, config) for name in CONTENDERS}
    reservoir = Reservoir(config.capacity, seed)
    over_time: dict[str, list[float]] = {name: [] for name in CONTENDERS}
    for g in range(config.generations):
        history.append_generation(SCHEMA, task.rows(seed, g, 0, config.rows))
        mapped = history.open_mapped(os.path.join(workdir, "cache"))
        reservoir.add(mapped.maps[g])  # the arriving generation streams through the buffer, from its map
        phase_seed = seed * 1_000 + g
        draws: dict[str, Callable[[], Arrays]] = {
            _full(alpha): full_history_draw(mapped, alpha, config.batch, phase_seed) for alpha in ALPHAS
        }
        draws["reservoir"] = lambda: reservoir.draw(config.batch)
        draws["latest generation only"] = latest_draw(mapped, config.batch, phase_seed)
        for name, learner in learners.items():
            learner.train(draws[name], config.steps)
            over_time[name].append(learner.accuracy(tests[0]))
        del draws, mapped
    return {
        name: Outcome(
            earliest=learner.accuracy(tests[0]),
            latest=learner.accuracy(tests[-1]),
            all_generations=statistics.fmean(learner.accuracy(t) for t in tests),
            earliest_over_time=tuple(over_time[name]),
        )
        for name, learner in learners.items()
    }


# -- report ------------------------------------------------------------------------------------------------
def _stat(values: list[float]) -> str:
    spread = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{100 * statistics.fmean(values):5.1f} ± {100 * spread:4.1f}"


def report(results: dict[int, dict[str, Outcome]], config: Config) -> None:
    seeds = list(results)
    pick: dict[str, Callable[[Outcome], float]] = {
        "earliest": lambda o: o.earliest,
        "latest": lambda o: o.latest,
        "all": lambda o: o.all_generations,
    }

    def ratio(name: str, key: str) -> str:
        # paired per seed: the seeds' tasks differ in difficulty, the contenders of one seed share it
        values = [pick[key](results[s][name]) / pick[key](results[s][BASELINE]) for s in seeds]
        spread = statistics.stdev(values) if len(values) > 1 else 0.0
        return f"{statistics.fmean(values):.3f} ± {spread:.3f}"

    last = config.generations - 1
    print(f"\n[after generation {last}] held-out accuracy %, mean ± sd over {len(seeds)} seed(s)")
    print(
        f"  {'contender':24} {'gen 0 (earliest)':>16} {f'gen {last} (latest)':>16} {'all gens':>12}"
        f"   {'gen 0 / reservoir':>17} {'latest / reservoir':>18}"
    )
    for name in CONTENDERS:
        cells = [_stat([f(results[s][name]) for s in seeds]) for f in pick.values()]
        print(
            f"  {name:24} {cells[0]:>16} {cells[1]:>16} {cells[2]:>12}"
            f"   {ratio(name, 'earliest'):>17} {ratio(name, 'latest'):>18}"
        )
    print("  (ratio: a contender's accuracy over the reservoir's on the same seed, mean ± sd over seeds)")
    print("\n[per seed] gen 0 / latest accuracy %")
    for name in CONTENDERS:
        cells = "  ".join(
            f"s{s}: {100 * results[s][name].earliest:4.1f}/{100 * results[s][name].latest:4.1f}" for s in seeds
        )
        print(f"  {name:24} {cells}")
    print("\n[gen 0 accuracy % after each generation arrives] mean over seeds")
    for name in CONTENDERS:
        series = [
            statistics.fmean(results[s][name].earliest_over_time[g] for s in seeds) for g in range(config.generations)
        ]
        print(f"  {name:24} " + " ".join(f"{100 * a:5.1f}" for a in series))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one seed, fewer steps")
    parser.add_argument("--steps", type=int, help="optimizer steps per generation (default 150, quick 60)")
    parser.add_argument("--capacity", type=int, help="reservoir rows (default: one generation's rows)")
    parser.add_argument("--seeds", type=int, help="number of seeds (default 5, quick 1)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    rows = 4_000
    config = Config(
        generations=8,
        rows=rows,
        test_rows=2_000,
        steps=args.steps or (60 if args.quick else 150),
        batch=128,
        capacity=args.capacity or rows,
        seeds=tuple(range(args.seeds or (1 if args.quick else 5))),
    )
    print(
        f"[config] {config.generations} generations x {config.rows:,} training rows (+{config.test_rows:,} held out "
        f"each), {FEATURES} features ({LEVELS}-level categorical last), {CLASSES} classes; drift per generation: "
        f"means {config.covariate_shift} sd, teacher weights {config.concept_drift}"
    )
    print(
        f"[config] MLP {FEATURES}-{config.hidden}-{config.hidden}-{CLASSES}, Adam lr {config.lr}, warm start; "
        f"{config.steps} steps x batch {config.batch} after each generation, every contender "
        f"({config.steps * config.batch:,} samples per generation, "
        f"{config.generations * config.steps * config.batch:,} in all)"
    )
    print(
        f"[config] reservoir: algorithm R over every training row, capacity {config.capacity:,} rows "
        f"(= one generation; {config.generations * config.rows:,} rows streamed in all); "
        f"full history: RecencySampler over the mapped history, weights (g+1)**alpha; seeds {list(config.seeds)}"
    )
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="ml8s-bench-drift-") as workdir:
        results = {seed: run_seed(seed, config, workdir) for seed in config.seeds}
    report(results, config)
    print(
        f"\n{time.perf_counter() - started:.1f} s; python {sys.version.split()[0]}, numpy {np.__version__}, "
        f"torch {torch.__version__}"
    )


if __name__ == "__main__":
    main()
