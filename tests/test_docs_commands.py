"""Docs cannot drift from the code (issue 10): every ``ml8s …`` command that README.md and docs/*.md show
(in code blocks and inline code) names subcommands and options the CLI parser has, every ``make X`` names
a Makefile target, every ``pyflyte run FILE NAME`` a workflow that exists, and every link stays inside
the repository."""

from __future__ import annotations

import argparse
import fnmatch
import json
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import pytest
from cli_support import ml8s_many
from forked_cli import forked_ml8s, forked_pyflyte

from ml8s.cli import build_parser

REPO = Path(__file__).resolve().parent.parent
DOCS = sorted([REPO / "README.md", *(REPO / "docs").glob("*.md")])
_FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
_INLINE = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")
_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_PROGRAMS = ("ml8s", "make", "pyflyte")


def _text(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def _shell_lines(text: str) -> Iterator[str]:
    """Lines of shell code blocks (``sh``, ``bash``, ``console``; unlabeled blocks hold diagrams and
    output) and of inline code."""
    for match in _FENCE.finditer(text):
        if match.group(1) in ("sh", "bash", "shell", "console"):
            yield from match.group(2).splitlines()
    outside = _FENCE.sub("", text)
    yield from (m.group(1) for m in _INLINE.finditer(outside))


def _commands(line: str) -> Iterator[list[str]]:
    """Each simple command of a line (split at pipes and ``&&``/``;``), as words, without its comment,
    leading ``VAR=value`` assignments and ``[``/``]`` of optional parts; the program as its basename."""
    code = line.split(" #", 1)[0].strip().lstrip("$ ")
    for part in re.split(r"\s(?:\|\||&&|\||;)\s", code):
        try:
            words = shlex.split(part.replace("[", " ").replace("]", " "))
        except ValueError:
            continue  # prose in backticks, not a command
        while words and _ASSIGNMENT.match(words[0]):
            words = words[1:]
        if len(words) > 1 and _is_program(words[0]):  # a bare `ml8s` in prose names the tool, runs nothing
            yield [Path(words[0]).name, *words[1:]]


def _is_program(word: str) -> bool:
    """``ml8s``, ``make``, ``pyflyte``, or a path to one (``.venv/bin/ml8s``); not ``ml8s/`` nor ``s3://ml8s``."""
    return Path(word).name in _PROGRAMS and not word.endswith("/") and "://" not in word


def documented() -> list[tuple[str, list[str]]]:
    found = []
    for path in DOCS:
        for line in _shell_lines(_text(path)):
            for words in _commands(line):
                found.append((f"{path.relative_to(REPO)}: {line.strip()}", words))
    return found


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _options(parser: argparse.ArgumentParser) -> set[str]:
    return {option for action in parser._actions for option in action.option_strings}


def check_ml8s(words: list[str]) -> list[str]:
    """Problems of one ``ml8s`` command line against the parser: unknown subcommands or options."""
    parsers, problems = [build_parser()], []
    for word in words[1:]:
        if word.startswith("-"):
            option = word.split("=", 1)[0]
            for parser in parsers:
                if option not in _options(parser):
                    problems.append(f"{parser.prog} has no option {option}")
            continue
        choices = [_subparsers(parser) for parser in parsers]
        if not all(choices):
            continue  # a positional argument (RUN_ID, a file, a counter)
        descended = []
        for alternative in word.split("|"):  # "init|commit|log": each alternative must exist
            for parser, sub in zip(parsers, choices, strict=True):
                if alternative in sub:
                    descended.append(sub[alternative])
                else:
                    problems.append(f"{parser.prog} has no subcommand {alternative!r}")
        parsers = descended or parsers
    if any(_subparsers(parser) for parser in parsers) and not {"-h", "--help", "--version"} & set(words):
        problems.append(f"{' '.join(words)} names no subcommand of {[p.prog for p in parsers]}")
    return problems


def make_targets() -> set[str]:
    rule = re.compile(r"^([A-Za-z0-9_.$()/-][^\s:=]*(?:\s+[^\s:=]+)*)\s*:(?!=)", re.M)
    return {target for match in rule.finditer(_text(REPO / "Makefile")) for target in match.group(1).split()}


def check_make(words: list[str]) -> list[str]:
    targets = [w for w in words[1:] if not _ASSIGNMENT.match(w) and not w.startswith("-")]
    known = make_targets()
    return [f"the Makefile has no target {t!r}" for t in targets if not fnmatch.filter(known, t)]


def check_pyflyte(words: list[str]) -> list[str]:
    """``pyflyte run [options] FILE NAME``: FILE exists and defines NAME (a workflow or a launch plan)."""
    files = [i for i, w in enumerate(words) if w.endswith(".py")]
    if words[1:2] != ["run"] or not files or files[0] + 1 >= len(words):
        return []
    rel, name = words[files[0]], words[files[0] + 1]
    if not (REPO / rel).is_file():
        return [f"{rel} does not exist"]
    defined = re.search(rf"^def {re.escape(name)}\(|^{re.escape(name)} = ", _text(REPO / rel), re.M)
    return [] if defined else [f"{rel} defines no workflow or launch plan {name!r}"]


CHECKS = {"ml8s": check_ml8s, "make": check_make, "pyflyte": check_pyflyte}


def test_docs_show_commands_of_every_kind() -> None:
    """The extraction itself works: the README's own commands are found (so the test below can fail)."""
    programs = {words[0] for _where, words in documented()}
    assert programs == set(_PROGRAMS)
    assert ["make", "run"] in [words for _where, words in documented()]
    assert len(documented()) > 40


def test_every_documented_command_exists() -> None:
    problems = [f"{where}: {problem}" for where, words in documented() for problem in CHECKS[words[0]](words)]
    assert problems == [], "\n".join(problems)


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ("ml8s verfy RUN_ID", "has no subcommand 'verfy'"),
        ("ml8s verify RUN_ID --jsn", "ml8s verify has no option --jsn"),
        ("ml8s chain init|commit|rebase --root URI", "ml8s chain has no subcommand 'rebase'"),
        ("ml8s chain", "names no subcommand"),
        ("DATA_ROOT=x .venv/bin/ml8s idenity", "has no subcommand 'idenity'"),
        ("make deploy", "no target 'deploy'"),
        ("pyflyte run workflows/training.py no_such_workflow", "defines no workflow"),
    ],
)
def test_a_drifted_command_is_caught(line: str, problem: str) -> None:
    (words,) = list(_commands(line))
    assert any(problem in p for p in CHECKS[words[0]](words))


