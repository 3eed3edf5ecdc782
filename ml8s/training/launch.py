"""Starting the ranks of a distributed training without Flyte: what ``ml8s run`` does for TRAIN_WORLD_SIZE > 1.

``launch_ranks`` starts TRAIN_WORLD_SIZE processes ``python -m ml8s.training.ranks REQUEST`` on this machine,
each with RANK, WORLD_SIZE, LOCAL_RANK and a rendezvous on the loopback interface only (MASTER_ADDR
127.0.0.1, a port the kernel just handed out, GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME the loopback
device): nothing listens beyond this machine. Each rank ends with this process, however it ends (SIGKILL
included: ``ml8s.interrupts.die_with_parent``), so no rank outlives its run. It waits for all of them; the
first rank that fails stops
the others (they would wait on it until the collective timeout), and its named error is raised here as a
:class:`~ml8s.errors.RankError` with its code and message. The ranks log to this process's stderr; their
stdout goes there too, so ``ml8s run``'s stdout keeps only the manifest.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from typing import IO

import ml8s
from ml8s.context.run import RunSpec
from ml8s.errors import RankError
from ml8s.interrupts import PARENT_PID_VARIABLE, signals_deferred
from ml8s.tempdirs import owned_tempdir
from ml8s.training.ranks import RankRequest, error_path
from ml8s.training.summary import TrainSummary

LOOPBACK = "127.0.0.1"
_POLL_S = 0.05
_STOP_GRACE_S = 10.0


def train_ranks_or_one(spec: RunSpec, features_dir: str, out_dir: str) -> TrainSummary:
    """Step 4 as ``ml8s run`` takes it: :func:`launch_ranks` when TRAIN_WORLD_SIZE > 1, else one process."""
    if spec.params.train_world_size > 1:
        return launch_ranks(spec, features_dir, out_dir)
    from ml8s.training.fit import train

    return train(spec, features_dir, out_dir)


def launch_ranks(spec: RunSpec, features_dir: str, out_dir: str) -> TrainSummary:
    """Train ``spec`` in TRAIN_WORLD_SIZE local processes; rank 0's summary (module docstring)."""
    world = spec.params.train_world_size
    os.makedirs(out_dir, exist_ok=True)
    with owned_tempdir("ml8s-ranks-") as scratch:
        request = RankRequest(
            spec=spec,
            features_dir=os.path.abspath(features_dir),
            out_dir=os.path.abspath(out_dir),
            summary_path=os.path.join(scratch, "summary.json"),
            error_dir=scratch,
        )
        path = os.path.join(scratch, "request.json")
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(request.model_dump_json())
        port = free_loopback_port()
        spec.log("train", f"starting {world} ranks (rendezvous {LOOPBACK}:{port})")
        _run_ranks(world, lambda rank: _start_rank(path, rank, world, port), scratch)
        try:
            with open(request.summary_path, "rb") as handle:
                return TrainSummary.model_validate_json(handle.read())
        except FileNotFoundError:
            raise RankError(f"rank 0 of {world} exited without writing its train summary") from None


def free_loopback_port() -> int:
    """A TCP port free on 127.0.0.1 now (the kernel's choice; rank 0 binds it a moment later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        port: int = sock.getsockname()[1]
        return port


def loopback_interface() -> str | None:
    """The loopback device's name (``lo`` on Linux, ``lo0`` on macOS), None when none is found."""
    names = sorted(name for _, name in socket.if_nameindex())
    return next((name for name in names if name in ("lo", "lo0")), None)


def _rank_env(rank: int, world: int, port: int) -> dict[str, str]:
    env = dict(os.environ)
    root = os.path.dirname(os.path.dirname(os.path.abspath(ml8s.__file__)))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    env.update(
        RANK=str(rank),
        WORLD_SIZE=str(world),
        LOCAL_RANK=str(rank),
        LOCAL_WORLD_SIZE=str(world),
        MASTER_ADDR=LOOPBACK,
        MASTER_PORT=str(port),
        OMP_NUM_THREADS="1",
    )
    env[PARENT_PID_VARIABLE] = str(os.getpid())  # a rank ends with this process (ranks.main)
    if (device := loopback_interface()) is not None:
        env.update(GLOO_SOCKET_IFNAME=device, NCCL_SOCKET_IFNAME=device)
    return env


def _run_ranks(world: int, start: Callable[[int], subprocess.Popen[bytes]], scratch: str) -> None:
    """Start ``world`` ranks and wait for them all; whatever ends this (a failed rank, a signal), stop and
    reap every rank that was started."""
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for rank in range(world):
            with signals_deferred():  # a rank started is a rank in ``procs``, so the finally stops it
                procs.append(start(rank))
        _wait(procs, scratch)
    finally:
        _stop(procs)


def _start_rank(request_path: str, rank: int, world: int, port: int) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "ml8s.training.ranks", request_path]
    return subprocess.Popen(command, env=_rank_env(rank, world, port), stdout=_stderr())


def _stderr() -> IO[bytes] | int:
    """This process's stderr as a file descriptor when it has one (pytest's capture may have none)."""
    try:
        return sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):
        return subprocess.DEVNULL


def _wait(procs: list[subprocess.Popen[bytes]], scratch: str) -> None:
    """Every rank's exit; on the first failure raise that rank's error (the caller stops the others)."""
    while True:
        codes = [p.poll() for p in procs]
        failed = [rank for rank, code in enumerate(codes) if code not in (None, 0)]
        if failed:
            # a rank that saw a peer die fails too, without a named error: report the one that has one
            first = min(failed, key=lambda r: (not os.path.exists(error_path(scratch, r)), r))
            raise _failure(first, codes[first], len(procs), scratch)
        if all(code == 0 for code in codes):
            return
        time.sleep(_POLL_S)


def _failure(rank: int, code: int | None, world: int, scratch: str) -> RankError:
    try:
        with open(error_path(scratch, rank), encoding="utf-8") as handle:
            error_code, _, message = handle.read().partition("\n")
    except FileNotFoundError:
        return RankError(f"rank {rank} of {world} exited with status {code} (its stderr above says why)")
    return RankError(f"rank {rank} of {world} failed with {error_code}: {message}")


def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
    """Terminate the ranks still running (only these processes, which this launcher started), then reap them."""
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
    deadline = time.monotonic() + _STOP_GRACE_S
    for proc in procs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        if proc.poll() is None:
            proc.kill()
            proc.wait()
