"""Run every bench/bench_*.py in name order with this interpreter, passing their output through.

`make bench` calls this. Each benchmark measures its own baseline in the same run and prints ratios;
this runner only sequences them (never in parallel: they would disturb each other's timings) and
exits non-zero if any of them failed to run. ``--quick`` is passed on to every benchmark; names given
(``run_all.py --quick store chain``) run only ``bench_store.py`` and ``bench_chain.py``.

- bench_chain.py: model-chain commits against plain atomic writes, and under contention;
- bench_commit_cli.py: `ml8s chain commit --payload` of a 1 GiB checkpoint (FULL and DELTA) against `cp` + `sync`,
  with peak RSS;
- bench_drift.py: continual training after drifting generations, full history (recency-weighted) against a
  reservoir buffer of equal sample budget: held-out accuracy on the earliest and the latest generation;
- bench_early_exit.py: re-running a completed run against a no-op `pyflyte run`;
- bench_fingerprint.py: DATA_FINGERPRINT against ``sha256sum``;
- bench_gpu.py: on a GPU node, the demo configuration trained on CUDA against the same machine's CPU, and the
  CUDA runs byte-compared (prints that there is nothing to compare where no GPU is visible);
- bench_raw_rows.py: raw rows at scale (`ml8s predict`, a warm start's drift report, encoded generation and
  promotion rows, read column by column) against ``pyarrow.csv.read_csv`` of the same file, with peak RSS;
- bench_scale.py: ``ml8s run`` (EPOCHS=1) at 0.5M, 2M and 20M demo rows: wall time, peak RSS, the steps before
  training against ``pyarrow.csv.read_csv`` and µs per training step against a minimal torch loop (with
  ``--device cuda``, also against the step captured as a CUDA graph);
- bench_store.py: operator listings (``runs list``, ``tmp-cleanup``) against ``find``, and the atomic
  write against a plain write+fsync(+sha256).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run every ml8s benchmark in order.")
    parser.add_argument("--quick", action="store_true", help="smaller sizes in every benchmark")
    parser.add_argument("only", nargs="*", help="run only these benchmarks (NAME for bench_NAME.py)")
    args = parser.parse_args(argv)
    passthrough = ["--quick"] if args.quick else []
    scripts = sorted(BENCH_DIR.glob("bench_*.py"))
    unknown = sorted(set(args.only) - {s.stem.removeprefix("bench_") for s in scripts})
    if unknown:
        parser.error(f"no such benchmark: {', '.join(unknown)}; expected one of the bench_NAME.py in {BENCH_DIR}")
    failed: list[str] = []
    for script in (s for s in scripts if not args.only or s.stem.removeprefix("bench_") in args.only):
        print(f"=== {script.name} {' '.join(passthrough)}".rstrip(), flush=True)
        started = time.perf_counter()
        code = subprocess.run([sys.executable, str(script), *passthrough], cwd=BENCH_DIR.parent, check=False).returncode
        status = "ok" if code == 0 else f"FAILED (exit {code})"
        print(f"=== {script.name}: {status} in {time.perf_counter() - started:.1f} s", flush=True)
        if code != 0:
            failed.append(script.name)
    if failed:
        print(f"benchmarks that failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
