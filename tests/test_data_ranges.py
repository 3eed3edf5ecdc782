"""Values that pass the grammar but not the run (defect 5), and unusable pipeline roots (defect 7).

A non-finite number in the data, a seed numpy cannot take, a learning rate that overflows, a network
too big to allocate, a pipeline root that is a file or read-only: each one named error, one line,
naming the variable or the file, column and row, before anything is written.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import write_small_churn
from forked_cli import forked_ml8s

from ml8s.data import dataset
from ml8s.errors import ConfigError, DataError, Ml8sError
from ml8s.identity import params as params_module
from ml8s.identity.settings import PlatformSettings
from ml8s.pipeline import preflight
from ml8s.pipeline.bootstrap import bootstrap
from ml8s.pipeline.run import run_pipeline

HEADER = "customer_id,tenure,monthly_charges,plan,auto_pay,churned"


def _env(data: Path, root: Path, **extra: str) -> dict[str, str]:
    env = {"DATA_ROOT": str(data), "TARGET_COLUMN": "churned", "PIPELINE_ROOT_URI": str(root), "EPOCHS": "1"}
    env.update(extra)
    return env


def _files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()) if root.is_dir() else []


def _fails(env: dict[str, str], error: type[Ml8sError], *needles: str) -> str:
    with pytest.raises(error) as caught:
        run_pipeline(env)
    message = str(caught.value)
    assert message.startswith(f"{caught.value.code}: ") and "\n" not in message
    for needle in needles:
        assert needle in message, f"{needle!r} not in {message!r}"
    return message


@pytest.mark.parametrize("cell", ["1e999", "-1e999", "inf", "-Infinity", " INF "])
def test_non_finite_cell_names_file_column_and_row(tmp_path: Path, cell: str) -> None:
    data = write_small_churn(tmp_path / "data", rows=60, files=2)
    lines = (data / "part-001.csv").read_text().splitlines()
    cells = lines[4].split(",")
    cells[2] = cell  # monthly_charges, data row 4 of part-001.csv
    lines[4] = ",".join(cells)
    (data / "part-001.csv").write_text("\n".join(lines) + "\n")
    root = tmp_path / "root"

    _fails(_env(data, root), DataError, "part-001.csv", "'monthly_charges'", "data row 4", repr(cell.strip()), "finite")
    assert _files(root) == []


@pytest.mark.parametrize("threads", [1, 2])
def test_of_two_non_finite_columns_the_first_by_name_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, threads: int
) -> None:
    """Columns are typed over all files two at a time; with two bad columns the error is the one typing them one
    after the other gives: the first column by name (monthly_charges before tenure), wherever its bad cell is."""
    monkeypatch.setattr(dataset, "COLUMN_THREADS", threads)
    data = write_small_churn(tmp_path / "data", rows=60, files=2)
    for name, column, row in (("part-000.csv", 1, 2), ("part-001.csv", 2, 5)):  # tenure, then monthly_charges
        lines = (data / name).read_text().splitlines()
        cells = lines[row].split(",")
        cells[column] = "1e999"
        lines[row] = ",".join(cells)
        (data / name).write_text("\n".join(lines) + "\n")

    _fails(_env(data, tmp_path / "root"), DataError, "part-001.csv", "'monthly_charges'", "data row 5", "finite")


def test_non_finite_parquet_value_names_file_column_and_row(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    x = np.arange(20, dtype=np.float64)
    x[7] = -np.inf
    pq.write_table(pa.table({"x": x, "churned": ["yn"[i % 2] for i in range(20)]}), data / "part.parquet")
    root = tmp_path / "root"

    _fails(_env(data, root), DataError, "part.parquet", "'x'", "data row 8", "-inf")
    assert _files(root) == []


RANGE_CASES = {
    "seed_2_32": ({"RANDOM_SEED": "4294967296"}, ("RANDOM_SEED=4294967296", "<= 4294967295")),
    "seed_2_64": ({"RANDOM_SEED": str(2**64)}, ("RANDOM_SEED=18446744073709551616", "<= 4294967295")),
    "learning_rate_huge": ({"LEARNING_RATE": "1e300"}, ("LEARNING_RATE=1e+300", "<= 1")),
    "hidden_units_huge": ({"HIDDEN_UNITS": "1000000000"}, ("HIDDEN_UNITS=1000000000", "<= 65536")),
    "hidden_layers_huge": ({"HIDDEN_LAYERS": "100000"}, ("HIDDEN_LAYERS=100000", "<= 256")),
    "network_too_big": (
        {"HIDDEN_UNITS": "65536", "HIDDEN_LAYERS": "8"},
        ("HIDDEN_UNITS=65536 with HIDDEN_LAYERS=8", "GiB", "at most"),
    ),
    "batch_size_huge": ({"BATCH_SIZE": str(2**40)}, ("BATCH_SIZE=1099511627776", "<= 2147483647")),
    "epochs_huge": ({"EPOCHS": str(2**40)}, ("EPOCHS=1099511627776", "<= 2147483647")),
    "sample_rows_huge": ({"SAMPLE_ROWS": str(2**63)}, ("SAMPLE_ROWS=9223372036854775808", "<= 2147483647")),
    "max_features_huge": ({"MAX_FEATURES": str(2**40)}, ("MAX_FEATURES=1099511627776", "<= 2147483647")),
}


@pytest.mark.parametrize("name", sorted(RANGE_CASES))
def test_out_of_range_values_fail_at_bootstrap(tmp_path: Path, name: str) -> None:
    extra, needles = RANGE_CASES[name]
    data = write_small_churn(tmp_path / "data", rows=60, files=1)
    root = tmp_path / "root"
    _fails(_env(data, root, **extra), ConfigError, *needles)
    assert _files(root) == []


def test_largest_accepted_values_pass_bootstrap(tmp_path: Path) -> None:
    data = write_small_churn(tmp_path / "data", rows=60, files=1)
    ctx = bootstrap(
        _env(
            data,
            tmp_path / "root",
            RANDOM_SEED="4294967295",
            LEARNING_RATE="1",
            HIDDEN_UNITS="4096",
            BATCH_SIZE="2147483647",
        )
    )
    assert ctx.params.random_seed == 2**32 - 1
    assert params_module.MAX_SEED == 2**32 - 1
    assert _files(tmp_path / "root") == []


def test_pipeline_root_that_is_a_file_is_named(tmp_path: Path) -> None:
    data = write_small_churn(tmp_path / "data", rows=60, files=1)
    plain = tmp_path / "root.txt"
    plain.write_text("not a directory\n")
    _fails(_env(data, plain), ConfigError, "PIPELINE_ROOT_URI", str(plain), "is a file, expected a directory")
    _fails(_env(data, plain / "below"), ConfigError, "PIPELINE_ROOT_URI", str(plain), "is a file, expected a directory")
    assert plain.read_text() == "not a directory\n"


def test_pipeline_root_that_is_a_file_fails_the_cli_before_any_write(tmp_path: Path) -> None:
    data = write_small_churn(tmp_path / "data", rows=60, files=1)
    plain = tmp_path / "root.txt"
    plain.write_text("not a directory\n")
    before = _files(tmp_path)
    env = {k: v for k, v in os.environ.items() if k not in ("FORCE_RERUN", "MLFLOW_TRACKING_URI")}
    done = forked_ml8s(["run"], {**env, **_env(data, plain)}, timeout=120)
    assert done.returncode != 0 and done.stdout == ""
    (line,) = done.stderr.strip().splitlines()
    assert (
        line.startswith("ml8s: CONFIG_ERROR: PIPELINE_ROOT_URI=") and f"{plain} is a file, expected a directory" in line
    )
    assert _files(tmp_path) == before  # no lock, database, run folder or tmp file anywhere


def test_pipeline_root_that_is_a_symlink_loop_is_named(tmp_path: Path) -> None:
    data = write_small_churn(tmp_path / "data", rows=60, files=1)
    os.symlink("loop", tmp_path / "loop")
    _fails(_env(data, tmp_path / "loop"), ConfigError, "PIPELINE_ROOT_URI", "is a symlink loop, expected a directory")


@pytest.mark.parametrize(
    ("what", "said"), [("link", "is a symbolic link; expected the store's staging"), ("file", "is a file")]
)
def test_a_root_staging_directory_that_is_no_directory_fails_before_training(
    tmp_path: Path, what: str, said: str
) -> None:
    """The store stages the marker under the root's .tmp/ and refuses a link or a file there: the run used to
    train, write its artifacts and register before it failed on the marker (and every re-run trained again)."""
    data, root = write_small_churn(tmp_path / "data", rows=60, files=1), tmp_path / "root"
    root.mkdir()
    (tmp_path / "elsewhere").mkdir()
    staging = root / ".tmp"
    staging.symlink_to(tmp_path / "elsewhere") if what == "link" else staging.write_text("x")
    _fails(_env(data, root), ConfigError, "PIPELINE_ROOT_URI", f"{staging} {said}")
    assert sorted(p.name for p in root.iterdir()) == [".tmp"] and not any((tmp_path / "elsewhere").iterdir())


def test_read_only_pipeline_root_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = write_small_churn(tmp_path / "data", rows=60, files=1)
    root = tmp_path / "root"
    root.mkdir()
    root.chmod(0o555)
    if os.access(root, os.W_OK):
        # root writes anyway: make the OS answer the way it answers another user (or a read-only mount).
        real = os.access
        monkeypatch.setattr(preflight.os, "access", lambda p, mode: real(p, mode) and Path(p) != root)
    try:
        _fails(_env(data, root), ConfigError, "PIPELINE_ROOT_URI", str(root), "not writable")
        _fails(_env(data, root / "new" / "deeper"), ConfigError, "PIPELINE_ROOT_URI", str(root), "not writable")
        assert _files(root) == []
    finally:
        root.chmod(0o755)


def _damaged_sqlite(database: Path) -> None:
    """A real SQLite file whose header survived and whose pages did not (a disk error, a half-copied file)."""
    connection = sqlite3.connect(database)
    connection.execute("CREATE TABLE runs (x BLOB)")
    connection.executemany("INSERT INTO runs VALUES (?)", [(bytes(4000),)] * 8)
    connection.commit()
    connection.close()
    good = database.read_bytes()
    database.write_bytes(good[:100] + b"\xa5" * (len(good) - 100))


@pytest.mark.parametrize("what", ["garbage", "directory", "fifo", "header only", "damaged pages", "under a file"])
def test_an_mlflow_database_that_is_no_sqlite_file_fails_before_training(tmp_path: Path, what: str) -> None:
    # It used to be found at registration, after the whole run had trained and written its artifacts.
    data = write_small_churn(tmp_path / "data", rows=60, files=1)
    database = tmp_path / "mlflow.db"
    if what == "garbage":
        database.write_bytes(b"not a database at all\n")
    elif what == "directory":
        database.mkdir()
    elif what == "header only":  # SQLite's magic and nothing a database needs: MLflow cannot open it
        database.write_bytes(b"SQLite format 3\x00" + bytes(84))
    elif what == "damaged pages":
        _damaged_sqlite(database)
    elif what == "under a file":  # a typo in the path: nothing can be created there
        database.write_text("notes\n")
        database = database / "sub" / "mlflow.db"
    else:
        os.mkfifo(database)
    env = _env(data, tmp_path / "root", MLFLOW_TRACKING_URI=f"sqlite:///{database}")
    expected = {
        "garbage": "is not an SQLite database",
        "directory": "is a directory",
        "fifo": "is a FIFO",
        "header only": "is not a readable SQLite database (file is not a database)",
        "damaged pages": "is not a readable SQLite database (",
        "under a file": "mlflow.db is a file, expected an MLflow SQLite database file in a directory",
    }[what]
    _fails(env, ConfigError, "MLFLOW_TRACKING_URI=", str(database), expected, "expected an MLflow SQLite database")
    assert not (tmp_path / "root").exists()


def test_an_empty_mlflow_database_file_is_a_new_database(tmp_path: Path) -> None:
    database = tmp_path / "mlflow.db"
    database.touch()  # what `touch mlflow.db` gives: SQLite opens it as an empty database
    env = {"PIPELINE_ROOT_URI": str(tmp_path / "root"), "MLFLOW_TRACKING_URI": f"sqlite:///{database}"}
    preflight.check_writable_root(PlatformSettings.load(env))  # no error
    sqlite3.connect(database).execute("CREATE TABLE t (x)").connection.close()  # a sound database: no error
    preflight.check_writable_root(PlatformSettings.load(env))
    locked = sqlite3.connect(database, isolation_level=None)
    locked.execute("BEGIN EXCLUSIVE")  # another writer holding it is no damage: registration waits for it
    try:
        preflight.check_writable_root(PlatformSettings.load(env))
    finally:
        locked.close()
