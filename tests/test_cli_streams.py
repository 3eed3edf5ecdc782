"""The ``ml8s`` command with its standard streams closed or failing (ml8s/cli/streams.py).

Each case runs the installed console script under ``sh`` with the redirection a clumsy caller would use:
``>&-`` (closed), ``>/dev/full`` (every write fails with ENOSPC). stdout is the result a script reads, so it
must be the result or nothing; a failure is one named line on stderr and a non-zero exit, never a
traceback; a failing or closed stderr never costs the result.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from forked_cli import ML8S


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    base = tmp_path_factory.mktemp("streams")
    data = base / "data"
    data.mkdir()
    (data / "rows.csv").write_text("a,y\n" + "".join(f"{n},{n % 2}\n" for n in range(60)))
    return {
        **os.environ,
        "DATA_ROOT": str(data),
        "TARGET_COLUMN": "y",
        "PIPELINE_ROOT_URI": str(base / "root"),
        "MLFLOW_TRACKING_URI": f"sqlite:///{base / 'mlflow.db'}",
        "EPOCHS": "1",
        "ML8S_LOG_LEVEL": "INFO",
    }


def _sh(script: str, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """``script`` under sh, ``$0`` being the ml8s command; stdout and stderr captured unless redirected."""
    return subprocess.run(["sh", "-c", script, ML8S, *args], env=env, capture_output=True, text=True, timeout=120)


def _one_error_line(stderr: str, code: str) -> None:
    assert "Traceback" not in stderr, stderr
    assert "INTERNAL_ERROR" not in stderr, stderr
    assert stderr.strip().splitlines()[-1].startswith(f"ml8s: {code}: "), stderr


def test_a_closed_stdout_is_refused_before_any_work(env: dict[str, str], tmp_path: Path) -> None:
    root = tmp_path / "never"
    done = _sh('"$0" run >&-', {**env, "PIPELINE_ROOT_URI": str(root)})
    assert done.returncode == 1
    _one_error_line(done.stderr, "OUTPUT_ERROR")
    assert "standard output is closed" in done.stderr and "Nothing was done" in done.stderr
    assert not root.exists()  # refused before the pipeline: no run directory, no lock, no claim


@pytest.mark.parametrize("argv", [["identity"], ["--help"], ["--version"]], ids=str)
def test_a_stdout_that_cannot_take_the_result_is_a_named_error(env: dict[str, str], argv: list[str]) -> None:
    done = _sh('"$0" "$@" >/dev/full', env, *argv)
    assert done.returncode == 1  # was 2 (INTERNAL_ERROR, "an ml8s bug"), or 0 with --version's text lost
    _one_error_line(done.stderr, "OUTPUT_ERROR")
    assert "No space left on device" in done.stderr


def test_a_stdout_whose_encoding_cannot_hold_the_result_is_a_named_error(env: dict[str, str]) -> None:
    """A result holding 'é' on an ASCII (or Latin-1 ...) stdout was INTERNAL_ERROR UnicodeEncodeError, exit 2."""
    done = _sh('"$0" identity', {**env, "EXCLUDE_COLUMNS": "é", "PYTHONIOENCODING": "ascii"})
    assert done.returncode == 1
    _one_error_line(done.stderr, "OUTPUT_ERROR")
    assert "standard output's encoding (ascii) cannot write '\\xe9'" in done.stderr
    assert "PYTHONIOENCODING=utf-8" in done.stderr


@pytest.mark.parametrize("redirect", ["2>&-", "2>/dev/full"], ids=["closed", "full"])
def test_a_closed_or_failing_stderr_never_costs_the_result_or_leaks_into_stdout(
    env: dict[str, str], redirect: str
) -> None:
    done = _sh(f'"$0" identity {redirect}', env)
    assert done.returncode == 0
    assert json.loads(done.stdout)["canonical_config"]["target_column"] == "y"  # only the result: parses whole
    failed = _sh(f'"$0" identity {redirect}', {**env, "TARGET_COLUMN": ""})
    assert failed.returncode == 1
    assert failed.stdout == ""  # the error line went nowhere rather than into the result stream


@pytest.fixture(scope="module")
def run_on_full_stderr(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """One whole run whose every progress line fails to write (its model also serves ``predict`` below)."""
    return _sh('"$0" run 2>/dev/full', env)


def test_a_whole_run_with_stderr_on_a_full_disk_still_delivers_its_manifest(
    run_on_full_stderr: subprocess.CompletedProcess[str],
) -> None:
    # The first progress line used to end the run with exit 1 and no manifest.
    assert run_on_full_stderr.returncode == 0
    assert json.loads(run_on_full_stderr.stdout)["run_id"]


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_predictions_written_as_bytes_into_a_full_disk_are_a_named_error(
    env: dict[str, str], run_on_full_stderr: subprocess.CompletedProcess[str], fmt: str
) -> None:
    run_id = json.loads(run_on_full_stderr.stdout)["run_id"]
    rows = str(Path(env["DATA_ROOT"]) / "rows.csv")
    done = _sh('"$0" predict --run "$1" --input "$2" --format "$3" >/dev/full', env, run_id, rows, fmt)
    assert done.returncode == 1  # was 2: INTERNAL_ERROR from the bytes written beside the text layer
    _one_error_line(done.stderr, "OUTPUT_ERROR")


def test_a_reader_that_goes_away_ends_the_command_quietly(env: dict[str, str]) -> None:
    done = _sh('"$0" identity | head -c 1', env)
    assert done.stdout == "{"
    assert done.stderr == ""
