"""Benchmark: DELTA sizes on real consecutive versions of a warm-started lineage (issue 14).

Trains a lineage in a temp root with the pipeline itself (a cold start on generation 0 of the drifting
demo stream, then warm starts from the head, one more generation each), then encodes each version's native
weights as a DELTA on its parent's and prints its size against the FULL (``encode_full``) of the same
weights, and the fraction of elements whose bits changed. Nothing is asserted; whatever it measures is the
answer: a warm start updates every weight a little (Adam moves them all), so expect DELTAs near FULL size,
unlike the sparse updates the synthetic figures of bench_serving.py model.

Run: ``PYTHONPATH=$PWD python bench/bench_lineage_deltas.py [--generations 4] [--rows 4000]``.
"""

from __future__ import annotations

import argparse
import os
import tempfile

import safetensors.torch
import torch

from ml8s import log
from ml8s.chain import ChainStore
from ml8s.contract import layout
from ml8s.data.demo import generate_generations, write_dataset
from ml8s.deltas import encode_delta, encode_full
from ml8s.pipeline.run import run_pipeline
from ml8s.store import open_store


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--generations", type=int, default=4, help="warm starts after the cold start")
    parser.add_argument("--rows", type=int, default=4000, help="rows per generation")
    parser.add_argument("--hidden-units", type=int, default=64)
    args = parser.parse_args()
    log.configure("WARNING")
    with tempfile.TemporaryDirectory(prefix="ml8s-bench-lineage-") as tmp:
        root = os.path.join(tmp, "root")
        for k in range(args.generations + 1):
            data = os.path.join(tmp, f"step-{k}")
            write_dataset(data, generate_generations(k, args.rows, 7))
            env = {
                **os.environ,
                "DATA_ROOT": data,
                "TARGET_COLUMN": "churned",
                "PIPELINE_ROOT_URI": root,
                "HIDDEN_UNITS": str(args.hidden_units),
                "EPOCHS": "2",
                "WARM_START": "" if k == 0 else "head",
            }
            run_pipeline(env)
        chain = ChainStore(open_store(f"file://{root}"), "ml8s-model")
        versions = sorted(chain.walk(), key=lambda v: v.counter)[1:]
        weights = [safetensors.torch.load(chain.fetch_payload(v, layout.PAYLOAD_WEIGHTS)) for v in versions]
        params = sum(t.numel() for t in weights[0].values())
        print(f"[lineage deltas] {len(versions)} versions, {params:,} float32 parameters, {args.rows} rows/generation")
        print(f"  {'hop':<8} {'changed':>9} {'FULL bytes':>11} {'DELTA bytes':>12} {'DELTA/FULL':>11}")
        for i in range(1, len(weights)):
            base, new = weights[i - 1], weights[i]
            changed = sum(int((base[n].view(torch.int32) != new[n].view(torch.int32)).sum()) for n in new)
            full, delta = len(encode_full(new)), len(encode_delta(base, new))
            hop = f"v{versions[i - 1].counter}->v{versions[i].counter}"
            print(f"  {hop:<8} {changed / params:>8.1%} {full:>11,} {delta:>12,} {delta / full:>10.1%}")


if __name__ == "__main__":
    main()
