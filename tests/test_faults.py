"""Faults (issue 24): MLflow's environment mutation, warm races and re-runs, read-only roots, a broken or
recreated MLflow database, and signals (SIGTERM, SIGINT, a parent killed under its ranks, $TMPDIR leftovers).

Every run is an ``ml8s run`` in its own process unless the test needs ``run_pipeline`` in this one. One
module-scoped lineage (a cold v1, a warm v2) is copied by each test that changes it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import numpy as np
import pytest
from conftest import write_small_churn
from forked_cli import ML8S, forked_ml8s
from test_lineage import add_generation

from ml8s.chain import ChainStore
from ml8s.cli.args import guarded
from ml8s.contract import layout
from ml8s.data.fingerprint import fingerprint_local
from ml8s.data.settled import leave_out, why_young, young_partitions
from ml8s.data.sources import restrict
from ml8s.errors import DataError, RecordsAppendError, StoreError
from ml8s.interrupts import Interrupted, signals_deferred, stopping_on_signals
from ml8s.lineage import read_training_state
from ml8s.store import LocalStore
from ml8s.tempdirs import owned_tempdir
from ml8s.training.launch import _run_ranks

CHAIN = "ml8s-model"
T = TypeVar("T")
DROP = ("FORCE_RERUN", "CHAIN_NAME", "WARM_START", "MLFLOW_TRACKING_URI", "WARM_START_ROOT_URI", "TMPDIR")
DROP += ("STALE_PARENT_POLICY", "RANDOM_SEED", "TEST_SIZE", "TRAIN_WORLD_SIZE", "PIPELINE_ROOT_URI", "DATA_ROOT")


def _env(data: Path, root: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in DROP}
    env.update(DATA_ROOT=str(data), TARGET_COLUMN="churned", PIPELINE_ROOT_URI=str(root))
    env.update(EPOCHS="2", HIDDEN_UNITS="16", BATCH_SIZE="64")
    env.update(extra)
    return env


def _ml8s(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return forked_ml8s(args, env, timeout=600)


def _ok(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    proc = _ml8s(env, *args)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def _head(root: Path) -> int:
    return ChainStore(LocalStore(str(root)), CHAIN).head().counter


def _one_named_line(proc: subprocess.CompletedProcess[str], code: str) -> str:
    errors = [line for line in proc.stderr.splitlines() if line.startswith("ml8s: ")]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert len(errors) == 1 and errors[0].startswith(f"ml8s: {code}: "), proc.stderr[-3000:]
    return errors[0]


class Lineage:
    def __init__(self, data: Path, root: Path, runs: list[str]) -> None:
        self.data, self.root, self.runs = data, root, runs

    def copy(self, where: Path) -> tuple[Path, Path]:
        data, root = where / "data", where / "root"
        shutil.copytree(self.data, data)
        shutil.copytree(self.root, root)
        return data, root


@pytest.fixture(scope="module")
def lineage() -> Iterator[Lineage]:
    """v1 cold on generation 0, v2 warm-started from it on generation 1 (root-default MLflow database), in a
    directory another user may read (the read-only test reads it as nobody). Tests that write copy it; a copy
    has another DATA_ROOT, so its runs have other identities than the original's."""
    base = Path(tempfile.mkdtemp(prefix="faults-lineage-"))
    base.chmod(0o755)
    data, root = write_small_churn(base / "data", rows=300, files=1), base / "root"
    runs = [json.loads(_ok(_env(data, root), "run").stdout)["run_id"]]
    add_generation(data, 1)
    runs.append(json.loads(_ok(_env(data, root, WARM_START="head"), "run").stdout)["run_id"])
    yield Lineage(data, root, runs)
    shutil.rmtree(base)


# -- 3: the process environment -------------------------------------------------------------------


