"""Benchmark: re-running a completed training run against a no-op `pyflyte run`, in the same run.

The idempotence gate (SPEC §4) promises that re-running a completed configuration costs about as
much as doing nothing: bootstrap fingerprints the data, the gate finds ``success.marker`` and the
workflow returns the first run's manifest. The honest baseline for "nothing" is a `pyflyte run` of a
workflow with one trivial task (bench/empty_workflow.py): interpreter start, flytekit import, workflow
compilation and one local task execution are paid by both. Target: median(re-run) / median(no-op)
<= 1.5.

The script also reports which heavy modules (torch, mlflow, onnx, onnxruntime) a re-run imports, from
``PYTHONPROFILEIMPORTTIME``: an early exit that imports torch pays seconds before it can exit.

Flyte's local task cache is switched off (``FLYTE_LOCAL_CACHE_ENABLED=false``) for every command, so
the numbers measure ml8s's own gate rather than flytekit's cache, and the user's ``~/.flyte`` cache is
left alone. Everything lives in a temporary directory (data, pipeline root, local MLflow store).
Nothing is asserted: the script prints times and the ratio.
"""

from __future__ import annotations

import argparse
import glob
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from ml8s.data import demo as demo_data

REPO = Path(__file__).resolve().parent.parent
TARGET_RATIO = 1.5
HEAVY_MODULES = ("torch", "mlflow", "onnx", "onnxruntime")


@dataclass(frozen=True)
class Result:
    """One command: wall time, exit status and its output."""

    seconds: float
    returncode: int
    stdout: str
    stderr: str


def pyflyte() -> str:
    """The pyflyte of this interpreter's environment (the venv), else the one on PATH."""
    beside = Path(sys.executable).with_name("pyflyte")
    if beside.exists():
        return str(beside)
    found = shutil.which("pyflyte")
    if found is None:
        raise SystemExit("bench_early_exit: pyflyte not found (install the flyte extra: make setup)")
    return found


def run(cmd: list[str], env: dict[str, str], timeout: float) -> Result:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    return Result(time.perf_counter() - t0, proc.returncode, proc.stdout, proc.stderr)


def require_ok(what: str, result: Result) -> Result:
    if result.returncode != 0:
        tail = "\n".join((result.stdout + result.stderr).splitlines()[-40:])
        raise SystemExit(f"bench_early_exit: {what} failed (exit {result.returncode}):\n{tail}")
    return result


def heavy_imports(stderr: str) -> dict[str, float]:
    """Top-level heavy packages in a ``-X importtime`` report -> their cumulative import time in seconds."""
    found: dict[str, float] = {}
    for line in stderr.splitlines():
        if not line.startswith("import time:"):
            continue
        parts = line[len("import time:") :].split("|")
        if len(parts) != 3 or not parts[1].strip().isdigit():
            continue
        name = parts[2].strip()
        if name in HEAVY_MODULES:
            found[name] = max(found.get(name, 0.0), int(parts[1]) / 1e6)
    return found


