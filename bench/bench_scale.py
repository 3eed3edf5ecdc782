"""Benchmark: `ml8s run` (EPOCHS=1) on 0.5M, 2M and 20M demo rows, against baselines measured in the same run.

Per size it prints: wall time and peak RSS of `ml8s run`, peak RSS / CSV bytes; the rate (rows/s) of the steps
before training (bootstrap to features, parse and fingerprint included) against `pyarrow.csv.read_csv` of the
same files (in its own process, default options: every core, type inference); and µs per training step
against a minimal torch loop (the same network, Adam, batch size, tensor shapes and thread count, gathering
its batches from a tensor as the run does) run in a child process right after; with ``--device cuda`` also
against that step captured once as a CUDA graph and replayed. Goals (docs/sizing.md): steps before training
>= 1/3 of read_csv's rate; µs per step <= 1.3x the minimal loop's on a CPU, <= 2x the graphed step's on CUDA.

The data is generated once under ``.scale/`` (git-ignored; 20M rows are ~1.7 GB) and reused; each run gets
a fresh PIPELINE_ROOT. ``--quick`` runs one small size (a CI smoke test of this script). Nothing is
asserted: ratios are for a person to read; a threshold in a test would only measure the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SIZES = (500_000, 2_000_000, 20_000_000)
QUICK = (20_000,)
FILES = 5
MINIMAL_STEPS = 3000
MiB = 1024 * 1024

# Runs `ml8s run` and stamps the log lines the bench needs with the time since start: training begins at the
# "[train] training ..." line; the epoch line carries its steps and rate.
_DRIVER = r"""
import json, logging, re, resource, sys, time
t0 = time.perf_counter()
marks = {}
class Marks(logging.Handler):
    def emit(self, record):
        text = record.getMessage()
        step = getattr(record, "step", "")  # ml8s.log passes the step beside the message
        if step:
            rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
            marks.setdefault("timeline", {})[step] = (round(time.perf_counter() - t0, 2), rss)
        if step == "run" and text == "loading torch" and "data_end" not in marks:  # the features step has ended
            marks["data_end"], marks["data_cpu"] = time.perf_counter() - t0, time.process_time()
        if step == "train" and text.startswith("training ") and "train_start" not in marks:
            marks["train_start"] = time.perf_counter() - t0
            marks["train_cpu"] = time.process_time()
            marks["train_thread_cpu"] = time.thread_time()  # training logs from the thread it trains in
            found = re.search(r"training (\d+) rows x (\d+) features", text)
            if found:
                marks["train_rows"], marks["features"] = int(found.group(1)), int(found.group(2))
        found = re.search(r"\((\d+) steps, ([0-9.]+) steps/s\)", text)
        if found:
            marks["steps"], marks["steps_per_s"] = int(found.group(1)), float(found.group(2))
            # the training thread's CPU time: a large matrix's file is written by another thread meanwhile
            marks["epoch_cpu_s"] = time.thread_time() - marks["train_thread_cpu"]
logging.getLogger("ml8s").addHandler(Marks())
from ml8s.cli.main import main
from ml8s.process_exit import end_process
code = main(["run"])
marks["wall_s"] = time.perf_counter() - t0
with open(sys.argv[1], "w") as handle:
    json.dump(marks, handle)
