"""Docs cannot drift from the code (issue 10): every ``ml8s …`` command that README.md and docs/*.md show
(in code blocks and inline code) names subcommands and options the CLI parser has, every ``make X`` names
a Makefile target, every ``pyflyte run FILE NAME`` a workflow that exists, and every link stays inside
the repository."""

from __future__ import annotations

import argparse
import fnmatch
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

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
