"""The demo dataset: byte-identical across processes, realistic enough, idempotent, never mixed.

Byte identity across processes matters because the data fingerprint is part of RUN_ID: a generator
that depended on the process (hash seed, platform repr) would give every `make run` a new identity.
"""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ml8s.data import demo
from ml8s.data.demo import COLUMNS, MISSING_RATES, TARGET, main

REPO = Path(__file__).resolve().parent.parent
SMALL = ["--rows", "2000", "--files", "3"]


def _run_process(out: Path, hash_seed: str, *extra: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONHASHSEED": hash_seed}
    return subprocess.run(
        [sys.executable, "-m", "ml8s.data.demo", "--out", str(out), *extra],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _snapshot(directory: Path) -> dict[str, tuple[int, int, bytes]]:
    """name -> (inode, mtime_ns, bytes) of every entry, hidden ones included."""
    out: dict[str, tuple[int, int, bytes]] = {}
    for path in sorted(directory.iterdir()):
        st = path.stat()
        out[path.name] = (st.st_ino, st.st_mtime_ns, path.read_bytes())
    return out


def _read_rows(directory: Path) -> list[dict[str, str]]:
    rows: list[dict[str, str]] = []
    for path in sorted(directory.glob("part-*.csv")):
        with path.open(newline="", encoding="utf-8") as handle:
            reader = csv.DictReader(handle)
            assert reader.fieldnames is not None
            assert tuple(reader.fieldnames) == COLUMNS
            rows.extend(reader)
    return rows


def test_separate_processes_write_identical_bytes(tmp_path: Path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    for out, hash_seed in ((first, "1"), (second, "2")):
        result = _run_process(out, hash_seed, "--rows", "3000", "--files", "4")
        assert result.returncode == 0, result.stderr
        assert "3000 rows" in result.stderr and "4 files" in result.stderr
    names = sorted(p.name for p in first.iterdir())
    assert names == [f"part-{i:05d}.csv" for i in range(4)]
    assert names == sorted(p.name for p in second.iterdir())
    for name in names:
        assert (first / name).read_bytes() == (second / name).read_bytes(), name


def test_small_dataset_shape_missing_values_and_signal(tmp_path: Path) -> None:
    out = tmp_path / "data"
    assert main(["--out", str(out), *SMALL]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["part-00000.csv", "part-00001.csv", "part-00002.csv"]
    rows = _read_rows(out)
    assert len(rows) == 2000

    for name, _rate in MISSING_RATES:
        assert any(r[name] == "" for r in rows), f"no missing values in {name}"
    labels = [r[TARGET] for r in rows]
    assert {"yes", "no", ""} == set(labels)
    assert 1 <= labels.count("") <= 10
    for name in ("auto_pay", "paperless_billing", "has_partner"):
        assert {r[name] for r in rows} <= {"true", "false", ""}
    for name in ("plan", "region", "payment_method", "contract"):
        assert len({r[name] for r in rows} - {""}) >= 3
    for name in COLUMNS:  # no customer-id-like column: nothing identifies a row on its own
        assert len({r[name] for r in rows}) < len(rows), name

    # The target depends on the features: month-to-month customers churn far more than two-year ones.
    def churn_rate(contract: str) -> float:
        group = [r[TARGET] for r in rows if r["contract"] == contract and r[TARGET]]
        return group.count("yes") / len(group)

    assert churn_rate("month-to-month") > churn_rate("two_year") + 0.2


def test_rerun_into_same_directory_changes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "data"
    assert main(["--out", str(out), *SMALL]) == 0
    before = _snapshot(out)
    dir_mtime = out.stat().st_mtime_ns
    capsys.readouterr()
    assert main(["--out", str(out), *SMALL]) == 0
    assert "nothing written" in capsys.readouterr().err
    assert _snapshot(out) == before
    assert out.stat().st_mtime_ns == dir_mtime


def test_interrupted_run_is_completed_with_the_same_bytes(tmp_path: Path) -> None:
    out = tmp_path / "data"
    assert main(["--out", str(out), *SMALL]) == 0
    complete = _snapshot(out)
    (out / "part-00001.csv").unlink()
    (out / ".part-00002.csv.abc123.tmp").write_bytes(b"half a fil")  # leftover of a killed run
    assert main(["--out", str(out), *SMALL]) == 0
    after = _snapshot(out)
    assert sorted(after) == sorted(complete)
    assert {n: v[2] for n, v in after.items()} == {n: v[2] for n, v in complete.items()}
    assert after["part-00000.csv"][:2] == complete["part-00000.csv"][:2]  # untouched


def test_foreign_file_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "data"
    out.mkdir()
    (out / "notes.txt").write_text("mine\n")
    result = _run_process(out, "0", *SMALL)
    assert result.returncode == 1
    assert "foreign file 'notes.txt'" in result.stderr
    assert "refusing to mix datasets" in result.stderr
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]


def test_other_dataset_in_directory_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "data"
    assert main(["--out", str(out), *SMALL]) == 0
    before = _snapshot(out)
    capsys.readouterr()
    assert main(["--out", str(out), *SMALL, "--seed", "8"]) == 1
    assert "different dataset" in capsys.readouterr().err
    assert main(["--out", str(out), "--rows", "2000", "--files", "2"]) == 1  # another split of the rows
    assert _snapshot(out) == before


def test_bad_arguments_fail_clearly(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--out", str(tmp_path / "x"), "--rows", "3", "--files", "5"]) == 1
    assert "--files=5" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_an_out_under_a_file_or_too_many_rows_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """--out under a file was a NotADirectoryError traceback; --rows 10**11 a numpy MemoryError traceback."""
    (tmp_path / "f").write_text("mine\n")
    assert main(["--out", str(tmp_path / "f" / "x"), *SMALL]) == 1
    assert f"DATA_ERROR: --out {tmp_path / 'f' / 'x'} cannot be created or listed: Not a directory" in (
        capsys.readouterr().err
    )

    def no_memory(*args: object) -> None:
        raise MemoryError

    monkeypatch.setattr(demo, "_draw", no_memory)
    assert main(["--out", str(tmp_path / "big"), "--rows", "99999999999"]) == 1
    assert "DATA_ERROR: --rows=99999999999: not enough memory" in capsys.readouterr().err
    assert not (tmp_path / "big").exists()
