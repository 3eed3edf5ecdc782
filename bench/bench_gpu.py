"""Benchmark: the demo configuration trained on the GPU against the CPU of the same machine.

On the demo data (`make run`'s: 50,000 rows, 10 epochs of 256-row batches, the default 64x2 MLP) it runs
`ml8s run` twice with TRAIN_DEVICE=cpu and twice with TRAIN_DEVICE=cuda, alternating (neither device gets all
of a fresh machine's cold caches), each in its own process and under its own pipeline root. Per run it prints
the whole run's wall time, the training step's wall time (as the run logs it: from loading torch to the
trained model, CUDA's start-up included) and the optimizer steps per second of the epochs (each epoch's
held-out evaluation included); then the best run of each device against the other's, and whether the runs
on one device wrote byte-identical artifacts (what TRAIN_DEVICE=cuda promises: the same bytes on the same
hardware and image). ``bench_scale.py --device cuda`` measures the step itself against a CUDA graph.

Where no CUDA device is visible it says so and measures nothing. Nothing is asserted: ratios are for a
person to read.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# Ends as the ml8s command does (ml8s.process_exit): a native pool's teardown must not fail a finished run.
_RUN = "from ml8s.cli.main import main; from ml8s.process_exit import end_process; end_process(main(['run']))"
_TRAIN_DONE = re.compile(r"\[train\] done in ([0-9.]+)s")
_EPOCH = re.compile(r"\[train\] epoch \d+/\d+ .*\((\d+) steps, ([0-9.]+) steps/s\)")


def _cuda() -> str | None:
    """The GPU's name, or None where torch sees none."""
    import torch

    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else None


@dataclasses.dataclass(frozen=True)
class Run:
    wall_s: float  # the whole `ml8s run` process
    train_s: float  # the training step as the run logs it
    steps: int
    epoch_s: float  # the epochs' optimizer steps (and each epoch's held-out evaluation)
    first_rate: float  # steps/s of the first epoch (CUDA: warm-up and capture)
    later_rate: float  # steps/s of the others
    digests: dict[str, str]


def _run(data: Path, root: Path, device: str) -> Run:
    env = {
        **os.environ,
        "DATA_ROOT": str(data),
        "TARGET_COLUMN": "churned",
        "PIPELINE_ROOT_URI": str(root),
        "TRAIN_DEVICE": device,
    }
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", _RUN], env=env, capture_output=True, text=True, cwd=REPO)
    wall = time.perf_counter() - started
    if proc.returncode:
        sys.stderr.write(proc.stderr[-6000:])
        raise SystemExit(f"ml8s run with TRAIN_DEVICE={device} failed (exit {proc.returncode})")
    manifest = json.loads(proc.stdout)
    train = _TRAIN_DONE.search(proc.stderr)
    epochs = [(int(steps), float(rate)) for steps, rate in _EPOCH.findall(proc.stderr)]
    later = epochs[1:] or epochs
    run_dir = root / "ml8s_training_runs" / str(manifest["run_id"])
    return Run(
        wall_s=wall,
        train_s=float(train.group(1)) if train else float("nan"),
        steps=sum(steps for steps, _ in epochs),
        epoch_s=sum(steps / rate for steps, rate in epochs),
        first_rate=epochs[0][1] if epochs else float("nan"),
        later_rate=sum(s for s, _ in later) / sum(s / r for s, r in later) if later else float("nan"),
        # Every artifact the manifest lists (all but the manifest and the marker), hashed again from the files.
        digests={
            rel: hashlib.sha256((run_dir / rel).read_bytes()).hexdigest() for rel in sorted(manifest["artifacts"])
        },
    )


def _show(name: str, run: Run) -> None:
    print(
        f"  {name}: run {run.wall_s:.1f} s, training step {run.train_s:.2f} s, {run.steps} optimizer steps in "
        f"{run.epoch_s:.2f} s (first epoch {run.first_rate:,.0f} steps/s, later epochs {run.later_rate:,.0f} "
        "steps/s)",
        flush=True,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="accepted for `run_all.py --quick`; same size")
    parser.add_argument("--rows", type=int, default=None, help="demo rows (default: the demo generator's)")
    parser.add_argument("--runs", type=int, default=2, help="runs per device (default 2)")
    args = parser.parse_args(argv)
    gpu = _cuda()
    if gpu is None:
        print("bench_gpu: no CUDA device visible here; nothing to compare (run it on a GPU node)", flush=True)
        return 0
    print(f"bench_gpu: {gpu}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}", flush=True)
    with tempfile.TemporaryDirectory(prefix="bench-gpu-") as tmp:
        data = Path(tmp) / "churn"
        demo = [sys.executable, "-m", "ml8s.data.demo", "--out", str(data)]
        subprocess.run(demo + (["--rows", str(args.rows)] if args.rows else []), check=True, cwd=REPO)
        runs: dict[str, list[Run]] = {"cpu": [], "cuda": []}
        # Alternated, so that neither device gets all the cold caches of a fresh machine.
        for i in range(args.runs):
            for device in ("cpu", "cuda"):
                runs[device].append(_run(data, Path(tmp) / f"{device}-{i}", device))
                _show(f"{device} #{i + 1}", runs[device][-1])
    cpu, cudas = min(runs["cpu"], key=lambda run: run.train_s), runs["cuda"]
    best = min(cudas, key=lambda run: run.train_s)
    print("  best of each device:")
    for what, a, b in (
        ("whole run", cpu.wall_s, best.wall_s),
        ("training step", cpu.train_s, best.train_s),
        ("epochs", cpu.epoch_s, best.epoch_s),
    ):
        print(f"  {what}: cpu {a:.2f} s, cuda {b:.2f} s: cpu/cuda {a / b:.2f} (above 1: the GPU is faster)")
    for device, same_device in sorted(runs.items()):
        same = all(run.digests == same_device[0].digests for run in same_device)
        artifacts = len(same_device[0].digests)
        print(f"  {device} runs byte-identical ({artifacts} artifacts, {len(same_device)} processes): {same}")
        for rel in sorted(set().union(*(run.digests for run in same_device))):
            if len({run.digests.get(rel) for run in same_device}) > 1:
                print(f"    differs: {rel}")
    print(f"  model_native.safetensors sha256: cuda {cudas[0].digests['model/model_native.safetensors']}")
    print(f"  model_native.safetensors sha256: cpu  {cpu.digests['model/model_native.safetensors']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