def test_run_pipeline_leaves_the_environment_alone_and_a_retry_registers_where_the_first_would(
    lineage: Lineage, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``ml8s run`` passes os.environ itself: registering must not delete MLFLOW_TRACKING_URI from it, or the
    retry after a lost warm race registers in the root's default database instead."""
    import ml8s.pipeline.run as run

    data, root = lineage.copy(tmp_path)
    add_generation(data, 2)
    elsewhere = tmp_path / "registry" / "mlflow.db"
    elsewhere.parent.mkdir()
    uri = f"sqlite:///{elsewhere}"
    for key in DROP:
        monkeypatch.delenv(key, raising=False)
    for key, value in _env(data, root, WARM_START="head", MLFLOW_TRACKING_URI=uri).items():
        monkeypatch.setenv(key, value)
    before = dict(os.environ)
    real, calls = run.chain_commit, []

    def interloper(ctx: object, store: object, *args: object) -> object:
        if not calls:  # another trainer wins v3 between this run's registration and its commit
            _ok(_env(data, root, WARM_START="head", EPOCHS="3", MLFLOW_TRACKING_URI=uri), "run")
        calls.append(1)
        return real(ctx, store, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(run, "chain_commit", interloper)
    manifest = json.loads(run.run_pipeline(os.environ))
    assert dict(os.environ) == before
    assert len(calls) == 2 and _head(root) == 4
    assert manifest["mlflow"]["tracking_uri"] == uri, manifest["mlflow"]


# -- 4: warm races and split changes --------------------------------------------------------------


def test_racers_appending_the_same_generation_to_the_history_both_go_on(tmp_path: Path) -> None:
    """Two warm starts from one parent encode the same new generation; the one whose history swap loses
    re-reads the history, finds its generation there byte for byte, and goes on (no RECORDS_APPEND_ONLY)."""
    from ml8s.contract.training_state import Generation
    from ml8s.lineage import EncodedGeneration, sync_history
    from ml8s.records import RecordSchema, RecordStore

    schema = RecordSchema.build(["a", "b"], "y", ["no", "yes"])
    rng = np.random.default_rng(0)
    encoded = EncodedGeneration(
        0, rng.random((40, 2), dtype=np.float32), rng.integers(0, 2, 40), np.zeros(40, dtype=np.int8)
    )
    mine, theirs = (RecordStore(LocalStore(str(tmp_path)), "lineage/history") for _ in range(2))
    real_check = RecordStore._check_unchanged
    raced: list[int] = []

    def racer_first(self: RecordStore, token: str | None, number: int) -> None:
        if self is mine and not raced:  # the other racer swaps the index while this one spooled its rows
            raced.append(1)
            theirs.append_generation(schema, encoded.records(), generation=0)
        real_check(self, token, number)

    mine._check_unchanged = racer_first.__get__(mine)  # type: ignore[method-assign]
    done = sync_history(mine, schema, {0: encoded}, [Generation(index=0, partition="gen-0", files=["f"])])
    assert raced and done[0].records_sha256 == theirs.index().generations[0].sha256  # type: ignore[union-attr]
    other = EncodedGeneration(0, encoded.x + 1, encoded.y, encoded.split)
    with pytest.raises(RecordsAppendError, match="never rewritten"):  # other bytes stay refused
        sync_history(mine, schema, {0: other}, [Generation(index=0, partition="gen-0", files=["f"])])


def test_rows_of_an_uncommitted_generation_name_the_history_to_delete_and_a_rebuild_heals(tmp_path: Path) -> None:
    """A run appended its new generation (gen-002.csv while it was still being written) and was killed before
    its commit; the file then grew. Every later warm start from that parent failed RECORDS_APPEND_ONLY on those
    rows, forever, saying nothing of what to do. The error says no version recorded them and names the history
    to delete; a rebuilt history takes the new rows (the parent's generations checked against its sha256s)."""
    from ml8s.contract.training_state import Generation
    from ml8s.lineage import EncodedGeneration, sync_history
    from ml8s.records import RecordSchema, RecordStore

    schema = RecordSchema.build(["a", "b"], "y", ["no", "yes"])
    rng = np.random.default_rng(0)

    def encoded(index: int, rows: int) -> EncodedGeneration:
        return EncodedGeneration(
            index, rng.random((rows, 2), dtype=np.float32), rng.integers(0, 2, rows), np.zeros(rows, dtype=np.int8)
        )

    history = RecordStore(LocalStore(str(tmp_path)), "lineage/history")
    old, partial, complete = encoded(0, 30), encoded(1, 10), encoded(1, 20)
    (recorded,) = sync_history(history, schema, {0: old}, [Generation(index=0, partition="gen-000.csv", files=[])])
    new = Generation(index=1, partition="gen-002.csv", files=[])
    sync_history(history, schema, {1: partial}, [recorded, new])  # the killed run's append
    with pytest.raises(RecordsAppendError) as caught:
        sync_history(history, schema, {1: complete}, [recorded, new])
    where = f"file://{tmp_path}/lineage/history/"
    assert "no version of the chain recorded generation 1 (gen-002.csv)" in caught.value.message
    assert f"delete the history {where} (every file under it) and run again" in caught.value.message
    shutil.rmtree(tmp_path / "lineage" / "history")  # what it says; the features step then re-encodes all
    done = sync_history(history, schema, {0: old, 1: complete}, [recorded, new])
    assert done[0] == recorded and done[1].records == 20
    with pytest.raises(RecordsAppendError) as kept:  # a generation a version recorded: its own, unchanged error
        sync_history(history, schema, {1: partial}, [recorded, done[1]])
    assert "no version" not in kept.value.message


@contextlib.contextmanager
def _producer_keeping_times(path: Path, stamp: float) -> Iterator[None]:
    """A producer still writing ``path`` that keeps its source's times (``cp -p``, ``rsync -a``): its mtime is
    ``stamp``, hours old, all along, while the kernel sets its ctime at each of the producer's writes."""
    done = threading.Event()

    def keep_stamping() -> None:
        while not done.is_set():
            os.utime(path, (stamp, stamp))
            done.wait(0.05)

    producer = threading.Thread(target=keep_stamping, name="producer", daemon=True)
    producer.start()
    try:
        yield
    finally:
        done.set()
        producer.join()


def test_a_partition_still_being_written_is_left_for_the_next_cycle(lineage: Lineage, tmp_path: Path) -> None:
    """A cycle ran while the producer was writing gen-003.csv: it trained on the half written, recorded the file,
    and once the write finished every later cycle stopped with LINEAGE_DATA_CHANGED (the file had changed under a
    committed version). With DATA_QUIET_SECONDS a partition with a file modified within that period is left out:
    the cycle trains on what settled, and the next one, after the write, takes the whole file. The producer keeps
    its source's times (``rsync -a``): gen-003.csv's mtime says two hours old while it is written, and the cycle
    took it half written when only the mtime was read."""
    quiet = 3  # real seconds: a file's ctime cannot be set back, so settling takes the time itself
    data, root = lineage.copy(tmp_path)  # its generations 0 and 1 were written a moment ago: held, so taken
    stamp = time.time() - 7200
    os.utime(add_generation(data, 2), (stamp, stamp))
    writing = add_generation(data, 3)
    full = writing.read_bytes()
    writing.write_bytes(full[: full.index(b"\n", len(full) // 2) + 1])  # the producer's first half, being written
    env = _env(data, root, WARM_START="head", DATA_QUIET_SECONDS=str(quiet))
    with _producer_keeping_times(writing, stamp):
        time.sleep(quiet + 0.5)  # gen-002.csv settles; gen-003.csv is written to all along
        during = _ok(env, "run")
    assert "left out gen-003.csv" in during.stderr, during.stderr[-3000:]
    chain = ChainStore(LocalStore(str(root)), CHAIN)

    def partitions(counter: int) -> list[tuple[str, int | None]]:
        payload = chain.fetch_payload(chain.get(counter), layout.PAYLOAD_TRAINING_STATE)
        return [(g.partition, g.records) for g in read_training_state(payload, f"v{counter}").generations]

    assert _head(root) == 3 and [p for p, _ in partitions(3)][-1] == "gen-002.csv"
    writing.write_bytes(full)  # the write finished, and nobody touched the file since
    os.utime(writing, (stamp, stamp))
    time.sleep(quiet + 0.5)
    _ok(env, "run")
    assert _head(root) == 4 and partitions(4)[:-1] == partitions(3)
    assert partitions(4)[-1] == ("gen-003.csv", 96)  # every row of the whole file but the held-out 24


def test_a_file_with_an_old_mtime_is_young_by_its_ctime(tmp_path: Path) -> None:
    """``cp -p``, ``rsync -a`` and ``touch -d`` give a file being written its source's (old) mtime: the partition
    looked settled and a run took it half written. Its ctime, which the kernel sets and no user can, says it is new."""
    (tmp_path / "gen-000.csv").write_text("x,y\n1,a\n")
    os.utime(tmp_path / "gen-000.csv", (1000.0, 1000.0))  # 1970: as old as a time gets
    fingerprint = fingerprint_local(str(tmp_path))
    now = time.time()
    young = young_partitions(fingerprint, 3600, now=now)
    assert list(young) == ["gen-000.csv"] and 0 <= young["gen-000.csv"] < 3600, young
    assert young_partitions(fingerprint, 3600, now=now + 3600 + 60) == {}  # settled once quiet that long
    single = fingerprint_local(str(tmp_path / "gen-000.csv"))  # DATA_ROOT a single file: the same rule
    assert list(young_partitions(single, 3600, now=now)) == ["gen-000.csv"]


def test_a_partition_holding_a_young_file_is_left_out_whole(tmp_path: Path) -> None:
    """A folder partition with one file still being written is left out whole; DATA_QUIET_SECONDS=0 takes all."""
    (tmp_path / "gen-000.csv").write_text("x,y\n1,a\n")
    folder = tmp_path / "2026-11-24"
    folder.mkdir()
    for name in ("part-0.csv", "part-1.csv"):
        (folder / name).write_text("x,y\n2,b\n")
    base = float(int(time.time()) + 100)  # after every ctime here: an mtime before it counts as this time
    for path in (tmp_path / "gen-000.csv", folder / "part-0.csv"):
        os.utime(path, (1000.0, 1000.0))
    os.utime(folder / "part-1.csv", (base + 3500.0, base + 3500.0))
    fingerprint = fingerprint_local(str(tmp_path))
    young = young_partitions(fingerprint, 3600, now=base + 5000.0)
    assert young == {"2026-11-24": 1500.0}  # its newest file's age
    assert leave_out(fingerprint, young, 3600) == restrict(fingerprint, ["gen-000.csv"])
    assert young_partitions(fingerprint, 0, now=base + 5000.0) == {}
    assert young_partitions(fingerprint, 3600, now=base + 7200.0) == {}  # settled since
    everything = young_partitions(fingerprint, 3600, now=base + 3500.0)
    with pytest.raises(DataError) as caught:
        leave_out(fingerprint, everything, 3600)
    assert "DATA_QUIET_SECONDS=3600 s ago (2026-11-24, gen-000.csv): still being written" in caught.value.message


def test_a_file_modified_ahead_of_this_machine_s_clock_is_said_to_be_so(tmp_path: Path) -> None:
    """A file stamped ahead of this machine's clock (a producer's clock ahead) is left out until DATA_QUIET_SECONDS
    after its time, as a file being written; the run log and the error said 'modified less than 3600 s ago (still
    being written)' and 'run again later' for a file stamped a year ahead, which no later run for a year takes."""
    (tmp_path / "gen-000.csv").write_text("x,y\n1,a\n")
    now = float(int(time.time()) + 100)  # after its ctime
    os.utime(tmp_path / "gen-000.csv", (now + 365 * 86400, now + 365 * 86400))
    fingerprint = fingerprint_local(str(tmp_path))
    young = young_partitions(fingerprint, 3600, now=now)
    assert young == {"gen-000.csv": -365 * 86400.0}
    assert why_young(young["gen-000.csv"], 3600) == (
        "holds a file modified 31536000 s after this machine's time (a clock ahead, the producer's or this "
        "one's; check both): it counts as still being written until DATA_QUIET_SECONDS=3600 s after that time"
    )
    assert why_young(5.0, 3600) == (
        "holds a file modified less than DATA_QUIET_SECONDS=3600 s ago (still being written)"
    )
    with pytest.raises(DataError) as caught:
        leave_out(fingerprint, young, 3600)
    assert "(gen-000.csv): still being written; gen-000.csv by 31536000 s ahead of this machine's time" in (
        caught.value.message
    )


def test_nothing_new_names_the_partition_left_out_as_still_being_written(lineage: Lineage, tmp_path: Path) -> None:
    """A warm start whose one new partition is still being written has nothing new: another configuration than the
    head's stopped with LINEAGE_NOTHING_NEW 'expected a new generation (a new top-level file or folder) to train
    on' beside the one that had arrived, and no line said it was left out (the run's log is not written)."""
    data, root = lineage.copy(tmp_path)
    add_generation(data, 2)  # just written: young
    proc = _ml8s(_env(data, root, WARM_START="head", DATA_QUIET_SECONDS="3600", EPOCHS="3"), "run")
    line = _one_named_line(proc, "LINEAGE_NOTHING_NEW")
    assert line.endswith(
        "; new partitions left out, a run after they settle takes them: gen-002.csv (it holds a file modified less "
        "than DATA_QUIET_SECONDS=3600 s ago (still being written))"
    ), line
    assert _head(root) == 2


@pytest.mark.parametrize("change", [{"RANDOM_SEED": "7"}, {"TEST_SIZE": "0.3"}], ids=["seed", "test-size"])
def test_a_warm_start_on_another_split_is_refused_before_any_write(
    lineage: Lineage, tmp_path: Path, change: dict[str, str]
) -> None:
    """RANDOM_SEED and TEST_SIZE choose each generation's held-out rows. A warm start on another split trained
    (and was promoted) with a holdout holding rows the parent, and the weights it continued, trained on: the
    promotion rule compared the two models on rows both had learned. It is refused, naming both splits."""
    data, root = lineage.copy(tmp_path)
    add_generation(data, 2)
    runs = sorted(p.name for p in (root / "ml8s_training_runs").iterdir())
    proc = _ml8s(_env(data, root, WARM_START="head", **change), "run")
    line = _one_named_line(proc, "LINEAGE_ERROR")
    assert proc.returncode == 1 and "a warm start keeps its parent's split" in line, line
    assert "RANDOM_SEED=42 and TEST_SIZE=0.2" in line and "cold start (WARM_START='')" in line, line
    assert _head(root) == 2 and sorted(p.name for p in (root / "ml8s_training_runs").iterdir()) == runs
    assert not list((root / "ml8s_lineages").glob("*/history-*/gen-002.f32"))


# -- 5: a warm re-run after its commit landed -----------------------------------------------------


def test_a_warm_rerun_of_the_head_returns_its_manifest_and_never_trains_on_nothing_new(lineage: Lineage) -> None:
    data, root = lineage.data, lineage.root  # in place: a copy's DATA_ROOT would be another identity
    runs = sorted(p.name for p in (root / "ml8s_training_runs").iterdir())
    again = _ok(_env(data, root, WARM_START="head"), "run")
    assert json.loads(again.stdout)["run_id"] == lineage.runs[1] and _head(root) == 2
    other = _ml8s(_env(data, root, WARM_START="head", EPOCHS="3"), "run")
    assert other.returncode == 1 and "v2" in _one_named_line(other, "LINEAGE_NOTHING_NEW")
    assert _head(root) == 2 and sorted(p.name for p in (root / "ml8s_training_runs").iterdir()) == runs


# -- 6: read-only roots ---------------------------------------------------------------------------


@pytest.fixture
def read_only(lineage: Lineage) -> Iterator[tuple[Path, Path, list[str]]]:
    """The lineage, read-only to the commands: as root they run as nobody (a root-owned tree is read-only to
    it); otherwise the tree is made read-only with chmod meanwhile (a copy would verify as moved)."""
    root = lineage.root
    prefix = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"] if os.geteuid() == 0 else []
    if not prefix:
        for path in [root, *root.rglob("*")]:
            path.chmod(path.stat().st_mode & ~0o222)
    try:
        yield lineage.data, root, prefix
    finally:
        if not prefix:
            for path in [root, *root.rglob("*")]:
                path.chmod(path.stat().st_mode | 0o200)


def test_read_only_commands_and_a_gate_hit_work_on_a_read_only_root(
    lineage: Lineage, read_only: tuple[Path, Path, list[str]]
) -> None:
    data, root, prefix = read_only
    out = Path(tempfile.mkdtemp(prefix="faults-out-"))
    out.chmod(0o777)
    env = _env(data, root, HOME=str(out), TMPDIR=str(out))

    def as_reader(*args: str, **extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*prefix, ML8S, *args], env={**env, **extra}, cwd=out, capture_output=True, text=True, timeout=600
        )

    try:
        for args in (
            ("verify", lineage.runs[1]),
            ("chain", "verify", "--root", str(root)),
            ("chain", "log", "--root", str(root)),
            ("audit", "bundle", lineage.runs[1], "-o", str(out / "bundle.tar.gz")),
        ):
            proc = as_reader(*args)
            assert proc.returncode == 0 and "Traceback" not in proc.stderr, (args, proc.stdout[-2000:], proc.stderr)
        cold = as_reader("run")  # another identity: it would train, and says why it cannot
        assert cold.returncode == 1 and "not writable" in _one_named_line(cold, "CONFIG_ERROR")
        hit = as_reader("run", WARM_START="head")
        assert hit.returncode == 0, hit.stderr[-3000:]
        assert json.loads(hit.stdout)["run_id"] == lineage.runs[1]
    finally:
        shutil.rmtree(out)


# -- 7: a broken or recreated MLflow database -----------------------------------------------------


def test_a_malformed_then_recreated_mlflow_database_is_named_and_runs_list_says_unconfirmed(tmp_path: Path) -> None:
    data, root = write_small_churn(tmp_path / "data", rows=300, files=1), tmp_path / "root"
    env = _env(data, root)
    first = json.loads(_ok(env, "run").stdout)["run_id"]
    database = root / "mlflow.db"
    good = database.read_bytes()
    database.write_bytes(good[:100] + b"\xa5" * (len(good) - 100))  # the header survives, every page is garbage
    broken = _ml8s(env, "verify", first)
    assert broken.returncode == 1 and "Traceback" not in broken.stdout + broken.stderr, broken.stderr[-3000:]
    assert "FAIL  mlflow" in broken.stdout and "REGISTRY_ERROR" in broken.stdout, broken.stdout

    database.unlink()  # the next run recreates it and takes version 1 again
    new = json.loads(_ok(_env(data, root, EPOCHS="3"), "run").stdout)
    assert new["mlflow"]["model_version"] == "1"
    old = _ml8s(env, "verify", first)
    assert old.returncode == 1 and "Traceback" not in old.stderr
    assert "REGISTRY_REPLACED" in old.stdout and "not found" not in old.stdout, old.stdout
    listed = {r["run_id"]: r for r in json.loads(_ok(env, "runs", "list", "--json").stdout)}
    assert listed[new["run_id"]]["registration"] == "confirmed"
    assert listed[first]["registration"].startswith("unconfirmed: REGISTRY_REPLACED"), listed[first]
    table = _ok(env, "runs", "list").stdout
    assert f"{first}: registration unconfirmed" in table and "UNCONFIRMED" in table


# -- 8: signals, orphaned ranks, $TMPDIR ----------------------------------------------------------


def _children(pid: int) -> list[int]:
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            found += [int(p) for p in (task / "children").read_text().split()]
        except FileNotFoundError:  # a thread that ended between the listing and the read
            continue
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


def _wait_until(predicate: object, limit_s: float = 120.0) -> None:
    """Poll until ``predicate()`` holds (bounded, so a broken fix fails the test instead of hanging it)."""
    deadline = time.monotonic() + limit_s
    while not predicate() and time.monotonic() < deadline:  # type: ignore[operator]
        time.sleep(0.05)


def _start_ranked(env: dict[str, str]) -> tuple[subprocess.Popen[str], list[int]]:
    """An ``ml8s run`` with 2 ranks, once both ranks are running."""
    proc = subprocess.Popen([ML8S, "run"], env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    _wait_until(lambda: proc.poll() is not None or len(_children(proc.pid)) >= 2)
    ranks = _children(proc.pid) if proc.poll() is None else []
    assert len(ranks) == 2, "the run ended before its ranks started"
    return proc, ranks


def _ml8s_temp(tmp: Path) -> list[str]:
    return sorted(p.name for p in tmp.iterdir() if p.name.startswith("ml8s-"))


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)], ids=["term", "int"])
def test_a_signal_stops_a_run_cleanly(tmp_path: Path, signum: int, code: int) -> None:
    data, tmp = write_small_churn(tmp_path / "data", rows=3000, files=1), tmp_path / "tmp"
    tmp.mkdir()
    env = _env(data, tmp_path / "root", TMPDIR=str(tmp), TRAIN_WORLD_SIZE="2", EPOCHS="200")
    proc, ranks = _start_ranked(env)
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == code, err[-3000:]
    assert "Traceback" not in err and err.strip().splitlines()[-1].startswith("ml8s: INTERRUPTED: "), err[-3000:]
    assert not any(_alive(rank) for rank in ranks)
    assert _ml8s_temp(tmp) == []


def _signal_self_after(make: Callable[..., T]) -> Callable[..., T]:
    """``make``, then a SIGINT to this process before it returns: the signal lands in the gap between
    creating something and the caller recording it, the gap a loaded machine stretches."""

    def made(*args: object, **kwargs: object) -> T:
        thing = make(*args, **kwargs)
        os.kill(os.getpid(), signal.SIGINT)
        return thing

    return made


def test_a_signal_while_ranks_start_stops_every_rank_started(tmp_path: Path) -> None:
    assert threading.current_thread() is threading.main_thread()
    started: list[subprocess.Popen[bytes]] = []

    def start(rank: int) -> subprocess.Popen[bytes]:
        started.append(subprocess.Popen(["sleep", "600"]))
        return started[-1]

    def start_then_signal(rank: int) -> subprocess.Popen[bytes]:
        return (_signal_self_after(start) if rank == 1 else start)(rank)

    with pytest.raises(Interrupted), stopping_on_signals():
        _run_ranks(2, start_then_signal, str(tmp_path))
    assert len(started) == 2  # rank 1 was started before the signal was raised ...
    assert [proc.poll() for proc in started] == [-signal.SIGTERM] * 2  # ... and both were stopped and reaped


def test_a_signal_while_a_temp_directory_is_made_removes_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert threading.current_thread() is threading.main_thread()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(tempfile, "mkdtemp", _signal_self_after(tempfile.mkdtemp))
    with pytest.raises(Interrupted), stopping_on_signals(), owned_tempdir("ml8s-probe-"):
        pytest.fail("the body ran: the signal was not raised where the directory was made")
    assert sorted(tmp_path.iterdir()) == []


def test_signals_deferred_raises_the_held_signal_once_on_leaving() -> None:
    with stopping_on_signals():
        with signals_deferred():
            pass  # no signal: nothing raised
        with pytest.raises(Interrupted) as raised:
            with signals_deferred():
                with signals_deferred():
                    os.kill(os.getpid(), signal.SIGTERM)
                    time.sleep(0.01)  # the handler has run by now; held, not raised, at both depths
                reached = True
        assert reached and raised.value.exit_code == 143
    with pytest.raises(Interrupted) as replaced, stopping_on_signals(), signals_deferred():
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.01)
        raise ValueError("the body failed after the signal")
    assert replaced.value.exit_code == 130 and isinstance(replaced.value.__context__, ValueError)


@pytest.mark.parametrize("becomes", [ImportError, StoreError], ids=["c-extension-import", "wrapped"])
def test_a_signal_that_code_turned_into_its_own_error_still_exits_as_interrupted(
    becomes: type[Exception], capsys: pytest.CaptureFixture[str]
) -> None:
    """A SIGTERM while `ml8s run` imported onnx or numpy (`[run] loading onnx and MLflow`) came out of the C
    extension's init as `ImportError: import numpy failed`, without the interrupt as its cause: the run said
    INTERNAL_ERROR, "an ml8s bug", and exited 2 instead of INTERRUPTED and 143."""

    def handler(args: argparse.Namespace) -> int:
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(1)
        except Interrupted:
            raise becomes("initialization failed") from None  # what numpy's import makes of it
        return 0

    assert guarded(handler)(argparse.Namespace()) == 143
    assert capsys.readouterr().err.splitlines() == [
        "ml8s: INTERRUPTED: stopped by SIGTERM; its temp files removed, its child processes stopped"
    ]

    def failing(args: argparse.Namespace) -> int:
        raise becomes("a real failure, no signal")

    # the earlier signal is not counted: each command starts without one
    assert guarded(failing)(argparse.Namespace()) == (2 if becomes is ImportError else 1)
    assert "INTERRUPTED" not in capsys.readouterr().err


def test_a_closed_terminal_stops_like_a_signal_unless_nohup_ignores_it() -> None:
    # SIGHUP (an ssh session that dropped) used to end the process at once: no unwinding, temp files left.
    previous = signal.signal(signal.SIGHUP, signal.SIG_DFL)  # a terminal's default, even if pytest runs under nohup
    try:
        with pytest.raises(Interrupted) as raised, stopping_on_signals():
            os.kill(os.getpid(), signal.SIGHUP)
            time.sleep(0.01)
        assert raised.value.exit_code == 129 and raised.value.name == "SIGHUP"
        signal.signal(signal.SIGHUP, signal.SIG_IGN)  # as `nohup` leaves it
        with stopping_on_signals():
            os.kill(os.getpid(), signal.SIGHUP)
            time.sleep(0.01)  # ignored: nothing raised
            assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGHUP, previous)