end_process(code)  # as the ml8s command ends: a native pool's teardown must not fail a finished run
"""

_READ_CSV = r"""
import sys, time
import pyarrow.csv as pacsv
t0, c0 = time.perf_counter(), time.process_time()
rows = sum(pacsv.read_csv(path).num_rows for path in sys.argv[1:])
print(rows, time.perf_counter() - t0, time.process_time() - c0)
"""


def _child(argv: list[str], env: dict[str, str] | None = None, log: Path | None = None) -> tuple[int, str, int]:
    """(exit code, stdout, peak RSS in bytes) of a child process (its own peak, from wait4)."""
    with tempfile.TemporaryFile() as out, open(log or os.devnull, "wb") as err:
        proc = subprocess.Popen(argv, env=env, stdout=out, stderr=err, cwd=REPO)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        return proc.returncode, out.read().decode(), usage.ru_maxrss * 1024


def _data(scale: Path, rows: int) -> tuple[Path, int]:
    out = scale / f"demo-{rows}"
    # The generator checks existing files by making their bytes again (minutes at 20M rows): a marker written
    # after it succeeded, naming each file's size, lets a later bench skip it.
    done = scale / f"demo-{rows}.done"
    sizes = {p.name: p.stat().st_size for p in sorted(out.glob("part-*.csv"))}
    if done.exists() and done.read_text() == json.dumps(sizes):
        print(f"  data: {rows:,} rows, {sum(sizes.values()) / MiB:,.0f} MiB (generated before)", flush=True)
        return out, sum(sizes.values())
    argv = [sys.executable, "-m", "ml8s.data.demo", "--out", str(out), "--rows", str(rows), "--files", str(FILES)]
    started = time.perf_counter()
    code, _, rss = _child(argv)
    if code:
        raise SystemExit(f"the demo generator failed for {rows} rows (exit {code})")
    sizes = {p.name: p.stat().st_size for p in sorted(out.glob("part-*.csv"))}
    done.write_text(json.dumps(sizes))
    size = sum(sizes.values())
    print(
        f"  data: {rows:,} rows, {size / MiB:,.0f} MiB in {FILES} files ({time.perf_counter() - started:.1f} s, "
        f"generator peak RSS {rss / MiB:,.0f} MiB)",
        flush=True,
    )
    return out, size


def _read_csv(data: Path) -> tuple[float, float, int]:
    """(wall s, CPU s of all its threads, peak RSS) of read_csv of every file."""
    code, out, rss = _child([sys.executable, "-c", _READ_CSV, *sorted(str(p) for p in data.glob("part-*.csv"))])
    if code:
        raise SystemExit(f"pyarrow.csv.read_csv failed on {data}")
    return float(out.split()[1]), float(out.split()[2]), rss


def _run(data: Path, root: Path, device: str) -> tuple[dict[str, float], int, Path]:
    marks = root / "marks.json"
    log = root / "ml8s-run.log"
    env = {
        **os.environ,
        "DATA_ROOT": str(data),
        "TARGET_COLUMN": "churned",
        "PIPELINE_ROOT_URI": str(root / "pipeline"),
        "EPOCHS": "1",
        "TRAIN_DEVICE": device,
    }
    code, _, rss = _child([sys.executable, "-c", _DRIVER, str(marks)], env=env, log=log)
    if code:
        sys.stderr.write(log.read_text()[-4000:])
        raise SystemExit(f"ml8s run failed on {data} (exit {code}); its log: {log}")
    return json.loads(marks.read_text()), rss, log


class _Minimal:
    """The plainest training step: the run's network, Adam, batch size and tensor shapes, batches gathered by
    index from tensors on the device; ``index`` is where :meth:`step` reads its batch's rows."""

    def __init__(self, rows: int, features: int, device: str, steps: int, *, capturable: bool = False) -> None:
        import torch

        from ml8s.contract import ModelSpec
        from ml8s.modeling.networks import build_model

        torch.manual_seed(0)
        if device == "cpu":
            torch.set_num_threads(1)  # the run's CPU training thread count (determinism_flags)
        dev = torch.device(device)
        spec = ModelSpec(model_type="mlp", n_features=features, n_classes=2, hidden_units=64, hidden_layers=2)
        self.model = build_model(spec).to(dev)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=1e-3, capturable=capturable)
        self.x = torch.randn(rows, features, device=dev)
        self.y = torch.randint(0, 2, (rows,), device=dev)
        order = torch.randperm(rows, device=dev)
        self.batches = [order[(i * 256) % (rows - 256) :][:256] for i in range(steps)]
        self.index = self.batches[0].clone()

    def step(self) -> None:
        import torch

        self.optimizer.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(self.model(self.x[self.index]), self.y[self.index]).backward()
        self.optimizer.step()