def test_links_stay_inside_the_repository() -> None:
    problems = []
    for path in DOCS:
        for target in _LINK.findall(_text(path)):
            file = target.split("#", 1)[0]
            resolved = (path.parent / file).resolve()
            if ":" in target.split("/", 1)[0] or not resolved.is_relative_to(REPO) or not resolved.exists():
                problems.append(f"{path.relative_to(REPO)} links to {target}: expected a file of the repository")
    assert problems == [], "\n".join(problems)


def test_version_flag() -> None:
    done = subprocess.run(
        [sys.executable, "-c", "from ml8s.cli import main; main(['--version'])"],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert re.fullmatch(r"ml8s \d+\.\d+\.\d+ \(canonicalization \d+\.\d+\.\d+\)\n", done.stdout)


# --- The documented commands, run: every ``ml8s`` command of the docs that is complete (it parses once its
# placeholders are filled) runs against one trained root, and each sample output (a ``text`` block right after
# a ``sh`` block) has the structure of what its command prints: the same JSON keys, the same CSV header, the
# same leading words of each line (check names, table headers), ids and numbers aside.

_SAMPLE_IDS = ("RUN_ID", "da6dc9ed8d94", "a17d99f43cb1", "a3f9b7b28946")
# Commands that would run for ever, train, or need what a test root has none of (keys, a second version, a
# collision); each is still checked against the parser above.
_NOT_RUN = {"run", "follow", "resolve-collision", "reproduce", "trust", "anchor", "promote", "reject", "commit"}
_NOT_RUN |= {"root", "keygen", "init"}
_HEX = re.compile(r"\b[0-9a-f]{12,64}\b")
_NUMBER = re.compile(r"[0-9]+(\.[0-9]+)?")


class Trained(NamedTuple):
    base: Path
    root: Path
    run_id: str
    stdout: str  # what `pyflyte run` printed: the workflow's result
    stderr: str
    env: dict[str, str]


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Trained:
    """One run of the training workflow through `pyflyte run`, as the README shows it; its root serves every
    documented command."""
    import os

    from conftest import write_small_churn

    base = tmp_path_factory.mktemp("docs")
    data, root = write_small_churn(base / "data", rows=120, files=1), base / "root"
    (base / "tmp").mkdir()
    drop = ("CHAIN_NAME", "MLFLOW_MODEL_NAME", "MLFLOW_TRACKING_URI", "WARM_START", "FORCE_RERUN", "ML8S_LOG_LEVEL")
    env = {k: v for k, v in os.environ.items() if k not in drop and not k.startswith("FLYTE")}
    env.update(HOME=str(base), TMPDIR=str(base / "tmp"), PIPELINE_ROOT_URI=str(root), COLUMNS="200")
    env.update(DATA_ROOT=str(data), TARGET_COLUMN="churned", EPOCHS="2", HIDDEN_UNITS="8", BATCH_SIZE="64")
    # A fork of the warm server (forked_cli) runs pyflyte's console script as `pyflyte run` does, without
    # another interpreter start and its imports of torch and MLflow.
    done = forked_pyflyte(["run", "workflows/training.py", "training_pipeline"], env, cwd=REPO, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    run_id = json.loads(done.stdout)["run_id"]
    (base / "rows.csv").write_text(
        (data / "part-000.csv").read_text().splitlines()[0]
        + "\n"
        + "\n".join((data / "part-000.csv").read_text().splitlines()[1:4])
        + "\n"
    )
    bundle = forked_ml8s(["audit", "bundle", run_id, "-o", str(base / "run.tar.gz")], env, timeout=300)
    assert bundle.returncode == 0, bundle.stderr
    return Trained(base, root, run_id, done.stdout, done.stderr, env)


def _filled(words: list[str], t: Trained, n: int) -> list[str]:
    """The documented words with their placeholders made real for the trained root."""
    out: list[str] = []
    for i, word in enumerate(words):
        before = words[i - 1] if i else ""
        if word in _SAMPLE_IDS:
            word = t.run_id
        elif word == "URI":
            word = str(t.root)
        elif word == "NAME":
            word = "ml8s-model" if before == "--chain" else "customer_id"
        elif word in ("N", "K"):
            word = "1" if word == "N" else "0"
        elif word == "TEXT":
            word = "docs"
        elif word == "rows.csv":
            word = str(t.base / "rows.csv")
        elif before in ("-o", "--output", "--out"):
            word = str(t.base / f"out-{n}-{Path(word).name}")
        elif word.endswith(".tar.gz") or word == "FILE":
            word = str(t.base / "run.tar.gz")
        out.append(word)
    return out


def _runnable(words: list[str]) -> bool:
    import contextlib
    import io

    if any(w in ("REF", "...", "--serve") or "|" in w or "<" in w for w in words):
        return False
    if not set(words[1:]).isdisjoint(_NOT_RUN):
        return False
    try:
        with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
            build_parser().parse_args(words[1:])
    except SystemExit:  # a syntax summary or a prose mention (missing arguments), or --help
        return False
    return True


def _ml8s_run(words: list[str], t: Trained) -> subprocess.CompletedProcess[str]:
    return forked_ml8s(words[1:], t.env, cwd=t.base, timeout=300)


def _ml8s_many(commands: list[list[str]], t: Trained) -> list[subprocess.CompletedProcess[str]]:
    return ml8s_many([words[1:] for words in commands], t.env, cwd=t.base)


def _structure(text: str) -> object:
    """The shape of an output: JSON keys (recursively; a list by its first item), a CSV header, or the set of
    the leading words of its lines with ids and numbers replaced."""
    try:
        return _keys(json.loads(text))
    except ValueError:
        pass
    lines = [line for line in text.splitlines() if line.strip()]
    if lines and "," in lines[0] and " " not in lines[0]:
        return ("csv", lines[0])
    return _leading(lines, 2)


def _leading(lines: list[str], words: int) -> frozenset[str]:
    return frozenset(" ".join(_NUMBER.sub("N", _HEX.sub("H", w)) for w in line.split()[:words]) for line in lines)


def _keys(value: object) -> object:
    if isinstance(value, dict):
        return {k: _keys(v) for k, v in sorted(value.items())}
    if isinstance(value, list):
        return [_keys(value[0])] if value else []
    return None


def _documented_samples() -> list[tuple[str, list[str], str]]:
    """(where, the command as words, the sample) for each ``text`` block that follows a ``sh`` block (or another
    ``text`` block of the same command) with nothing but blank lines between them."""
    found = []
    for path in DOCS:
        text, command, end = _text(path), "", -1
        for match in _FENCE.finditer(text):
            follows = end >= 0 and not text[end : match.start()].strip()
            if match.group(1) in ("sh", "bash"):
                command = [line for line in match.group(2).splitlines() if line.strip()][-1]
            elif match.group(1) == "text" and follows and command:
                words = list(_commands(command))
                assert words, f"{path.name}: the sample after {command!r} follows no command"
                found.append((f"{path.relative_to(REPO)}: {command.strip()}", words[-1], match.group(2)))
            else:
                command = ""
            end = match.end()
    return found


def test_samples_are_found() -> None:
    """The sample extraction works (so the comparison below can fail): the README's result and verify's report."""
    where = [w for w, _, _ in _documented_samples()]
    assert any(w.startswith("README.md: ") and "pyflyte run" in w for w in where), where
    assert any(w.startswith("docs/audits.md: ") and "ml8s verify" in w for w in where), where
    assert _structure('{"a": 1, "b": [{"c": 2}]}') == {"a": None, "b": [{"c": None}]}
    assert _structure("x,y\n1,2") == ("csv", "x,y")
    assert _structure("PASS  marker 12 ab\nRESULT: PASS (3 checks)") == {"PASS marker", "RESULT: PASS"}


def test_every_documented_command_runs_without_a_traceback(trained: Trained) -> None:
    """Each complete ``ml8s`` command of the docs, its placeholders filled: a result or one named error line."""
    from concurrent.futures import ThreadPoolExecutor

    commands: dict[tuple[str, ...], tuple[str, list[str]]] = {}
    for n, (where, words) in enumerate(documented()):
        if words[0] == "ml8s" and tuple(words) not in commands and _runnable(filled := _filled(words, trained, n)):
            commands[tuple(words)] = (where, filled)
    listed = list(commands.values())
    halves = [listed[::2], listed[1::2]]  # two interpreters, two cores
    with ThreadPoolExecutor(2) as pool:
        outputs = list(pool.map(lambda half: _ml8s_many([filled for _, filled in half], trained), halves))
    runs = [
        (where, done)
        for half, out in zip(halves, outputs, strict=True)
        for (where, _), done in zip(half, out, strict=True)
    ]
    problems = []
    for where, done in runs:
        said = done.stdout + done.stderr
        if done.returncode not in (0, 1) or "Traceback" in said or "INTERNAL_ERROR" in said:
            problems.append(f"{where}: exit {done.returncode}: {said[-500:]}")
        elif done.returncode == 1 and not done.stderr.strip().splitlines()[-1].startswith(("ml8s: ", "FAIL")):
            problems.append(f"{where}: exit 1 without a named error line: {done.stderr[-300:]}")
        elif "--json" in done.args and done.stdout:  # --json means JSON, whatever the verdict
            try:
                json.loads(done.stdout)
            except ValueError:
                problems.append(f"{where}: --json printed no JSON: {done.stdout[:300]}")
    assert problems == [], "\n".join(problems)
    assert len(runs) >= 25, f"only {len(runs)} documented commands ran"
    succeeded = [where for where, done in runs if done.returncode == 0 and done.stdout]
    assert len(succeeded) >= 20, f"only {len(succeeded)} of {len(runs)} printed a result"


def test_documented_samples_have_the_structure_of_the_real_output(trained: Trained) -> None:
    problems = []
    for n, (where, words, sample) in enumerate(_documented_samples()):
        if words[0] == "pyflyte":
            printed, said = trained.stdout, trained.stderr
        else:
            done = _ml8s_run(_filled(words, trained, 1000 + n), trained)
            assert done.returncode == 0, f"{where}: {done.stderr[-500:]}"
            printed, said = done.stdout, done.stderr
        if sample.startswith("ml8s: "):  # lines on stderr (the run's summary, where its Deck is)
            expected = _leading(sample.splitlines(), 4)
            got = _leading([line for line in said.splitlines() if line.startswith("ml8s: ")], 4)
        else:
            expected, got = _structure(sample), _structure(printed)
        if isinstance(expected, frozenset) and isinstance(got, frozenset):
            if not expected <= got:
                problems.append(f"{where}: the output has no line like {sorted(expected - got)}")
        elif expected != got:
            problems.append(f"{where}: documented {expected}, printed {got}")
    assert problems == [], "\n".join(problems)
