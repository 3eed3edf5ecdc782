"""The fork server the end-to-end tests run ``ml8s`` in (forked_cli) behaves as the console script does."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest
from forked_cli import forked_ml8s


def _fresh(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return forked_ml8s(args, env, cwd=cwd, timeout=120, fresh=True)


@pytest.mark.parametrize(
    ("args", "data_root"),
    [
        (["--version"], "data"),
        (["verify"], "data"),  # usage: exit 2, argparse's message
        (["verify", "0123456789ab"], "data"),  # a FAIL verdict on stdout: exit 1
        (["identity"], "data"),  # DATA_ROOT from the environment given, relative to the working directory given
        (["identity"], "missing"),  # a named error on stderr: exit 1
    ],
    ids=["version", "usage", "fail-verdict", "environment", "named-error"],
)
def test_a_forked_command_answers_as_a_fresh_process_does(args: list[str], data_root: str, tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "part-0.csv").write_text("a,churned\n1,yes\n2,no\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PIPELINE_ROOT_URI", "FORCE_RERUN")}
    env.update(DATA_ROOT=data_root, TARGET_COLUMN="churned", PIPELINE_ROOT_URI=str(tmp_path / "root"))
    forked, fresh = forked_ml8s(args, env, cwd=tmp_path), _fresh(args, env, tmp_path)
    assert (forked.returncode, forked.stdout, forked.stderr) == (fresh.returncode, fresh.stdout, fresh.stderr)
    assert forked.stdout or forked.stderr


def test_each_command_takes_the_environment_it_is_given_and_nothing_from_the_one_before(tmp_path: Path) -> None:
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "part-0.csv").write_text(f"{name},churned\n1,yes\n2,no\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PIPELINE_ROOT_URI", "FORCE_RERUN")}
    env.update(TARGET_COLUMN="churned", PIPELINE_ROOT_URI=str(tmp_path / "root"))
    order = ["a", "b", "a"]
    forked = [forked_ml8s(["identity"], env | {"DATA_ROOT": n}, cwd=tmp_path).stdout for n in order]
    fresh = [_fresh(["identity"], env | {"DATA_ROOT": n}, tmp_path).stdout for n in order]
    assert forked == fresh and forked[0] != forked[1]


def test_a_command_past_its_timeout_is_killed(tmp_path: Path) -> None:
    import forked_cli

    env = dict(os.environ, PIPELINE_ROOT_URI=str(tmp_path / "root"))
    assert forked_ml8s(["chain", "init", "--chain", "c"], env).returncode == 0
    follow = ["follow", "--chain", "c", "--out", str(tmp_path / "out"), "--allow-unsigned", "--poll-seconds", "1"]
    with pytest.raises(subprocess.TimeoutExpired):
        forked_ml8s(follow, env, timeout=3)
    started = forked_cli._started(forked_cli._read_at_start(env))
    assert started is not None
    server = started.process.pid
    children = Path(f"/proc/{server}/task/{server}/children")
    for _ in range(100):  # the server reaps it within a poll or two
        if not children.read_text().split():
            break
        time.sleep(0.05)
    assert not children.read_text().split(), "the timed-out command is still running"


def test_a_working_directory_that_does_not_exist_fails_that_command_alone(tmp_path: Path) -> None:
    """subprocess.run raises for a missing cwd before anything runs; the fork ends with a traceback and 70 and the
    server answers the next command."""
    failed = forked_ml8s(["--version"], dict(os.environ), cwd=tmp_path / "missing")
    assert failed.returncode == 70 and "FileNotFoundError" in failed.stderr
    assert forked_ml8s(["--version"], dict(os.environ)).stdout.startswith("ml8s ")
