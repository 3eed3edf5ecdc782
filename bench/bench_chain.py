"""Benchmark: model-chain commits against plain atomic writes of the same bytes, in the same run.

Two questions, on the local backend and on a throwaway radosgw (when Ceph is installed):

- what a commit of a large payload (default 100 MiB) costs over ``Store.put_atomic`` of the same bytes:
  the commit hashes the payload, writes it create-only plus three small files, reads the head twice and
  swaps it; the ratio should stay near 1 (the bytes dominate);
- a streamed commit of a 1 GiB safetensors file (``--stream-mb``) against ``cp`` + ``sync`` of the same
  file (goal: at most 1.5x), and the committing process's peak RSS (goal: at most 256 MiB, whatever the
  payload size), measured in a child process with ``resource.getrusage``; verify's peak RSS likewise;
- commits per second with 16 contending processes (small payloads: the protocol's cost, not the bytes),
  against one process committing alone; under contention every loser uploads, loses the swap, deletes
  its upload and retries, so the contended rate is bounded by the single-committer rate.

p50 of ``--repeat`` runs for the large payload, baseline and commit alternating. Nothing is asserted:
the script prints numbers and ratios.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import multiprocessing
import os
import platform
import resource
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ml8s.chain import (
    ChainStore,
    CommitMeta,
    RetryPolicy,
    SigningKey,
    adopt_policy,
    check_safetensors,
    local_file,
    verify_chain,
)
from ml8s.chain.signing import signature_valid
from ml8s.store import LocalStore, S3Store, Store

MiB = 1024 * 1024
CONTENDED = RetryPolicy(max_attempts=1000, base_delay_s=0.02, max_delay_s=0.5)
StoreSpec = tuple[Any, ...]  # ("local", root) or ("s3", uri, env): picklable, for spawned workers


def open_spec(spec: StoreSpec) -> Store:
    return LocalStore(spec[1]) if spec[0] == "local" else S3Store(spec[1], env=spec[2])


def meta(name: str) -> CommitMeta:
    fch = hashlib.sha256(name.encode()).hexdigest()
    return CommitMeta(
        run_id=fch[:12],
        full_config_hash=fch,
        artifact_root=f"bench://{name}",
        architecture="mlp",
        parameter_count=1,
    )


def timed(action: Callable[[], object]) -> float:
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def bench_large(label: str, spec: StoreSpec, size_mb: int, repeat: int) -> None:
    """Baseline and commit alternate (and swap order), and both keep what they wrote until the end: a file
    deleted at once never pays for its writeback, which would flatter whichever side deletes."""
    store = open_spec(spec)
    chain = ChainStore(store, f"bench-large-{os.getpid()}")
    chain.init()
    data = os.urandom(size_mb * MiB)
    base: list[float] = []
    commit: list[float] = []
    for i in range(repeat):
        key, tmp, run = f"bench/plain-{i}.bin", f"bench/.tmp/plain-{i}", meta(f"large-{label}-{i}")
        for side in (0, 1) if i % 2 == 0 else (1, 0):
            if side == 0:
                base.append(timed(lambda: store.put_atomic(key, data, tmp_key=tmp)))  # noqa: B023  (called at once)
            else:
                commit.append(timed(lambda: chain.commit({"model.bin": data}, run)))  # noqa: B023
    for i in range(repeat):
        store.delete(f"bench/plain-{i}.bin")
    b, c, mbps = statistics.median(base), statistics.median(commit), size_mb * MiB / 1e6
    print(f"[{label}] commit of {size_mb} MiB, p50 of {repeat}")
    print(f"  put_atomic (baseline)   {b:8.3f} s  {mbps / b:8,.0f} MB/s")
    print(f"  chain commit            {c:8.3f} s  {mbps / c:8,.0f} MB/s")
    print(f"  ratio commit/put_atomic {c / b:8.2f}", flush=True)


def write_safetensors(path: str, size_mb: int) -> None:
    """A valid safetensors file of one U8 tensor of ``size_mb`` MiB, written in chunks (never in memory)."""
    header = json.dumps({"w": {"dtype": "U8", "shape": [size_mb * MiB], "data_offsets": [0, size_mb * MiB]}}).encode()
    with open(path, "wb") as handle:
        handle.write(struct.pack("<Q", len(header)) + header)
        for _ in range(size_mb):
            handle.write(os.urandom(MiB))


def stream_child(root: str, path: str, name: str, action: str) -> None:
    """In its own process (so peak RSS is this work's alone): commit ``path`` streamed, or verify."""
    start = time.perf_counter()
    chain = ChainStore(LocalStore(root), "bench-stream")
    if action == "commit":
        summary = check_safetensors(path)
        source = local_file(path)
        run = meta(name).model_copy(update={"parameter_count": summary.parameter_count})
        chain.commit({"model_native.safetensors": source}, run)
        os.sync()
    else:
        assert verify_chain(chain).ok
    took = time.perf_counter() - start
    print(json.dumps({"maxrss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, "seconds": took}))


def _child(root: str, path: str, name: str, action: str) -> tuple[float, float]:
    """(seconds of the work itself, without interpreter start-up and imports; peak RSS in MiB)."""
    argv = [sys.executable, __file__, "--stream-child", root, path, name, action]
    found = json.loads(subprocess.run(argv, check=True, capture_output=True, text=True).stdout.splitlines()[-1])
    return found["seconds"], found["maxrss_kib"] / 1024


def bench_stream(workdir: str, size_mb: int, repeat: int) -> None:
    """Streamed commit of a large checkpoint vs ``cp`` + ``sync`` (both in child processes, alternating;
    the commit's time is measured inside its process, so Python's start-up is not counted)."""
    source = os.path.join(workdir, "stream.safetensors")
    write_safetensors(source, size_mb)
    root = os.path.join(workdir, "stream-root")
    ChainStore(LocalStore(root), "bench-stream").init()
    copies: list[float] = []
    commits: list[float] = []
    rss: list[float] = []
    for i in range(repeat):
        with open(source, "r+b") as handle:  # a new payload each time: the run index must not short-cut
            handle.seek(-8, os.SEEK_END)
            handle.write(struct.pack("<Q", i))
        for side in (0, 1) if i % 2 == 0 else (1, 0):
            if side == 0:
                target = os.path.join(workdir, f"copy-{i}")
                copies.append(timed(lambda: subprocess.run(["sh", "-c", f"cp {source} {target} && sync"], check=True)))  # noqa: B023
            else:
                took, peak = _child(root, source, f"stream-{i}", "commit")
                commits.append(took)
                rss.append(peak)
    verify_s, verify_rss = _child(root, source, "", "verify")
    shutil.rmtree(root)
    b, c = statistics.median(copies), statistics.median(commits)
    print(f"[local] streamed commit of a {size_mb} MiB safetensors file, p50 of {repeat} (child processes)")
    print(f"  cp + sync (baseline)        {b:8.3f} s")
    print(f"  ml8s commit (+ sync)        {c:8.3f} s   peak RSS {max(rss):7.1f} MiB (goal <= 256)")
    print(f"  ratio commit/(cp+sync)      {c / b:8.2f}   (goal <= 1.5)")
    print(f"  verify, {repeat + 1} versions        {verify_s:8.3f} s   peak RSS {verify_rss:7.1f} MiB", flush=True)


def bench_signing(workdir: str, versions: int) -> None:
    """Signing and verification cost per version: commits and a full verify, unsigned vs signed chains."""
    key = SigningKey.generate()
    results = {}
    for label, signer in (("unsigned", None), ("signed", key)):
        chain = ChainStore(LocalStore(os.path.join(workdir, f"sign-{label}")), "bench-sign", signer=signer)
        chain.init()
        if signer is not None:
            adopt_policy(chain, signer, [signer.public_key])
        start = time.perf_counter()
        for i in range(versions):
            chain.commit({"model.bin": os.urandom(4096)}, meta(f"sign-{label}-{i}"))
        commit_s = (time.perf_counter() - start) / versions
        verify_s = timed(lambda: verify_chain(ChainStore(chain.store, "bench-sign")).raise_for_findings()) / versions  # noqa: B023
        results[label] = (commit_s, verify_s)
    data = os.urandom(1024)
    sign_us = timed(lambda: [key.sign(data) for _ in range(1000)]) * 1000
    signature = key.sign(data)
    check_us = timed(lambda: [signature_valid(key.public_key, signature, data) for _ in range(1000)]) * 1000
    (uc, uv), (sc, sv) = results["unsigned"], results["signed"]
    print(f"[local] signing, {versions} versions of 4 KiB")
    print(f"  ed25519 sign / verify of a header      {sign_us:8.1f} / {check_us:.1f} us")
    print(f"  commit per version unsigned / signed   {uc * 1000:8.2f} / {sc * 1000:.2f} ms  (ratio {sc / uc:.2f})")
    print(
        f"  verify per version unsigned / signed   {uv * 1000:8.2f} / {sv * 1000:.2f} ms  (ratio {sv / uv:.2f})",
        flush=True,
    )


def _contender(spec: StoreSpec, chain_name: str, worker: int, commits: int, barrier: Any, out: Any) -> None:
    chain = ChainStore(open_spec(spec), chain_name)
    barrier.wait()
    for i in range(commits):
        chain.commit_with_retry({"model.bin": os.urandom(4096)}, meta(f"{chain_name}-{worker}-{i}"), CONTENDED)
    out.put(worker)


def bench_contention(label: str, spec: StoreSpec, processes: int, commits: int) -> None:
    alone = ChainStore(open_spec(spec), "bench-alone")
    alone.init()
    start = time.perf_counter()
    for i in range(commits * 4):
        alone.commit({"model.bin": os.urandom(4096)}, meta(f"alone-{label}-{i}"))
    single = commits * 4 / (time.perf_counter() - start)
    name = "bench-contended"
    chain = ChainStore(open_spec(spec), name)
    chain.init()
    ctx = multiprocessing.get_context("spawn")
    barrier, out = ctx.Barrier(processes + 1), ctx.Queue()
    procs = [ctx.Process(target=_contender, args=(spec, name, w, commits, barrier, out)) for w in range(processes)]
    for proc in procs:
        proc.start()
    barrier.wait()  # timing starts when every process has imported ml8s and is ready
    start = time.perf_counter()
    for _ in procs:
        out.get(timeout=600)
    contended = processes * commits / (time.perf_counter() - start)
    for proc in procs:
        proc.join()
    losses = sum(e.event == "conflict" for e in chain.audit.events())
    assert verify_chain(chain, payloads=False).ok
    print(f"[{label}] commits/s, {processes} processes x {commits} commits (4 KiB payloads)")
    print(f"  1 process alone (baseline)   {single:8.1f} commits/s")
    print(f"  {processes} processes contending   {contended:8.1f} commits/s  ({losses} lost swaps, retried)")
    print(f"  ratio contended/alone        {contended / single:8.2f}", flush=True)


@contextmanager
def radosgw() -> Iterator[StoreSpec | None]:
    """A throwaway one-node radosgw (tests/s3_servers.py), with TCP_NODELAY; None without Ceph."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    from s3_servers import CephCluster, S3Endpoint, missing_ceph_binaries

    if missing_ceph_binaries():
        print("[radosgw] skipped: Ceph binaries not installed")
        yield None
        return

    class Cluster(CephCluster):
        def _write_conf(self) -> None:  # beast without TCP_NODELAY answers GETs ~40 ms late
            super()._write_conf()
            endpoint = f"endpoint=127.0.0.1:{self.rgw_port}"
            self.conf.write_text(self.conf.read_text().replace(endpoint, f"{endpoint} tcp_nodelay=1"))

    cluster = Cluster()
    try:
        cluster.start()
        endpoint = S3Endpoint("radosgw", cluster.url, cluster.ACCESS_KEY, cluster.SECRET_KEY)
        yield ("s3", f"s3://{endpoint.make_bucket()}/bench", endpoint.env())
    finally:
        cluster.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--size-mb", type=int, default=100, help="large payload in MiB (default 100)")
    parser.add_argument("--repeat", type=int, default=5, help="large commits per backend, p50 kept (default 5)")
    parser.add_argument("--processes", type=int, default=16, help="contending processes (default 16)")
    parser.add_argument("--commits", type=int, default=5, help="commits per contending process (default 5)")
    parser.add_argument("--stream-mb", type=int, default=1024, help="streamed commit payload in MiB (default 1 GiB)")
    parser.add_argument("--only-stream", action="store_true", help="run the streamed-commit benchmark alone")
    parser.add_argument("--stream-child", nargs=4, help=argparse.SUPPRESS)
    parser.add_argument("--quick", action="store_true", help="smaller: 20 MiB, 3 repeats, 2 commits per process")
    parser.add_argument("--tmpdir", default=None, help="where the local chain goes (default: the system temp dir)")
    args = parser.parse_args(argv)
    if args.stream_child:
        stream_child(*args.stream_child)
        return 0
    size_mb, repeat, commits = (20, 3, 2) if args.quick else (args.size_mb, args.repeat, args.commits)
    stream_mb = 64 if args.quick else args.stream_mb
    print(f"bench_chain: python {platform.python_version()}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}")
    with tempfile.TemporaryDirectory(prefix="ml8s-bench-chain-", dir=args.tmpdir) as workdir:
        local = ("local", workdir)
        bench_signing(workdir, 20 if args.quick else 100)
        bench_stream(workdir, stream_mb, repeat)
        if args.only_stream:
            return 0
        bench_large("local", local, size_mb, repeat)
        bench_contention("local", local, args.processes, commits)
    with radosgw() as spec:
        if spec is not None:
            bench_large("radosgw", spec, size_mb, min(repeat, 3))  # its memstore OSD holds 2 GiB in all
            bench_contention("radosgw", spec, args.processes, commits)
    print(f"bench_chain: load average {os.getloadavg()[0]:.2f} at the end (other work on the machine skews timings)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
