"""The feature matrix file written while training runs (ml8s.features.matrix_deferred): the same bytes as the
direct write, its failures named and raised in the training thread, nothing left when a run stops."""

from __future__ import annotations

import errno
import os
import threading
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from ml8s.data.dataset import load_dataset
from ml8s.data.fingerprint import fingerprint_local
from ml8s.errors import OutputError
from ml8s.features import matrix, matrix_deferred, matrix_mapped
from ml8s.features.prepared import Prepared, prepare
from ml8s.features.rules import fit_rules
from ml8s.identity.params import validate_params
from ml8s.identity.variables import canonical_config
from ml8s.inference.rules import FeatureRule


@pytest.fixture
def fitted(small_data: Path) -> tuple[Prepared, list[FeatureRule], dict[str, list[str]]]:
    params = validate_params(canonical_config({"DATA_ROOT": "/d", "TARGET_COLUMN": "churned"}))
    prepared = prepare(load_dataset(fingerprint_local(str(small_data))), params)
    rules, kept = fit_rules(prepared, params)
    return prepared, rules, kept


@pytest.fixture(autouse=True)
def small_groups(monkeypatch: pytest.MonkeyPatch) -> None:
    """Several row groups, and reads that cross them, on the small data."""
    monkeypatch.setattr(matrix, "ROW_GROUP", 97)
    monkeypatch.setattr(matrix_mapped, "_ROWS_PER_WRITE", 40)
    monkeypatch.setattr(matrix_deferred, "ROWS_PER_READ", 31)


def _write(path: Path, fitted: tuple[Prepared, list[FeatureRule], dict[str, list[str]]], *, hand: bool) -> None:
    prepared, rules, kept = fitted
    columns = {c.name: c for c in prepared.columns}
    matrix.write_encoded(str(path), rules, columns, kept, prepared.target, prepared.split, hand_over=hand)