def test_ranks_die_with_their_parent_and_tmp_cleanup_removes_what_it_left(tmp_path: Path) -> None:
    data, tmp, root = write_small_churn(tmp_path / "data", rows=3000, files=1), tmp_path / "tmp", tmp_path / "root"
    tmp.mkdir()
    env = _env(data, root, TMPDIR=str(tmp), TRAIN_WORLD_SIZE="2", EPOCHS="200")
    proc, ranks = _start_ranked(env)
    proc.kill()  # the parent only: its ranks are not in the signal's way
    proc.communicate(timeout=60)
    _wait_until(lambda: not any(_alive(rank) for rank in ranks))
    assert not any(_alive(rank) for rank in ranks)
    left = _ml8s_temp(tmp)
    assert any(name.startswith("ml8s-ranks-") for name in left), left
    live = subprocess.Popen(  # a live process's temp directory is never removed
        [sys.executable, "-c", "import sys,time\nfrom ml8s.tempdirs import owned_tempdir\n"
         "with owned_tempdir('ml8s-live-') as d:\n print(d, flush=True)\n time.sleep(600)"],
        env={**env, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert live.stdout is not None
        kept = Path(live.stdout.readline().strip())
        cleaned = _ok(env, "tmp-cleanup", "--root", str(root))
        assert _ml8s_temp(tmp) == [kept.name], cleaned.stdout
        assert all(f"removed {tmp / name} (its ml8s process has ended)" in cleaned.stdout for name in left)
    finally:
        live.kill()
        live.wait()
