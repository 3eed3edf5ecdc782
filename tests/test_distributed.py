"""TRAIN_WORLD_SIZE > 1 end to end: ``ml8s run`` trains in separate rank processes, each writing its shard.

Two runs of one configuration, each in its own ``ml8s run`` process, give byte-identical shards and weights;
each shard is written by a different process; ``ml8s verify`` runs the shard verifier; the world-size-2
checkpoint loads into world sizes 1 and 3 and predicts the held-out rows exactly as the native weights do.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import NamedTuple

import pytest
import safetensors.torch
import torch
from conftest import write_small_churn
from forked_cli import forked_ml8s

from ml8s.contract import layout
from ml8s.errors import ConfigError, LineageError
from ml8s.pipeline.bootstrap import bootstrap
from ml8s.shards import PlanConfig, TensorPiece, load_resharded, read_metadata
from ml8s.store import LocalStore
from ml8s.training.ddp import micro_batch
from ml8s.training.fit import model_family, read_training_data

PYFLYTE = str(Path(sys.executable).with_name("pyflyte"))
REPO = Path(__file__).resolve().parents[1]
# BATCH_SIZE 25 over 160 training rows: six full batches split 12/13 between two ranks, and a last one of 10
SMALL = {"EPOCHS": "1", "HIDDEN_UNITS": "16", "BATCH_SIZE": "25", "TEST_SIZE": "0.2"}
WROTE = re.compile(r"rank (\d+)/2 pid (\d+) wrote (model_shard_\d+\.shard)")


class Run(NamedTuple):
    root: Path
    run_id: str
    stderr: str
    env: dict[str, str]

    @property
    def dir(self) -> Path:
        return self.root / layout.RUNS_DIR / self.run_id


def env_for(data: Path, root: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("FORCE_RERUN", "STRICT_DATA_IDENTITY", "WARM_START")}
    env.update(DATA_ROOT=str(data), TARGET_COLUMN="churned", PIPELINE_ROOT_URI=str(root))
    env.update({**SMALL, **extra})
    return env


def ml8s(env: dict[str, str], *args: str, fresh: bool = False) -> subprocess.CompletedProcess[str]:
    """``ml8s *args`` in a fork of a warm interpreter (forked_cli), or in a fresh process when ``fresh``."""
    proc = forked_ml8s(args, env, timeout=300, fresh=fresh)
    if proc.returncode != 0:
        pytest.fail(f"ml8s {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
    return proc


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_small_churn(tmp_path_factory.mktemp("data") / "churn", rows=200, files=1)


@pytest.fixture(scope="module")
def runs(data: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Run, Run]]:
    """The same world-size-2 configuration run twice, at once, by two ``ml8s run`` processes (two roots)."""
    roots = [tmp_path_factory.mktemp(f"root{i}") for i in (1, 2)]
    envs = [env_for(data, root, TRAIN_WORLD_SIZE="2") for root in roots]
    with ThreadPoolExecutor(2) as pool:
        # the second in a fresh interpreter: its own hash seed, not the fork server's
        done = list(pool.map(lambda env, fresh: ml8s(env, "run", fresh=fresh), envs, (False, True)))
    first, second = (
        Run(root, json.loads(proc.stdout)["run_id"], proc.stderr, env)
        for root, proc, env in zip(roots, done, envs, strict=True)
    )
    yield first, second


def test_two_processes_give_byte_identical_shards_and_weights(runs: tuple[Run, Run]) -> None:
    first, second = runs
    assert first.run_id == second.run_id
    files = [*layout.sharded_artifacts(2), layout.MODEL_NATIVE, layout.MODEL_TRAINING_STATE, layout.METRICS]
    assert set(layout.sharded_artifacts(2)) == {
        "model/model.metadata.json",
        "model/model_shard_0.shard",
        "model/model_shard_1.shard",
    }
    for rel in files:
        assert (first.dir / rel).read_bytes() == (second.dir / rel).read_bytes(), rel
    recorded = json.loads((first.dir / layout.TRAINING_METADATA).read_text())["artifacts"]
    assert set(layout.sharded_artifacts(2)) <= set(recorded)


def test_each_shard_is_written_by_its_own_process(runs: tuple[Run, Run]) -> None:
    for run in runs:
        wrote = {m[3]: (int(m[1]), int(m[2])) for m in WROTE.finditer(run.stderr)}
        assert sorted(wrote) == ["model_shard_0.shard", "model_shard_1.shard"], run.stderr[-2000:]
        (rank0, pid0), (rank1, pid1) = wrote["model_shard_0.shard"], wrote["model_shard_1.shard"]
        assert (rank0, rank1) == (0, 1)
        assert pid0 != pid1
        assert "127.0.0.1:" in run.stderr  # the rendezvous is on the loopback interface


def test_the_shards_name_the_native_weights_and_hold_them(runs: tuple[Run, Run]) -> None:
    run = runs[0]
    store = LocalStore(str(run.dir))
    meta = read_metadata(store, layout.MODEL_SHARD_PREFIX)
    native = (run.dir / layout.MODEL_NATIVE).read_bytes()
    assert meta.checkpoint_id == hashlib.sha256(native).hexdigest()
    assert meta.world_size == 2 and [s.rank for s in meta.shards] == [0, 1]
    assert all(s.tensor_count > 0 for s in meta.shards)  # the plan gives each rank some of the weights


def test_verify_passes_and_reports_shard_findings(runs: tuple[Run, Run]) -> None:
    run = runs[1]
    report = json.loads(ml8s(run.env, "verify", run.run_id, "--json").stdout)
    checks = {c["name"]: c for c in report["checks"]}
    assert report["status"] == "PASS", [c for c in report["checks"] if c["status"] != "PASS"]
    assert "2 shards" in checks["shards"]["reason"]
    assert "model_shard_1.shard" in checks["chain"]["reason"]  # the chain payload holds the shards
    # a stray rank-7 shard and a flipped byte: each a named finding
    shard1 = run.dir / "model" / "model_shard_1.shard"
    original = shard1.read_bytes()
    stray = run.dir / "model" / "model_shard_7.shard"
    stray.write_bytes((run.dir / "model" / "model_shard_0.shard").read_bytes())
    shard1.write_bytes(original[:-1] + bytes([original[-1] ^ 1]))
    try:
        failed = forked_ml8s(["verify", run.run_id, "--json"], run.env, timeout=300)
    finally:
        stray.unlink()
        shard1.write_bytes(original)
    assert failed.returncode != 0
    shards = next(c for c in json.loads(failed.stdout)["checks"] if c["name"] == "shards")
    text = " ".join([shards["reason"], *shards["details"]])
    assert shards["status"] == "FAIL"
    for finding in ("stray_shard: model/model_shard_7.shard", "shard_checksum: model/model_shard_1.shard"):
        assert finding in text, text


@pytest.mark.parametrize("world", [1, 3])
def test_a_world_size_2_checkpoint_reshards_and_predicts_the_same(
    runs: tuple[Run, Run], data: Path, world: int
) -> None:
    run = runs[0]
    ctx = bootstrap(run.env)
    training = read_training_data(ctx.spec, str(run.dir / "features"), torch.device("cpu"))
    store = LocalStore(str(run.dir))
    plan = PlanConfig(split_bytes=64)  # split every tensor of 64+ bytes by rows across the target ranks
    pieces = [
        p for rank in range(world) for p in load_resharded(store, layout.MODEL_SHARD_PREFIX, world, rank, plan=plan)
    ]
    if world == 3:
        assert any(p.global_rows is not None for p in pieces)  # rows really were split
    model = model_family(ctx.spec).build(training.model_spec)
    model.load_state_dict(_assemble(pieces))
    native = model_family(ctx.spec).build(training.model_spec)
    native.load_state_dict(safetensors.torch.load_file(str(run.dir / layout.MODEL_NATIVE)))
    held_out = training.x[torch.from_numpy((training.split == 1).nonzero()[0])]
    model.eval()
    native.eval()
    with torch.no_grad():
        assert torch.equal(model(held_out), native(held_out))


def test_world_size_2_trains_the_same_model_as_one_process_up_to_summation_order(
    runs: tuple[Run, Run], data: Path, tmp_path: Path
) -> None:
    single = env_for(data, tmp_path / "root")
    run_id = json.loads(ml8s(single, "run").stdout)["run_id"]
    assert run_id != runs[0].run_id  # TRAIN_WORLD_SIZE is identity
    one = safetensors.torch.load_file(str(tmp_path / "root" / layout.RUNS_DIR / run_id / layout.MODEL_NATIVE))
    two = safetensors.torch.load_file(str(runs[0].dir / layout.MODEL_NATIVE))
    assert sorted(one) == sorted(two)
    for name in one:  # the same batches and the same mean gradients, summed in another order
        torch.testing.assert_close(one[name], two[name], rtol=1e-4, atol=1e-5)


def pyflyte_run(env: dict[str, str], home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``pyflyte run`` of the training workflow (local execution), with its own HOME and TMPDIR (Flyte cache)."""
    (home / "tmp").mkdir(parents=True)
    env = {k: v for k, v in env.items() if k != "TRAIN_WORLD_SIZE"} | {"HOME": str(home), "TMPDIR": str(home / "tmp")}
    cmd = [PYFLYTE, "run", "workflows/training.py", "training_pipeline", *args]
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)