def minimal_step_us(rows: int, features: int, device: str, steps: int) -> tuple[float, float]:
    """(wall, CPU) µs per step of the plainest loop (:class:`_Minimal`), each batch's rows gathered eagerly."""
    import torch

    loop = _Minimal(rows, features, device, steps)
    for batch in loop.batches[:20]:
        loop.index = batch
        loop.step()
    if device == "cuda":
        torch.cuda.synchronize()
    started, cpu = time.perf_counter(), time.process_time()
    for batch in loop.batches:
        loop.index = batch
        loop.step()
    if device == "cuda":
        torch.cuda.synchronize()
    return (time.perf_counter() - started) / steps * 1e6, (time.process_time() - cpu) / steps * 1e6


def graphed_step_us(rows: int, features: int, steps: int) -> float:
    """Wall µs per step of the same step captured once as a CUDA graph and replayed (the CUDA goal's floor):
    a static index buffer, ``Adam(capturable=True)``, warm-up and capture on one side stream."""
    import torch

    loop = _Minimal(rows, features, "cuda", steps, capturable=True)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            loop.step()
    torch.cuda.current_stream().wait_stream(side)
    loop.optimizer.zero_grad(set_to_none=True)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=side):
        loop.step()
    for batch in loop.batches[:20]:
        loop.index.copy_(batch)
        graph.replay()
    torch.cuda.synchronize()
    started = time.perf_counter()
    for batch in loop.batches:
        loop.index.copy_(batch)
        graph.replay()
    torch.cuda.synchronize()
    return (time.perf_counter() - started) / steps * 1e6


def bench(rows: int, scale: Path, device: str) -> None:
    print(f"== {rows:,} rows ({device})", flush=True)
    data, csv_bytes = _data(scale, rows)
    read_s, read_cpu, read_rss = _read_csv(data)
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as tmp:
        marks, rss, _ = _run(data, Path(tmp), device)
    before = marks["train_start"]
    run_rate, read_rate = rows / before, rows / read_s
    print(
        f"  ml8s run: {marks['wall_s']:.1f} s, peak RSS {rss / MiB:,.0f} MiB, "
        f"peak RSS / CSV bytes {rss / csv_bytes:.2f}x",
        flush=True,
    )
    print(
        f"  steps before training: {before:.1f} s, {run_rate:,.0f} rows/s; pyarrow.csv.read_csv {read_s:.1f} s "
        f"({read_rss / MiB:,.0f} MiB), {read_rate:,.0f} rows/s; run/read_csv {run_rate / read_rate:.2f} (goal >= 0.33)",
        flush=True,
    )
    if "data_end" in marks:  # the same window without loading torch and mapping the rows (the train step's start)
        data_s = marks["data_end"]
        print(
            f"  bootstrap to the end of the features step: {data_s:.1f} s ({marks['data_cpu']:.1f} CPU s), "
            f"{rows / data_s:,.0f} rows/s; run/read_csv {rows / data_s / read_rate:.2f}",
            flush=True,
        )
    # CPU seconds (every thread, interpreter start included) are what a loaded machine distorts least.
    print(
        f"  the same in CPU time: steps before training {marks['train_cpu']:.1f} s, read_csv {read_cpu:.1f} s; "
        f"run/read_csv {read_cpu / marks['train_cpu']:.2f} (rows/s against rows/s)",
        flush=True,
    )
    timeline = ", ".join(f"{tag} {at:.1f} s {rss} MiB" for tag, (at, rss) in marks.get("timeline", {}).items())
    print(f"  last log line of each step (time since start, peak RSS so far): {timeline}", flush=True)
    step_us = 1e6 / marks["steps_per_s"]
    cpu_us = marks["epoch_cpu_s"] / marks["steps"] * 1e6  # CPU time: what a loaded machine distorts least
    train_rows, features = int(marks["train_rows"]), int(marks["features"])
    # as many rows as the run trains on: batches gathered from 16M rows (2 GB at 20M) miss caches and TLBs more
    # than from the 2M the loop used to be capped at, and the goal compares the same tensors
    baseline = _baselines(train_rows, features, device, min(MINIMAL_STEPS, int(marks["steps"])))
    minimal, minimal_cpu = baseline["minimal_us"], baseline["minimal_cpu_us"]
    print(
        f"  training: {int(marks['steps']):,} steps; wall {step_us:.0f} µs/step vs minimal torch loop {minimal:.0f}: "
        f"run/minimal {step_us / minimal:.2f}; CPU {cpu_us:.0f} µs/step vs minimal {minimal_cpu:.0f}: run/minimal "
        f"{cpu_us / minimal_cpu:.2f} (goal <= 1.3; the run's figure includes its per-epoch held-out evaluation)",
        flush=True,
    )
    if device == "cuda":
        graphed = baseline["graphed_us"]
        print(
            f"  CUDA: wall {step_us:.0f} µs/step vs the same step captured as a CUDA graph {graphed:.0f}: "
            f"run/graphed {step_us / graphed:.2f} (goal <= 2; the run's figure includes its held-out evaluation)",
            flush=True,
        )
    print(
        f"  sizing: {rows / (rss / 2**30):,.0f} rows per GiB of peak RSS, "
        f"{marks['wall_s'] / rows * 1e6:.1f} s per million rows (EPOCHS=1)",
        flush=True,
    )