@pytest.mark.parametrize("overlap", [False, True], ids=["rows written in turn", "rows written while encoding"])
def test_the_file_written_while_training_is_the_direct_write(
    fitted: tuple[Prepared, list[FeatureRule], dict[str, list[str]]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    overlap: bool,
) -> None:
    monkeypatch.setattr(matrix_deferred, "defers", lambda rows, group, train_rows: True)
    monkeypatch.setattr(matrix, "overlaps", lambda rows, features, train_rows: overlap)
    real = matrix_mapped.SplitRows.write

    def slow(*args: object) -> None:  # a group buffer encoded again before its rows were written shows here
        time.sleep(0.002)
        real(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(matrix_mapped.SplitRows, "write", slow)
    deferred = tmp_path / "deferred.parquet"
    with matrix_deferred.deferred_matrix():
        _write(deferred, fitted, hand=True)
        handed = matrix_mapped.map_matrix32(str(deferred))  # taken while the file may still be written
    direct = tmp_path / "direct.parquet"
    _write(direct, fitted, hand=False)
    assert deferred.read_bytes() == direct.read_bytes()
    assert len(fitted[0].target) > 3 * 97
    decoded = matrix_mapped.map_matrix32(str(direct))
    for field in ("features", "target", "split"):
        np.testing.assert_array_equal(getattr(handed, field), getattr(decoded, field))


def test_a_failed_write_is_named_and_raised_in_training(
    fitted: tuple[Prepared, list[FeatureRule], dict[str, list[str]]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full disk while the file is written: OUTPUT_ERROR naming it, at the next epoch's end and when training
    ends; the partial file is removed."""
    monkeypatch.setattr(matrix_deferred, "defers", lambda rows, group, train_rows: True)
    real = matrix_deferred.Writer._group
    failed = threading.Event()

    def full_disk(self: matrix_deferred.Writer, start: int, end: int, schema: pa.Schema) -> pa.Table:
        if start:
            failed.set()
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(self, start, end, schema)

    monkeypatch.setattr(matrix_deferred.Writer, "_group", full_disk)
    path = tmp_path / "feature_matrix.parquet"
    with pytest.raises(OutputError, match=r"feature matrix .*feature_matrix\.parquet.*No space left"):
        with matrix_deferred.deferred_matrix():
            _write(path, fitted, hand=True)
            matrix_mapped.map_matrix32(str(path))
            assert failed.wait(10)
            matrix_deferred._pending[0].thread.join()
            with pytest.raises(OutputError):
                matrix_deferred.raise_if_failed()  # an epoch's end
    assert not path.exists() and not matrix_deferred._pending


def test_a_run_that_fails_while_the_file_is_written_stops_the_write(
    fitted: tuple[Prepared, list[FeatureRule], dict[str, list[str]]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Training fails (or is interrupted) first: its error is the one raised, the thread stops at the next group
    and the partial file is removed."""
    monkeypatch.setattr(matrix_deferred, "defers", lambda rows, group, train_rows: True)
    real = matrix_deferred.Writer._group
    entered, release = threading.Event(), threading.Event()
    groups: list[int] = []

    def slow(self: matrix_deferred.Writer, start: int, end: int, schema: pa.Schema) -> pa.Table:
        groups.append(start)
        entered.set()
        release.wait(10)
        return real(self, start, end, schema)

    monkeypatch.setattr(matrix_deferred.Writer, "_group", slow)
    path = tmp_path / "feature_matrix.parquet"
    with pytest.raises(KeyboardInterrupt):
        with matrix_deferred.deferred_matrix():
            _write(path, fitted, hand=True)
            assert entered.wait(10)
            threading.Timer(0.2, release.set).start()
            raise KeyboardInterrupt
    assert groups == [0]  # stopped after the group in progress
    assert not path.exists() and not matrix_deferred._pending


def test_only_a_matrix_large_beside_its_training_rows_is_deferred() -> None:
    """At 2M demo rows a row group beside the training rows would raise training's peak past its goal; at 20M it
    is 6.5% of the resident training rows."""
    group = 1024 * 1024  # the file's row group (matrix.ROW_GROUP, made small for the other tests here)
    assert not matrix_deferred.defers(2_000_000, group, 1_600_000)
    assert matrix_deferred.defers(20_000_000, group, 16_000_000)
    assert not matrix_deferred.defers(20_000_000, group, 1_000_000)


def test_ml8s_run_publishes_the_file_written_while_training(
    fitted: tuple[Prepared, list[FeatureRule], dict[str, list[str]]],
    small_data: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The whole run of large data, with the file written while training runs and torch loaded beside the data
    steps: the file published once training ends is the direct write's, and no write is left behind."""
    import ml8s.pipeline.run as run
    from ml8s.pipeline import training_ahead

    monkeypatch.setattr(training_ahead, "AHEAD_BYTES", 0)
    loaded: list[bool] = []
    real_load = training_ahead._load
    monkeypatch.setattr(training_ahead, "_load", lambda: loaded.append(True) or real_load())

    monkeypatch.setattr(matrix, "ROW_GROUP", 1024 * 1024)  # the run's own row group
    started: list[str] = []
    real_start = matrix_deferred.start
    monkeypatch.setattr(matrix_deferred, "start", lambda writer: started.append(writer.path) or real_start(writer))
    monkeypatch.setattr(matrix_deferred, "defers", lambda rows, group, train_rows: True)
    env = {k: v for k, v in os.environ.items() if k != "FORCE_RERUN"}
    root = tmp_path / "root"
    env.update(DATA_ROOT=str(small_data), TARGET_COLUMN="churned", PIPELINE_ROOT_URI=str(root), EPOCHS="1")
    run.run_pipeline(env)
    assert len(started) == 1 and not matrix_deferred._pending
    assert loaded == [True]
    (published,) = root.glob("ml8s_training_runs/*/features/feature_matrix.parquet")
    direct = tmp_path / "direct.parquet"
    _write(direct, fitted, hand=False)
    assert published.read_bytes() == direct.read_bytes()


def test_scratch_rows_are_in_memory_only_when_they_fit_a_quarter_of_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """A matrix over a quarter of the memory available goes to an unnamed file under $TMPDIR (pages the kernel can
    evict); a refused memfd too. Either way nothing is left behind (no name)."""

    def kind(size: int) -> str:
        with matrix_mapped.scratch_file(size) as handle:
            handle.write(b"x" * 10)
            target = os.readlink(f"/proc/self/fd/{handle.fileno()}")
            return "memory" if target.startswith("/memfd:") else "disk"

    monkeypatch.setattr(matrix_mapped, "_available", lambda: 4000)
    assert kind(1000) == "memory"
    assert kind(1001) == "disk"
    monkeypatch.setattr(matrix_mapped, "_available", lambda: 0)  # /proc/meminfo unreadable
    assert kind(1) == "disk"

    def refused(*args: object) -> int:
        raise OSError(errno.EPERM, "memfd_create refused")

    monkeypatch.setattr(matrix_mapped, "_available", lambda: 4000)
    monkeypatch.setattr(os, "memfd_create", refused)
    assert kind(1) == "disk"
