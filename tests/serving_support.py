"""Helpers of tests/test_serving_*.py; run as a script, the fresh consumer they start, and the storm's committer
(``storm_process``), forked by tests/process_support.py.

python tests/serving_support.py rebuild ROOT_URI CHAIN    a fresh consumer: every version's weights hash, one a line
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import torch
from deltas_support import make_weights, perturb

from ml8s.chain import ChainStore, CommitMeta, RetryPolicy
from ml8s.serving import DeltaConsumer, DeltaProducer, FollowOptions, follow
from ml8s.store import open_store

REPO = Path(__file__).resolve().parent.parent
IMPORTED_IN = os.getpid()  # a fork of the warm server finds the server's pid here (test_process_support.py)
STORM_POLICY = RetryPolicy(max_attempts=200, base_delay_s=0.02, max_delay_s=0.5, deadline_s=300)


def meta(tag: str, params: int = 0) -> CommitMeta:
    """A commit's identity: one run per ``tag``."""
    digest = hashlib.sha256(tag.encode()).hexdigest()
    return CommitMeta(
        run_id=digest[:12], full_config_hash=digest, artifact_root="test", architecture="test", parameter_count=params
    )


def chain_at(root_uri: str, name: str = "served") -> ChainStore:
    chain = ChainStore(open_store(root_uri), name)
    chain.init()
    return chain


def weights_series(seed: int, dtype: torch.dtype, count: int, fraction: float = 0.01) -> list[dict[str, torch.Tensor]]:
    """``count`` weights, each a ``fraction`` perturbation of the one before."""
    series = [make_weights(seed, dtype)]
    for hop in range(1, count):
        series.append(perturb(series[-1], fraction, seed=seed * 1000 + hop))
    return series


def follow_polls(chain: ChainStore, options: FollowOptions, polls: int = 3) -> list[str]:
    """The warnings of a forever ``follow`` stopped after ``polls`` polls (its sleep raises KeyboardInterrupt)."""
    warned: list[str] = []
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        if len(slept) == polls:
            raise KeyboardInterrupt  # ends the forever loop

    try:
        follow(chain, options, warn=warned.append, sleep=sleep)
    except KeyboardInterrupt:
        return warned
    raise AssertionError("the forever follow returned instead of polling")


def run_worker(*args: str, timeout: float = 240) -> str:
    done = subprocess.run(
        [sys.executable, str(Path(__file__)), *args], capture_output=True, text=True, timeout=timeout, cwd=REPO
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def _rebuild(root_uri: str, name: str) -> None:
    consumer = DeltaConsumer(ChainStore(open_store(root_uri), name))
    head = consumer.discover_latest_sync()
    assert head is not None
    known = None
    for counter in range(1, head.counter + 1):  # each hop from the one before: the fast path
        served = consumer.get_checkpoint_sync(counter, known=known)
        assert served is not None
        known = served.weights
        print(json.dumps([counter, str(served.info.payload_kind), served.info.weights_hash]))
    slow = consumer.get_checkpoint_sync(head.counter)  # and the head again from its FULL anchor
    assert slow is not None
    print(json.dumps([head.counter, "slow", slow.info.weights_hash]))


def storm_process(root_uri: str, name: str, idx: int, count: int, env: dict[str, str], log: str) -> None:
    """Storm committer ``idx``: commit ``count`` weights versions (small, sparse differences from one model).
    The target of a forked process (process_support): the given environment (the store's credentials), its output
    into ``log``; an exception ends it with exit code 1, its traceback in the log."""
    os.environ.clear()
    os.environ.update(env)
    with open(log, "w") as handle:
        os.dup2(handle.fileno(), 1)
        os.dup2(handle.fileno(), 2)
    chain = ChainStore(open_store(root_uri), name)
    producer = DeltaProducer(chain, interval=4, policy=STORM_POLICY)
    base = make_weights(7, torch.float32)  # every committer trains the same model: small, sparse differences
    for hop in range(count):
        producer.publish_sync(perturb(base, 0.02, seed=1000 * idx + hop), meta(f"storm-{idx}-{hop}"))


if __name__ == "__main__":
    verb, *rest = sys.argv[1:]
    if verb == "rebuild":
        _rebuild(rest[0], rest[1])
    else:
        raise SystemExit(f"unknown verb {verb!r}")