def test_pyflyte_runs_the_ranks_as_a_pytorch_elastic_task(runs: tuple[Run, Run], tmp_path: Path) -> None:
    """The Flyte PyTorch plugin starts two worker processes; their shards equal those of ``ml8s run``."""
    root = tmp_path / "root"
    done = pyflyte_run(runs[0].env | {"PIPELINE_ROOT_URI": str(root)}, tmp_path / "home", "--train_world_size", "2")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    wrote = {m[3]: int(m[2]) for m in WROTE.finditer(done.stderr)}
    assert sorted(wrote) == ["model_shard_0.shard", "model_shard_1.shard"]
    assert wrote["model_shard_0.shard"] != wrote["model_shard_1.shard"]
    flyte_dir = root / layout.RUNS_DIR / runs[0].run_id
    for rel in [*layout.sharded_artifacts(2), layout.MODEL_NATIVE, layout.MODEL_TRAINING_STATE]:
        assert (flyte_dir / rel).read_bytes() == (runs[0].dir / rel).read_bytes(), rel


def test_the_workflow_refuses_a_world_size_it_has_no_task_for(
    data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bootstrap task (its function, in this process) refuses TRAIN_WORLD_SIZE=3 before any write."""
    from tasks.bootstrap import InvalidInputError, bootstrap_run
    from workflows.training import training_pipeline

    for name, value in env_for(data, tmp_path / "root").items():
        monkeypatch.setenv(name, value)
    inputs = {name: default for name, (_, default) in training_pipeline.python_interface.inputs_with_defaults.items()}
    with pytest.raises(InvalidInputError, match="TRAIN_WORLD_SIZE=3 has no training task in the Flyte workflow"):
        bootstrap_run.task_function(**(inputs | {"train_world_size": 3}))
    assert not (tmp_path / "root" / layout.RUNS_DIR).exists()


def test_chain_reproduce_retrains_the_sharded_version_byte_for_byte(runs: tuple[Run, Run]) -> None:
    """The chain payload (shards and metadata among it) is rebuilt from the data by new rank processes."""
    proc = ml8s(runs[0].env, "chain", "reproduce", "--from", "0")
    assert f"v1      run {runs[0].run_id}" in proc.stdout and "MATCH" in proc.stdout
    assert "1/1 versions reproduced byte for byte" in proc.stderr  # the summary line goes to stderr


def test_micro_batches_are_contiguous_slices_covering_the_batch() -> None:
    batch = torch.arange(10)
    slices = [micro_batch(batch, rank, 3).tolist() for rank in range(3)]
    assert slices == [[0, 1, 2], [3, 4, 5], [6, 7, 8, 9]]
    assert [micro_batch(torch.arange(2), rank, 3).tolist() for rank in range(3)] == [[], [0], [1]]


@pytest.mark.parametrize("value", ["0", "65", "two", "-1", "1.5"])
def test_bad_world_sizes_are_config_errors_naming_it(data: Path, tmp_path: Path, value: str) -> None:
    with pytest.raises(ConfigError, match=r"TRAIN_WORLD_SIZE=.* is invalid; expected an integer >= 1 and <= 64"):
        bootstrap(env_for(data, tmp_path / "root", TRAIN_WORLD_SIZE=value))
    assert not (tmp_path / "root" / layout.RUNS_DIR).exists()


def test_more_ranks_than_rows_per_batch_fails_at_bootstrap(data: Path, tmp_path: Path) -> None:
    env = env_for(data, tmp_path / "root", TRAIN_WORLD_SIZE="8", BATCH_SIZE="4")
    with pytest.raises(ConfigError, match="TRAIN_WORLD_SIZE=8 is larger than BATCH_SIZE=4"):
        bootstrap(env)
    proc = forked_ml8s(["run"], env, timeout=120)
    assert proc.returncode != 0 and "CONFIG_ERROR: TRAIN_WORLD_SIZE=8 is larger than BATCH_SIZE=4" in proc.stderr
    assert not (tmp_path / "root" / layout.RUNS_DIR).exists()  # nothing written


def test_a_warm_start_with_several_ranks_is_refused_before_any_write(data: Path, tmp_path: Path) -> None:
    env = env_for(data, tmp_path / "root", TRAIN_WORLD_SIZE="2", WARM_START="head")
    with pytest.raises(LineageError, match="WARM_START=head with TRAIN_WORLD_SIZE=2"):
        bootstrap(env)
    assert not (tmp_path / "root" / layout.RUNS_DIR).exists()


def _assemble(pieces: list[TensorPiece]) -> dict[str, torch.Tensor]:
    """Whole tensors from the pieces of every rank (row slices concatenated in row order)."""
    by_name: dict[str, list[TensorPiece]] = {}
    for piece in pieces:
        by_name.setdefault(piece.name, []).append(piece)
    return {
        name: torch.cat([p.tensor for p in sorted(parts, key=lambda p: p.row_start)])
        if len(parts) > 1
        else parts[0].tensor
        for name, parts in by_name.items()
    }


@pytest.mark.parametrize("value", ["\u00b2", "\uff11", "-1", ""])
def test_a_rank_variable_that_is_no_ascii_number_is_a_rank_error(value: str) -> None:
    """'²' passed str.isdigit and then failed int() (INTERNAL_ERROR); '１' was read as 1."""
    from ml8s.errors import RankError
    from ml8s.training.ddp import RankEnv

    env = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": value}
    with pytest.raises(RankError, match=r"WORLD_SIZE=.* expected a non-negative integer"):
        RankEnv.from_env(env)


def test_the_elastic_agent_looks_at_its_ranks_every_second() -> None:
    """flytekit's Elastic default (monitor_interval=5) kept the agent asleep up to 5 s after the ranks ended."""
    from tasks import train_ranks

    tasks = [getattr(train_ranks, f"train_{d}_ranks_{n}") for d in ("cpu", "gpu") for n in (2, 4, 8)]
    assert {t.task_config.monitor_interval for t in tasks} == {1}
