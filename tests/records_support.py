"""Shared helpers of the record-history tests, and the worker they run in separate processes.

``python records_support.py write ROOT`` writes the standard three-generation history under ``ROOT``;
``python records_support.py resume STATE OUT BATCHES`` resumes a sampler from the JSON in ``STATE``, draws
``BATCHES`` batches and saves them (and the final state) to the ``.npz`` file ``OUT``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from ml8s.records import RecencySampler, RecordSchema, RecordStore, load_sampler_state
from ml8s.store import LocalStore

PREFIX = "lines/churn/history/"
SCHEMA = RecordSchema.build(["age", "tenure", "spend"], "churned", ["no", "yes"])
SIZES = (40, 7, 25)
_TESTS = Path(__file__).resolve().parent


def make_rows(generation: int, rows: int, schema: RecordSchema = SCHEMA) -> NDArray[np.float32]:
    """Deterministic records: features from a seeded generator, targets cycling through the classes."""
    rng = np.random.default_rng(1000 + generation)
    out = rng.normal(size=(rows, schema.columns)).astype(np.float32)
    out[:, schema.n_features] = np.arange(rows) % len(schema.class_names)
    return out


def write_history(root: str, sizes: tuple[int, ...] = SIZES) -> RecordStore:
    history = RecordStore(LocalStore(root), PREFIX)
    for generation, rows in enumerate(sizes):
        history.append_generation(SCHEMA, make_rows(generation, rows))
    return history


def run_worker(*args: str) -> None:
    """Run this file's ``__main__`` in a fresh interpreter (the same ml8s, no state shared)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(_TESTS.parent), str(_TESTS)])}
    subprocess.run([sys.executable, str(Path(__file__)), *args], check=True, env=env, timeout=120)


def _resume(state_path: str, out_path: str, batches: int) -> None:
    sampler = RecencySampler.resume(load_sampler_state(Path(state_path).read_bytes()))
    drawn = [sampler.sample() for _ in range(batches)]
    np.savez(
        out_path,
        generations=np.stack([b.generations for b in drawn]),
        rows=np.stack([b.rows for b in drawn]),
        state=np.frombuffer(sampler.state().model_dump_json().encode(), dtype=np.uint8),
    )


if __name__ == "__main__":
    command, *rest = sys.argv[1:]
    if command == "write":
        write_history(rest[0])
    elif command == "resume":
        _resume(rest[0], rest[1], int(rest[2]))
    else:
        raise SystemExit(f"unknown command {command!r}")
