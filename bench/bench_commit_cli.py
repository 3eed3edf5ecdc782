"""Benchmark: `ml8s chain commit --payload` of a large float checkpoint against `cp` + `sync`, with peak RSS.

The whole command, as an operator runs it (interpreter start-up, imports, header check, hashing, the copy,
the chain's own files), then ``sync``; the baseline is ``cp`` of the same file then ``sync``. Both run as
child processes, alternating, p50 of ``--repeat``; peak RSS is the child's ``ru_maxrss`` (``os.wait4`` in a
small launcher, so that this process's own peak does not leak into it).

- FULL: every commit is a FULL (DELTA_BASE_INTERVAL=1). Goals: at most 1.5x ``cp`` + ``sync``, and peak
  RSS at most 256 MiB above a small (1 MiB) commit's.
- The floor, where ``openssl`` is on PATH: the work no FULL commit can skip, done by C tools at once on
  every core, then ``sync``: ``cp`` of the file and two ``openssl dgst -sha256`` of it (the block records
  two hashes of the bytes: the file's sha256 and the weights hash). The commit's ratio to it is what the
  command adds to that work (start-up, imports, threads, the chain's files), whatever the cores' load.
- DELTA: a FULL, then the same checkpoint with 1% of its elements changed committed as a DELTA on it
  (DELTA_BASE_INTERVAL=2). Goal: peak RSS at most 512 MiB above a small commit's; its time is printed
  against ``cp`` + ``sync`` for information.

The checkpoint is ``--size-mib`` of float32 tensors of 64 MiB each, written in chunks (never in memory).
The command runs with its bytecode cached (``PYTHONPYCACHEPREFIX`` under the bench's directory, written by
the first, unmeasured commit), as an installed ``ml8s`` has it: an editable checkout under
``PYTHONDONTWRITEBYTECODE`` compiles ml8s's own modules at every start (about 0.06 CPU-seconds here).
Nothing is asserted: the script prints times, ratios and the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MiB = 1024 * 1024
TENSOR_MIB = 64
ML8S = str(Path(sys.executable).with_name("ml8s"))
# cp and the two sha256 passes of a FULL commit, at once, each a C program: the floor of that work (any of
# the three failing fails the run: a bare `wait` would hide it)
_FLOOR = (
    'cp "$1" "$2" & c=$!; openssl dgst -sha256 "$1" >/dev/null & a=$!; openssl dgst -sha256 "$1" >/dev/null & '
    "b=$!; wait $c && wait $a && wait $b"
)


def write_checkpoint(path: str, size_mib: int, seed: int, changed: float = 0.0) -> None:
    """float32 tensors ``t000``, ``t001``, ... of TENSOR_MIB each; ``changed``: the fraction of elements of
    each tensor set to another value than with ``changed=0`` (same seed), spread evenly."""
    count = max(1, size_mib // TENSOR_MIB)
    per = min(size_mib, TENSOR_MIB) * MiB
    spans = [[n * per, n * per + per] for n in range(count)]
    header = {f"t{n:03d}": {"dtype": "F32", "shape": [per // 4], "data_offsets": span} for n, span in enumerate(spans)}
    body = json.dumps(header).encode()
    with open(path, "wb") as handle:
        handle.write(struct.pack("<Q", len(body)) + body)
        for n in range(count):
            block = bytearray(os.urandom(per)) if seed < 0 else bytearray(_seeded(seed * 1000 + n, per))
            if changed:
                step = int(1 / changed)
                view = memoryview(block).cast("f")
                for i in range(0, len(view), step):
                    view[i] = view[i] + 1.0
            handle.write(block)


def _seeded(seed: int, size: int) -> bytes:
    import numpy as np

    # finite floats in [-1, 1): a DELTA carries changed elements' bits, any float is fine, NaNs too
    return np.random.default_rng(seed).uniform(-1, 1, size // 4).astype("<f4").tobytes()


# A small launcher between this process and the command: a child started from here (vfork + exec) would
# inherit this process's peak RSS (numpy, the checkpoint writer) into its ru_maxrss, hiding the command's.
# Started from the launcher's few MiB instead, the command's peak is its own. Both sides go through it.
_LAUNCH = """
import os, sys
pid = os.fork()
if pid == 0:
    os.execvp(sys.argv[2], sys.argv[2:])
_, status, usage = os.wait4(pid, 0)
with open(sys.argv[1], "w") as out:
    out.write(f"{usage.ru_maxrss} {usage.ru_utime + usage.ru_stime}")
