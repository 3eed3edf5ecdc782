"""Benchmark: raw rows at scale, against `pyarrow.csv.read_csv` of the same file measured in the same run.

Raw rows reach a trained model's feature rules outside training: `ml8s predict` on a CSV file, and a warm
start reading a new generation (its drift report, its encoding into the lineage's history, the held-out rows
a promotion predicts). Each reads the file column by column (no Python object per row). Per size this prints,
for each path run in a child process of its own: wall time, peak RSS, and the wall time over `read_csv`'s
(default options: every core, type inference) in its own child process.

A model is trained once on a small demo dataset (EPOCHS=1); the rows are the demo generator's, in one file,
under a temporary directory. ``--quick`` runs 200k rows (a CI smoke test of this script), the default 2M.
Nothing is asserted: ratios are for a person to read; a threshold in a test would only measure the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MiB = 1024 * 1024

# Each path in a child process: wall time from its first line of work, and that process's peak RSS.
_CHILD = r"""
import json, resource, sys, time
path, data, root, run = sys.argv[1:5]
if path == "ml8s predict":  # the whole command, its imports included, as a user runs it
    start = time.perf_counter()
    from ml8s.cli.main import main
    args = ["predict", "--root", root, "--run", run, "--input", f"{data}/part-00000.csv", "--output", sys.argv[5]]
    assert main(args) == 0
    rows = None
elif path == "read_csv":
    import pyarrow.csv
    start = time.perf_counter()
    rows = pyarrow.csv.read_csv(f"{data}/part-00000.csv").num_rows
else:
    from ml8s.contract.training_state import Generation
    from ml8s.data.fingerprint import fingerprint_local
    from ml8s.inference import Predictor, read_run_files
    from ml8s.inference.cells import read_cells
    from ml8s.lineage.columns import has_label, typed_columns
    from ml8s.lineage.history import encode_generation, held_out_tables
    predictor = Predictor(read_run_files(root, run))
    transform = predictor.transform
    start = time.perf_counter()
    fingerprint = fingerprint_local(data)
    generation = Generation(index=1, partition="", files=[e.token for e in fingerprint.entries])
    if path == "drift report":
        tokens = set(generation.files)
        rows = typed_columns(fingerprint, tokens, transform, has_label(transform.target_column))[1]
    elif path == "encode a generation":
        rows = len(encode_generation(generation, fingerprint, transform, 7, 0.2).y)
    else:  # the held-out rows a promotion predicts, by one model
        tables, labels = held_out_tables(generation, fingerprint, transform, 7, 0.2)
        read = read_cells(tables, sorted(c.name for c in transform.inputs))
        rows = len(predictor.predict_cells(read.cells, read.rows, read.failed).labels)
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
print(json.dumps({"wall": time.perf_counter() - start, "peak_mib": peak, "rows": rows}))
"""


def _child(path: str, data: Path, root: str, run: str, *more: str) -> dict[str, float]:
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD, path, str(data), root, run, *more], capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        raise SystemExit(f"{path} failed:\n{proc.stderr[-3000:]}")
    result: dict[str, float] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def _train(work: Path) -> tuple[str, str]:
    """A model trained on 20k demo rows: (its root URI, its run id)."""
    data, root = work / "train-data", work / "root"
    subprocess.run([sys.executable, "-m", "ml8s.data.demo", "--out", str(data), "--rows", "20000"], check=True)
    env = {**os.environ, "DATA_ROOT": str(data), "TARGET_COLUMN": "churned", "PIPELINE_ROOT_URI": str(root)}
    env.update(EPOCHS="1", ML8S_LOG_LEVEL="WARNING")
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "ml8s"), "run"], env=env, capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        raise SystemExit(f"training the model failed:\n{proc.stderr[-3000:]}")
    return f"file://{root}", json.loads(proc.stdout)["run_id"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="200k rows (a smoke test of this script)")
    parser.add_argument("--rows", type=int, default=None, help="rows of the input file (default 2M)")
    args = parser.parse_args(argv)
    rows = args.rows or (200_000 if args.quick else 2_000_000)
    work = Path(tempfile.mkdtemp(prefix="ml8s-bench-rows-"))
    try:
        root, run = _train(work)
        data = work / "rows"
        subprocess.run(
            [sys.executable, "-m", "ml8s.data.demo", "--out", str(data), "--rows", str(rows), "--files", "1"],
            check=True,
        )
        size = (data / "part-00000.csv").stat().st_size
        print(f"{rows:,} rows, {size / MiB:,.0f} MiB of CSV in one file; model {run}")
        base = _child("read_csv", data, root, run)
        print(f"  {'pyarrow.csv.read_csv':<34} {base['wall']:7.2f} s  peak {base['peak_mib']:6,.0f} MiB  (baseline)")
        results = {"ml8s predict": _child("ml8s predict", data, root, run, str(work / "out.csv"))}
        for path in ("drift report", "encode a generation", "promotion held-out rows"):
            results[path] = _child(path, data, root, run)
        for path, result in results.items():
            ratio = result["wall"] / base["wall"]
            print(f"  {path:<34} {result['wall']:7.2f} s  peak {result['peak_mib']:6,.0f} MiB  {ratio:5.1f}x read_csv")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
