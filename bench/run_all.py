"""Run every bench/bench_*.py in name order with this interpreter, passing their output through.

`make bench` calls this. Each benchmark measures its own baseline in the same run and prints ratios;
this runner only sequences them (never in parallel: they would disturb each other's timings) and
exits non-zero if any of them failed to run. ``--quick`` is passed on to every benchmark.
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
    args = parser.parse_args(argv)
    passthrough = ["--quick"] if args.quick else []
    failed: list[str] = []
    for script in sorted(BENCH_DIR.glob("bench_*.py")):
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