sys.exit(os.waitstatus_to_exitcode(status))
"""


def timed_child(argv: list[str], env: dict[str, str]) -> tuple[float, float, float]:
    """(seconds of the command plus a ``sync``, peak RSS of the command in MiB, its CPU-seconds: user + system)."""
    with tempfile.NamedTemporaryFile("r", prefix="ml8s-bench-rss-") as rss:
        start = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, "-S", "-c", _LAUNCH, rss.name, *argv],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            check=False,
        )
        if proc.returncode != 0:
            err = proc.stderr.decode()[-2000:]
            raise SystemExit(f"bench_commit_cli: {' '.join(argv)} failed ({proc.returncode}): {err}")
        os.sync()
        took = time.perf_counter() - start
        peak, cpu = rss.read().split()
        return took, int(peak) / 1024, float(cpu)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--size-mib", type=int, default=1024, help="checkpoint size in MiB (default 1024)")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each command, p50 kept (default 3)")
    parser.add_argument("--quick", action="store_true", help="a 128 MiB checkpoint")
    parser.add_argument("--tmpdir", default=None, help="where the files go (default: the system temp dir)")
    parser.add_argument("--skip-delta", action="store_true", help="FULL commits only")
    args = parser.parse_args(argv)
    size = 128 if args.quick else args.size_mib
    print(
        f"bench_commit_cli: {size} MiB float32 checkpoint, {args.repeat} runs each, {os.cpu_count()} CPUs, "
        f"load {os.getloadavg()[0]:.2f}",
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="ml8s-bench-commit-", dir=args.tmpdir) as work:
        small, big = os.path.join(work, "small.safetensors"), os.path.join(work, "big.safetensors")
        write_checkpoint(small, 1, seed=1)
        write_checkpoint(big, size, seed=2)
        env = {
            **{k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"},
            "PYTHONPYCACHEPREFIX": os.path.join(work, "pycache"),
            "PIPELINE_ROOT_URI": f"file://{work}/root",
            "CHAIN_NAME": "full",
            "DELTA_BASE_INTERVAL": "1",
        }
        commit = [ML8S, "chain", "commit", "--payload"]
        timed_child([*commit, small], env)  # unmeasured: writes the bytecode cache
        fixed, small_rss, small_cpu = [], 0.0, []
        for i in range(args.repeat):  # the fixed cost: start-up, imports, the chain's small files and fsyncs
            with open(small, "r+b") as handle:
                handle.seek(-4, os.SEEK_END)
                handle.write(struct.pack("<f", float(i)))
            took, peak, cpu = timed_child([*commit, small], env)
            fixed.append(took)
            small_rss, small_cpu = max(small_rss, peak), [*small_cpu, cpu]
        print(
            f"[1 MiB] commit + sync {', '.join(f'{s:.2f}' for s in fixed)} s, best {min(fixed):.2f} s; "
            f"CPU {statistics.median(small_cpu):.2f} s (p50)",
            flush=True,
        )
        copies, commits, rss, cpus, floors = [], [], [], [], []
        sides = ["cp", "commit", "floor"] if shutil.which("openssl") else ["cp", "commit"]
        copy = os.path.join(work, "copy")
        for i in range(args.repeat):
            with open(big, "r+b") as handle:  # a new checkpoint each time: the run index must not short-cut
                handle.seek(-4, os.SEEK_END)
                handle.write(struct.pack("<f", float(i)))
            for side in sides[i % len(sides) :] + sides[: i % len(sides)]:  # each side first in turn
                if side == "cp":
                    copies.append(timed_child(["cp", big, copy], env)[0])
                elif side == "floor":
                    floors.append(timed_child(["sh", "-c", _FLOOR, "floor", big, copy], env)[0])
                else:
                    took, peak, cpu = timed_child([*commit, big], env)
                    commits.append(took)
                    rss.append(peak)
                    cpus.append(cpu)
                if os.path.exists(copy):
                    os.unlink(copy)
        b, c = statistics.median(copies), statistics.median(commits)
        print(f"[FULL] ({', '.join(f'{s:.2f}' for s in commits)} s; cp+sync {', '.join(f'{s:.2f}' for s in copies)} s)")
        print(f"  cp + sync                 {b:8.2f} s")
        print(f"  ml8s chain commit + sync  {c:8.2f} s   ratio {c / b:5.2f}  (goal <= 1.5)")
        print(f"  commit CPU (user + sys)   {statistics.median(cpus):8.2f} s   ({', '.join(f'{s:.2f}' for s in cpus)})")
        if floors:
            f = statistics.median(floors)
            print(
                f"  floor: cp & 2 sha256      {f:8.2f} s   ratio {f / b:5.2f} to cp + sync; "
                f"the commit {c / f:5.2f}x it ({', '.join(f'{s:.2f}' for s in floors)})"
            )
        best = min(commits) / min(copies)
        print(f"  best of each              {min(commits):8.2f} s / {min(copies):.2f} s   ratio {best:5.2f}")
        print(
            f"  peak RSS                  {max(rss):8.1f} MiB, small commit {small_rss:.1f} MiB: "
            f"+{max(rss) - small_rss:.1f} MiB (goal <= 256)",
            flush=True,
        )
        if not args.skip_delta:
            delta_env = {**env, "CHAIN_NAME": "delta", "DELTA_BASE_INTERVAL": "2"}
            timed_child([*commit, big], delta_env)
            write_checkpoint(big, size, seed=2, changed=0.01)
            took, peak, _ = timed_child([*commit, big], delta_env)
            log = subprocess.run([ML8S, "chain", "log", "--json"], env=delta_env, capture_output=True, text=True)
            kind = json.loads(log.stdout)[0]["payload_kind"]
            print(
                f"[DELTA] ({kind}) {took:8.2f} s  ({took / b:.2f}x cp+sync)  peak RSS {peak:8.1f} MiB: "
                f"+{peak - small_rss:.1f} MiB above a small commit (goal <= 512)",
                flush=True,
            )
    print(f"bench_commit_cli: load average {os.getloadavg()[0]:.2f} at the end", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