def _baselines(rows: int, features: int, device: str, steps: int) -> dict[str, float]:
    """The minimal loop's (and on CUDA the graphed step's) µs per step, measured in a child process: Linux keeps
    a process's peak RSS across fork and exec, so every later `ml8s run` child of a bench that had run the
    loop itself started from that peak, and its own smaller peak was not seen."""
    argv = [sys.executable, __file__, "--baseline", str(rows), str(features), device, str(steps)]
    code, out, _ = _child(argv)
    if code:
        raise SystemExit(f"the baseline loop failed ({' '.join(argv[2:])}, exit {code})")
    return {key: float(value) for key, value in json.loads(out).items()}


def _baseline_main(rows: int, features: int, device: str, steps: int) -> int:
    minimal, minimal_cpu = minimal_step_us(rows, features, device, steps)
    figures = {"minimal_us": minimal, "minimal_cpu_us": minimal_cpu}
    if device == "cuda":
        figures["graphed_us"] = graphed_step_us(rows, features, steps)
    print(json.dumps(figures))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help=f"one small size ({QUICK[0]:,} rows): a smoke test")
    parser.add_argument("--rows", type=int, nargs="*", help="sizes to run instead of 0.5M, 2M and 20M")
    parser.add_argument("--scale-dir", type=Path, default=REPO / ".scale", help="where the data is generated")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--clean", action="store_true", help="remove each size's data after its run")
    parser.add_argument("--baseline", nargs=4, metavar=("ROWS", "FEATURES", "DEVICE", "STEPS"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.baseline:  # the child of _baselines
        rows, features, device, steps = args.baseline
        return _baseline_main(int(rows), int(features), device, int(steps))
    sizes = tuple(args.rows) if args.rows else QUICK if args.quick else SIZES
    print(f"bench_scale: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}, sizes {list(sizes)}", flush=True)
    for rows in sizes:
        bench(rows, args.scale_dir, args.device)
        if args.clean:
            shutil.rmtree(args.scale_dir / f"demo-{rows}", ignore_errors=True)
            (args.scale_dir / f"demo-{rows}.done").unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