def describe_imports(label: str, found: dict[str, float]) -> str:
    items = [f"{m} {f'{found[m]:.2f} s' if m in found else 'no'}" for m in HEAVY_MODULES]
    return f"  heavy imports ({label}): " + ", ".join(items)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rows", type=int, default=5000, help="rows of the demo dataset (default 5000)")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs of each command (default 3)")
    parser.add_argument("--epochs", default="2", help="EPOCHS for the completing run (default 2)")
    parser.add_argument("--quick", action="store_true", help="smaller dataset (2000 rows)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory and print its path")
    args = parser.parse_args(argv)
    rows: int = 2000 if args.quick else args.rows
    repeat: int = args.repeat

    exe = pyflyte()
    empty_cmd = [exe, "run", "bench/empty_workflow.py", "empty_wf"]
    workdir = tempfile.mkdtemp(prefix="ml8s-bench-early-exit-")
    try:
        # TMPDIR: flytekit makes a sandbox directory per local run under it; keep them with the rest.
        os.makedirs(os.path.join(workdir, "tmp"))
        env = {**os.environ, "EPOCHS": args.epochs, "FLYTE_LOCAL_CACHE_ENABLED": "false", "PYTHONUNBUFFERED": "1"}
        env["TMPDIR"] = os.path.join(workdir, "tmp")
        data, root = os.path.join(workdir, "data"), os.path.join(workdir, "root")
        print(
            f"bench_early_exit: {rows} rows, EPOCHS={args.epochs}, {repeat} timed runs each, "
            f"load average {os.getloadavg()[0]:.2f}",
            flush=True,
        )
        if demo_data.main(["--out", data, "--rows", str(rows), "--files", "2"]) != 0:
            raise SystemExit("bench_early_exit: could not write the demo dataset")
        train_cmd = [exe, "run", "workflows/training.py", "training_pipeline"]
        train_cmd += ["--data_root", data, "--target_column", "churned", "--pipeline_root_uri", root]

        require_ok("no-op pyflyte run (warm-up)", run(empty_cmd, env, 300))
        if not (REPO / "workflows" / "training.py").exists():
            baseline = [require_ok("no-op pyflyte run", run(empty_cmd, env, 300)).seconds for _ in range(repeat)]
            print(f"  no-op pyflyte run        median {statistics.median(baseline):6.2f} s")
            print("bench_early_exit: workflows/training.py does not exist yet; only the baseline was measured")
            return 1

        first = require_ok("first training run", run(train_cmd, env, 1800))
        markers = glob.glob(os.path.join(root, "ml8s_training_runs", "*", "success.marker"))
        if len(markers) != 1:
            raise SystemExit(f"bench_early_exit: expected one success.marker under {root}, found {len(markers)}")
        run_id = Path(markers[0]).parent.name
        print(f"  first run (full pipeline) {first.seconds:6.2f} s  RUN_ID {run_id}", flush=True)

        empties: list[float] = []
        reruns: list[float] = []
        same_output = True
        for _ in range(repeat):  # interleaved, so drift in machine load hits both alike
            empties.append(require_ok("no-op pyflyte run", run(empty_cmd, env, 300)).seconds)
            again = require_ok("re-run of the completed run", run(train_cmd, env, 600))
            reruns.append(again.seconds)
            same_output = same_output and again.stdout == first.stdout
        if len(glob.glob(os.path.join(root, "ml8s_training_runs", "*", "success.marker"))) != 1:
            print("  WARNING: the re-runs created another run directory")

        empty_med, rerun_med = statistics.median(empties), statistics.median(reruns)
        ratio = rerun_med / empty_med
        verdict = "ok" if ratio <= TARGET_RATIO else f"ABOVE TARGET {TARGET_RATIO}"
        print(f"  no-op pyflyte run        median {empty_med:6.2f} s  ({', '.join(f'{s:.2f}' for s in empties)})")
        print(f"  re-run (gate hit)        median {rerun_med:6.2f} s  ({', '.join(f'{s:.2f}' for s in reruns)})")
        print(f"  ratio re-run / no-op     {ratio:6.2f}  (target <= {TARGET_RATIO}: {verdict})")
        print(f"  re-run output identical to the first run's: {'yes' if same_output else 'NO'}")

        profiled = {**env, "PYTHONPROFILEIMPORTTIME": "1"}
        rerun_imports = heavy_imports(require_ok("profiled re-run", run(train_cmd, profiled, 600)).stderr)
        empty_imports = heavy_imports(require_ok("profiled no-op run", run(empty_cmd, profiled, 300)).stderr)
        print(describe_imports("re-run", rerun_imports))
        print(describe_imports("no-op", empty_imports))
        print(f"bench_early_exit: load average {os.getloadavg()[0]:.2f} at the end", flush=True)
        return 0
    finally:
        if args.keep:
            print(f"bench_early_exit: kept {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
