"""Every command that reads a pipeline root names a root that is no directory, in one line, and writes nothing.

A clumsy operator points --root at a file, a FIFO, a symlink loop or a path below a file. Before, `chain verify`
and `chain gc` printed INTERNAL_ERROR (an ENOTDIR from deep inside a listing), `runs list` said "no runs" and
`chain log` "no chain", as if the root were merely empty. The error names where the root came from: `--root`
when given (it said PIPELINE_ROOT_URI, which the operator had not set), else PIPELINE_ROOT_URI.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import pytest

from ml8s.cli.args import guarded
from ml8s.cli.main import main
from ml8s.errors import StoreError

RUN_ID = "abcdefabcdef"
COMMANDS = [
    ["runs", "list"],
    ["chain", "log"],
    ["chain", "verify"],
    ["chain", "gc", "--execute"],
    ["chain", "init"],
    ["verify", RUN_ID],
    ["tmp-cleanup", "--older-than-days", "0"],
    ["resolve-collision", RUN_ID, "--quarantine", "--reason", "test"],
    ["follow", "--once", "--out", "OUT"],
    ["audit", "bundle", RUN_ID, "--out", "OUT/bundle.tar.gz"],
]


def _roots(base: Path) -> dict[str, tuple[Path, Path, str]]:
    """name -> (root given, path named in the error, what stands there)."""
    plain = base / "plain"
    plain.write_text("not a root\n")
    os.mkfifo(base / "fifo")
    (base / "loop1").symlink_to("loop2")
    (base / "loop2").symlink_to("loop1")
    return {
        "file": (plain, plain, "a file"),
        "below_a_file": (plain / "below", plain, "a file"),
        "fifo": (base / "fifo", base / "fifo", "a FIFO"),
        "loop": (base / "loop1", base / "loop1", "a symlink loop"),
    }


@pytest.mark.parametrize(
    ("kind", "source"),
    [(kind, "--root") for kind in ("file", "below_a_file", "fifo", "loop")] + [("file", "PIPELINE_ROOT_URI")],
)
def test_a_root_that_is_no_directory_is_one_config_error_for_every_command(
    kind: str, source: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    root, culprit, words = _roots(tmp_path)[kind]
    out = tmp_path / "out"
    out.mkdir()
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("PIPELINE_ROOT_URI", raising=False)
    if source == "PIPELINE_ROOT_URI":
        monkeypatch.setenv(source, str(root))
    before = sorted(p.name for p in tmp_path.iterdir())
    for command in COMMANDS:
        argv = [arg.replace("OUT", str(out)) for arg in command] + (["--root", str(root)] if source == "--root" else [])
        code = main(argv)
        captured = capsys.readouterr()
        lines = captured.err.strip().splitlines()
        assert code == 1, (argv, captured.out, captured.err)
        assert len(lines) == 1, (argv, captured.err)
        assert lines[0].startswith(f"ml8s: CONFIG_ERROR: {source}="), (argv, lines[0])
        assert f"{culprit} is {words}, expected a directory" in lines[0], (argv, lines[0])
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    assert not any(out.iterdir())


@pytest.mark.parametrize("blank", ["", "  "])
def test_an_empty_root_given_is_a_config_error_not_the_default(
    blank: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`chain log --root ''` (a script's unset variable) listed the chains of PIPELINE_ROOT_URI, or of
    ./pipeline_root: an explicit --root is the root asked for, and an empty one names none."""
    out, env_root = tmp_path / "out", tmp_path / "env_root"
    out.mkdir()
    env_root.mkdir()
    rows = tmp_path / "rows.csv"
    rows.write_text("a\n1\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("PIPELINE_ROOT_URI", str(env_root))
    before = sorted(p.name for p in tmp_path.iterdir())
    extra = [
        ["chain", "show"],
        ["predict", "--chain", "c", "--input", str(rows)],
        ["predict", "--run", RUN_ID, "--input", str(rows)],
    ]
    for command in COMMANDS + extra:
        argv = [arg.replace("OUT", str(out)) for arg in command] + ["--root", blank]
        code = main(argv)
        captured = capsys.readouterr()
        assert code == 1, (argv, captured.out, captured.err)
        assert (
            captured.err == f"ml8s: CONFIG_ERROR: --root={blank!r} is empty; expected a local path, file:// or s3://\n"
        )
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no ./pipeline_root either
    assert not any(env_root.iterdir()) and not any(out.iterdir())


@pytest.mark.parametrize(
    ("flags", "line"),
    [
        (["--pipeline-root-uri", ""], "--pipeline-root-uri='' is empty; expected a value"),
        (["--data-root", " "], "--data-root=' ' is empty; expected a value (leave --data-root out to use DATA_ROOT)"),
        (["--epochs", ""], "--epochs='' is empty; expected a value (leave --epochs out to use EPOCHS)"),
        (["--data-root", "gs://data"], "--data-root='gs://data' has an unsupported scheme"),
        (["--pipeline-root-uri", "PLAIN"], "--pipeline-root-uri='file://PLAIN': PLAIN is a file, expected a directory"),
    ],
)
def test_run_names_the_flag_given_and_refuses_an_empty_one(
    flags: list[str], line: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`ml8s run --pipeline-root-uri "$UNSET"` wrote under PIPELINE_ROOT_URI (or ./pipeline_root), and a bad root
    flag was named as its variable, which the operator had not set."""
    from conftest import write_small_churn

    data, env_root, plain = write_small_churn(tmp_path / "data", rows=40), tmp_path / "env_root", tmp_path / "plain"
    plain.write_text("not a root\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path))
    for name, value in {"DATA_ROOT": str(data), "TARGET_COLUMN": "churned", "PIPELINE_ROOT_URI": str(env_root)}.items():
        monkeypatch.setenv(name, value)
    before = sorted(p.name for p in tmp_path.iterdir())
    assert main(["run", *(flag.replace("PLAIN", str(plain)) for flag in flags)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("ml8s: CONFIG_ERROR: " + line.replace("PLAIN", str(plain))) and err.count("\n") == 1, err
    assert sorted(p.name for p in tmp_path.iterdir()) == before


PLANTED = "a\x1b[2Jb\rc"  # an escape sequence that clears the screen, a carriage return that writes over the line
SHOWN = "a\\x1b[2Jb\\rc"


def test_a_planted_name_reaches_the_terminal_escaped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The CLI's error printer wrote a message as it was: a file name in its unquoted part (after the quoted
    value) cleared the terminal and wrote over the line, and so did an argument argparse echoed back."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / PLANTED).write_text("x")
    assert main(["runs", "list", "--root", PLANTED]) == 1
    assert capsys.readouterr().err == (
        f"ml8s: CONFIG_ERROR: --root='file://{tmp_path}/{SHOWN}': {tmp_path}/{SHOWN} is a file, expected a "
        "directory (or a path one can be created at)\n"
    )
    with pytest.raises(SystemExit) as usage:
        main(["runs", "list", PLANTED])
    assert usage.value.code == 2
    err = capsys.readouterr().err
    assert err.endswith(f"ml8s: error: unrecognized arguments: {SHOWN}\n") and "\x1b" not in err, err


def test_a_multi_line_error_keeps_its_lines_and_tabs(capsys: pytest.CaptureFixture[str]) -> None:
    """Only the line feeds and tabs that lay a message out stay raw; each line after the first is indented, so
    that none reads as a line of its own, and a trailing line feed adds no empty line."""

    def fails(args: argparse.Namespace) -> int:
        raise StoreError(f"two keys differ:\n\tk1\n\t{PLANTED}\u202e\n")

    assert guarded(fails)(argparse.Namespace()) == 1
    assert capsys.readouterr().err == f"ml8s: STORE_ERROR: two keys differ:\n  \tk1\n  \t{SHOWN}\\u202e\n"


def test_chain_log_names_a_planted_root_escaped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`ml8s chain log` said its root had no chain, or that a chain was broken, with the root's path raw."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / PLANTED).mkdir()
    assert main(["chain", "log", "--root", PLANTED]) == 0
    err = capsys.readouterr().err
    assert err == f"ml8s: no chain under file://{tmp_path}/{SHOWN}; `ml8s run` or `ml8s chain init` makes one\n"


def test_runs_list_names_a_planted_folder_escaped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A folder under ml8s_training_runs/ that is no run was named in runs list's warning raw."""
    (tmp_path / "ml8s_training_runs" / PLANTED).mkdir(parents=True)
    (tmp_path / "ml8s_training_runs" / PLANTED / "f").write_text("x")
    assert main(["runs", "list", "--root", str(tmp_path)]) == 0
    err = capsys.readouterr().err
    assert f"ml8s: warning: file://{tmp_path}/ml8s_training_runs/{SHOWN} is no run" in err and "\x1b" not in err, err
