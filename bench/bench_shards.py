"""Benchmark: sharded checkpoint save with N ranks in N processes vs one writer, and load vs torch's DCP.

Save: each rank is a real process holding the whole (replicated) state, as in data-parallel training; after
a barrier each writes its plan's share with ``write_shard`` and the wall time runs from the barrier to the
metadata written. The baseline is one process writing the same bytes as a 1-rank checkpoint through the
same code. Goal: N=2 ranks at least 1.6x faster than one writer on a 2-core machine.

Load: ``load_state_dict`` of the N-rank checkpoint (every block sha256-verified) against
``torch.distributed.checkpoint`` (``dcp.save``/``dcp.load`` in one process, no process group) on the same
state, with a plain ``torch.save``/``torch.load`` line for scale. Every load is checked equal to the state.

All files are written to, and read back from, the same local directory; loads read from the page cache
(the machine's RAM holds everything), so they compare the code, not the disk. Nothing is asserted on
timings: the script prints a table of ratios for a human to read.
"""

from __future__ import annotations

import argparse
import math
import multiprocessing as mp
import os
import platform
import resource
import shutil
import tempfile
import time
import warnings
from collections.abc import Callable
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Barrier

import torch
from torch.distributed.checkpoint import state_dict_loader, state_dict_saver

from ml8s.shards import (
    ShardReceipt,
    WriterConfig,
    checkpoint_id_for,
    load_state_dict,
    pieces_for_rank,
    write_metadata,
    write_shard,
)
from ml8s.store import LocalStore

MiB = 1024 * 1024
GOAL = 1.6
PREFIX = "ckpt/model"
_CID = checkpoint_id_for("bench_shards")


def make_state(total_mib: int) -> dict[str, torch.Tensor]:
    """A model-like state: 2-D float32 weights of a few sizes (the larger ones split by rows), plus biases."""
    g = torch.Generator().manual_seed(0)
    weights = [1, 2, 3, 4] * 4  # relative sizes; 16 weights
    unit = total_mib * MiB // (sum(weights) * 4)
    state: dict[str, torch.Tensor] = {}
    for i, w in enumerate(weights):
        rows = max(1, w * unit // 1024)
        state[f"layer{i:02d}.weight"] = torch.randn(rows, 1024, generator=g)
        state[f"layer{i:02d}.bias"] = torch.randn(1024, generator=g)
    return state


def _rank_main(
    root: str, rank: int, world: int, mib: int, tmp_dir: str, barrier: Barrier, out: Queue[tuple[float, float, str]]
) -> None:
    """One rank: build the state (untimed), wait for every rank, write its shard; report (start, end, receipt)."""
    torch.set_num_threads(1)
    state = make_state(mib)
    pieces = pieces_for_rank(state, rank, world)
    config = WriterConfig(local_tmp_dir=tmp_dir)
    barrier.wait()
    start, cpu = time.perf_counter(), _cpu_seconds()  # perf_counter: CLOCK_MONOTONIC, shared by processes on Linux
    receipt = write_shard(LocalStore(root), PREFIX, rank, world, pieces, checkpoint_id=_CID, config=config)
    out.put((start, _cpu_seconds() - cpu, receipt.model_dump_json()))


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def save_with_processes(root: str, world: int, mib: int, tmp_dir: str) -> tuple[float, float]:
    """(wall seconds from the ranks' common start to the metadata written by the parent (rank 0's role),
    the most CPU seconds one rank spent writing its shard)."""
    ctx = mp.get_context("spawn")
    barrier, out = ctx.Barrier(world), ctx.Queue()
    procs = [ctx.Process(target=_rank_main, args=(root, r, world, mib, tmp_dir, barrier, out)) for r in range(world)]
    for proc in procs:
        proc.start()
    results = [out.get(timeout=1800) for _ in procs]
    receipts = [ShardReceipt.model_validate_json(r[2]) for r in results]
    write_metadata(LocalStore(root), PREFIX, receipts)
    seconds = time.perf_counter() - min(r[0] for r in results)  # before the joins: process teardown is not saving
    for proc in procs:
        proc.join()
        if proc.exitcode != 0:
            raise SystemExit(f"a rank process failed (exit {proc.exitcode})")
    return seconds, max(r[1] for r in results)


def timed(action: Callable[[], object]) -> tuple[float, object]:
    start = time.perf_counter()
    result = action()
    return time.perf_counter() - start, result


def _same(loaded: dict[str, torch.Tensor], state: dict[str, torch.Tensor], what: str) -> None:
    if loaded.keys() != state.keys() or not all(torch.equal(loaded[k], v) for k, v in state.items()):
        raise SystemExit(f"{what} did not load the state it saved")


def _dcp_load(directory: str, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    target = {k: torch.empty_like(v) for k, v in state.items()}  # DCP loads in place: allocation timed too
    state_dict_loader.load(target, checkpoint_id=directory)
    return target


def _row(name: str, seconds: float, nbytes: int, ratio: str = "") -> str:
    return f"  {name:<44} {seconds:8.3f} s  {nbytes / seconds / MiB:8,.0f} MiB/s  {ratio}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--mib", type=int, default=512, help="state size in MiB (default 512)")
    parser.add_argument("--ranks", type=int, default=2, help="ranks (processes) writing in parallel (default 2)")
    parser.add_argument("--repeat", type=int, default=2, help="save timings per case, best kept (default 2)")
    parser.add_argument("--quick", action="store_true", help="a 64 MiB state, one save timing per case")
    parser.add_argument("--tmpdir", default=None, help="where to write (default: the system temp dir)")
    args = parser.parse_args(argv)
    mib: int = 64 if args.quick else args.mib
    if args.quick:
        args.repeat = 1
    torch.set_num_threads(1)
    state = make_state(mib)
    nbytes = sum(t.numel() * t.element_size() for t in state.values())
    print(
        f"bench_shards: {nbytes / MiB:,.0f} MiB in {len(state)} tensors, {args.ranks} ranks, python "
        f"{platform.python_version()}, torch {torch.__version__}, {os.cpu_count()} CPUs, "
        f"load average {os.getloadavg()[0]:.2f}",
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="ml8s-bench-shards-", dir=args.tmpdir) as work:
        scratch = os.path.join(work, "scratch")
        os.makedirs(scratch)
        best: dict[int, tuple[float, float]] = {}
        for attempt in range(args.repeat):  # alternated, so both see the same machine; best of each kept
            for world in (args.ranks, 1):
                shutil.rmtree(os.path.join(work, str(world)), ignore_errors=True)
                os.sync()  # start each save with no dirty pages (ours or anyone's) waiting for the disk
                wall, cpu = save_with_processes(os.path.join(work, str(world)), world, mib, scratch)
                print(
                    f"  save attempt {attempt + 1}: {world} rank(s) {wall:.3f} s, {cpu:.3f} CPU s per rank", flush=True
                )
                best[world] = min(best.get(world, (math.inf, math.inf)), (wall, cpu))
        (parallel, par_cpu), (single, one_cpu) = best[args.ranks], best[1]
        shutil.rmtree(os.path.join(work, "1"))
        os.sync()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # DCP warns that it runs without a process group: that is the point
            dcp_save, _ = timed(lambda: state_dict_saver.save(state, checkpoint_id=os.path.join(work, "dcp")))
            dcp_load, got = timed(lambda: _dcp_load(os.path.join(work, "dcp"), state))
        _same(got if isinstance(got, dict) else {}, state, "dcp.load")
        pt_path = os.path.join(work, "state.pt")
        pt_save, _ = timed(lambda: torch.save(state, pt_path))
        pt_load, got = timed(lambda: torch.load(pt_path, weights_only=True))
        _same(got if isinstance(got, dict) else {}, state, "torch.load")
        ours_load, got = timed(lambda: load_state_dict(LocalStore(os.path.join(work, str(args.ranks))), PREFIX))
        _same(got if isinstance(got, dict) else {}, state, "load_state_dict")
    speedup = single / parallel
    verdict = "ok" if speedup >= GOAL else f"BELOW GOAL {GOAL}"
    print(f"save (best of {args.repeat})")
    print(_row(f"ml8s, {args.ranks} ranks in {args.ranks} processes", parallel, nbytes))
    print(_row("ml8s, 1 writer (same bytes)", single, nbytes, f"parallel speed-up {speedup:.2f}x ({verdict})"))
    print(
        f"  CPU seconds per rank: {one_cpu:.3f} (1 writer), {par_cpu:.3f} (slowest of {args.ranks}); "
        f"speed-up if each rank had its own idle core: {one_cpu / par_cpu:.2f}x"
    )
    print(_row("DCP dcp.save (1 process)", dcp_save, nbytes, f"ml8s {args.ranks} ranks {dcp_save / parallel:.2f}x"))
    print(_row("torch.save", pt_save, nbytes, f"ml8s {args.ranks} ranks {pt_save / parallel:.2f}x"))
    print("load (whole state, 1 process)")
    print(_row("ml8s load_state_dict (sha256-verified)", ours_load, nbytes))
    print(_row("DCP dcp.load", dcp_load, nbytes, f"ratio DCP/ml8s {dcp_load / ours_load:.2f}"))
    print(_row("torch.load", pt_load, nbytes, f"ratio torch.load/ml8s {pt_load / ours_load:.2f}"))
    print(f"bench_shards: load average {os.getloadavg()[0]:.2f} at the end (other work on the machine skews timings)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
