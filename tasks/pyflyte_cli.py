"""Four fixes to flytekit 1.16's ``pyflyte run`` of our workflows (which import this module).

1. ``--inputs-file`` turns each value into command-line words, and a boolean into a bare flag: ``true``
   becomes ``--standardize`` (which an ``Optional[bool]`` input refuses: "requires an argument") and
   ``false`` becomes nothing at all, so the input silently takes the environment instead: a model trained
   with ``standardize=true`` although the file says false. Here a boolean becomes ``--name true|false``, a
   null is left out (unset), and everything else is spelled as flytekit spells it.
2. An ``Optional[int]`` input's click type is "INTEGER, else text" (the text standing for None), so
   ``--epochs ten`` passes the command line and fails later, in flytekit's conversion, with a traceback.
   Here a value that none of its input's typed choices accepts is a usage error naming the input, one line;
   an empty one is unset, as an empty environment variable is.

3. A task that fails with an ml8s error (``DATA_ERROR: TARGET_COLUMN='Nope' is not a column ...``) is
   printed by ``pyflyte run`` as a 60-line traceback ending in that one line. Here it is the one line,
   ``ml8s: CODE: message`` on stderr, as ``ml8s`` prints it (``pyflyte -v run`` still shows the traceback).

4. stdout carries the workflow's output alone (the manifest JSON): ``pyflyte run``'s banner "Running
   Execution on local." and whatever the tasks print meanwhile (MLflow's "View run …" lines with an HTTP
   tracking URI) go to stderr, so ``pyflyte run … | python -c 'import json,sys; json.load(sys.stdin)'`` works.
   A closed stdout (``>&-``) is refused before any work and a result that stdout fails to take (a full disk) is
   an ``OUTPUT_ERROR``, one line, as ``ml8s`` says them (``ml8s.cli.streams``), not a traceback or a lost result;
   a stderr that fails (``2>/dev/full``) loses only the progress lines, the result still arrives.

1 and 2 patch ``YamlFileReadingCommand.parse_args`` (flytekit/clis/sdk_in_container/run.py), the command
``pyflyte run FILE WORKFLOW`` builds for a workflow; 3 patches ``pretty_print_traceback``
(flytekit/clis/sdk_in_container/utils.py), which ``pyflyte`` calls for an exception that is no click error;
4 wraps ``YamlFileReadingCommand.invoke`` and gives run.py a ``click`` whose ``secho`` writes to stderr and
whose ``echo`` (the output) writes to the real stdout.
Only processes that import this module are changed (``pyflyte run`` imports the workflow's file before it
parses the workflow's inputs); tests/test_flyte_inputs.py checks all three through ``pyflyte run``.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import re
import sys
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
import yaml
from flytekit.clis.sdk_in_container import run as pyflyte_run
from flytekit.clis.sdk_in_container import utils as pyflyte_utils
from flytekit.clis.sdk_in_container.run import YamlFileReadingCommand
from flytekit.core.context_manager import ExecutionState, FlyteContextManager
from flytekit.deck import deck as flytekit_deck
from flytekit.interaction.click_types import UnionParamType
from flytekit.loggers import logger as flytekit_logger

from ml8s.cli.args import print_error
from ml8s.cli.streams import QuietStderr, closed_stdout_error, output_failed
from ml8s.errors import Ml8sError
from tasks.result import TrainingResult, result_json

_original: Callable[[YamlFileReadingCommand, click.Context, list[str]], list[str]] = YamlFileReadingCommand.parse_args
_TYPED = (click.INT, click.FLOAT, click.BOOL)


def _words(inputs: object) -> list[str]:
    """The command-line words of an inputs file's mapping (see the module docstring, 1)."""
    if not isinstance(inputs, dict):
        raise click.BadParameter("expected a mapping of input name to value", param_hint="--inputs-file")
    words: list[str] = []
    for name, value in inputs.items():
        if value is None:
            continue
        if isinstance(value, bool):
            words += [f"--{name}", "true" if value else "false"]
        elif isinstance(value, str):
            words += [f"--{name}", value]
        elif isinstance(value, int | float):
            words += [f"--{name}", json.dumps(value)]
        else:  # a list or mapping became its JSON text ('["a", "b"]' as two odd column names), a date a traceback
            kind = {list: "a list", dict: "a mapping"}.get(type(value), f"a {type(value).__name__}")
            raise click.BadParameter(
                f"{name} is {kind} ({value!r}); expected one text, number or boolean value (a comma list is one "
                f"text: 'a,b'; quote a value YAML would read otherwise: '2024-01-01')",
                param_hint="--inputs-file",
            )
    return words


def _load(text: str) -> object:
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        message = f"not a YAML or JSON file: {str(exc).splitlines()[0]}"
        raise click.BadParameter(message, param_hint="--inputs-file") from None


def _utf8(data: bytes, where: str) -> str:
    """The inputs as text: a file saved in another encoding (Latin-1, UTF-16) was a traceback on stdout."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        message = f"{where} is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start}); expected UTF-8"
        raise click.BadParameter(message, param_hint="--inputs-file") from None


def _parse_args(self: YamlFileReadingCommand, ctx: click.Context, args: list[str]) -> list[str]:
    args = list(args)
    words: list[str] = []
    if "--inputs-file" in args:
        at = args.index("--inputs-file")
        if at + 1 >= len(args):
            raise click.BadParameter("expected a file name", param_hint="--inputs-file")
        path = args[at + 1]
        del args[at : at + 2]
        try:
            words = _words(_load(_utf8(Path(path).read_bytes(), path)))
        except OSError as exc:
            raise click.BadParameter(f"cannot read {path}: {exc.strerror or exc}", param_hint="--inputs-file") from exc
    elif args and args[-1] == "-":
        args.pop()
        text = _utf8(sys.stdin.buffer.read(), "standard input")
        words = _words(_load(text)) if text else []
    rest = _original(self, ctx, [*words, *args])
    _check_typed(self, ctx)
    return rest


def _check_typed(command: click.Command, ctx: click.Context) -> None:
    """A usage error for an optional number or boolean given a text none of its types accepts."""
    for param in command.params:
        kind = param.type
        value = ctx.params.get(param.name or "")
        if not isinstance(kind, UnionParamType) or not isinstance(value, str):
            continue
        if not value.strip():  # empty, as an empty environment variable: unset
            ctx.params[param.name or ""] = None
            continue
        typed = [t for t in _TYPED if any(type(t) is type(member) for member in kind._types)]
        if typed:
            names = " or ".join(t.name for t in typed)
            raise click.BadParameter(f"{value!r} is not a valid {names}", ctx=ctx, param=param)


def _ml8s_error(exc: BaseException | None) -> Ml8sError | None:
    """The first ml8s error in the exception's chain (flytekit wraps a task's exception once or twice)."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, Ml8sError):
            return exc
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return None


_print_traceback = pyflyte_utils.pretty_print_traceback


def _print_one_line(e: Exception, verbosity: int = 1) -> None:
    found = _ml8s_error(e)
    if found is None or verbosity > 0:
        _print_traceback(e, verbosity)
        return
    # str() holds what flytekit prepended; the CLI's printer escapes what a key or file name put in the message
    print_error(f"ml8s: {found.code}: {found.message}")


class _StdoutForOutputOnly(types.ModuleType):
    """``click`` as run.py sees it: the banner (``secho``) on stderr, the output (``echo``) on the real stdout."""

    def __init__(self, stdout: Any) -> None:
        super().__init__("click")
        self._stdout = stdout

    def __getattr__(self, name: str) -> Any:
        return getattr(click, name)

    def secho(self, message: Any = None, file: Any = None, **kwargs: Any) -> None:
        click.secho(message, file=file if file is not None else sys.stderr, **kwargs)

    def echo(self, message: Any = None, file: Any = None, **kwargs: Any) -> None:
        if isinstance(message, TrainingResult):  # the workflow's output: JSON, not the dataclass's repr
            message = result_json(message)
        if file is not None:
            click.echo(message, file=file, **kwargs)
            return
        try:  # the result on a full disk: named, as ml8s names it, not a traceback out of click
            click.echo(message, file=self._stdout, **kwargs)
            self._stdout.flush()
        except BrokenPipeError:
            raise
        except OSError as exc:
            # the unwritten rest would fail again at exit ("Exception ignored ..."): stdout is the null device now
            os.dup2(os.open(os.devnull, os.O_WRONLY), self._stdout.fileno())
            raise output_failed(exc) from exc


_original_invoke = YamlFileReadingCommand.invoke


def _invoke(self: YamlFileReadingCommand, ctx: click.Context) -> Any:
    if sys.stdout is None:  # closed (>&-): the result would be lost after the whole run; refused before any work
        raise closed_stdout_error()
    if isinstance(sys.stderr, io.TextIOWrapper) and not isinstance(sys.stderr, QuietStderr):
        # on a full disk the banner's write failed the command, and its traceback went to stdout; as with ml8s, a
        # failing stderr loses only the progress lines
        sys.stderr = QuietStderr(sys.stderr)
    with contextlib.redirect_stdout(sys.stderr):  # the tasks' prints; run.py's echo keeps the real stdout
        return _original_invoke(self, ctx)


_original_output_deck = flytekit_deck._output_deck


def _output_deck(task_name: str, new_user_params: Any) -> None:
    """flytekit's Deck writer, saying where the page is (flytekit logs it at INFO, which pyflyte hides)."""
    seen: list[str] = []

    class _Where(logging.Filter):
        def filter(self, record: logging.LogRecord) -> bool:
            found = re.search(r"(file://\S+deck\.html)", record.getMessage())
            if found:
                seen.append(found.group(1))
            return record.levelno >= level  # only what would have been shown anyway

    logger, where = flytekit_logger, _Where()
    level = logger.getEffectiveLevel()
    logger.addFilter(where)
    logger.setLevel(min(level, logging.INFO))
    try:
        _original_output_deck(task_name, new_user_params)
    finally:
        logger.setLevel(level)
        logger.removeFilter(where)
    mode = FlyteContextManager.current_context().execution_state.mode
    if seen and mode != ExecutionState.Mode.TASK_EXECUTION:  # a cluster's console shows the Deck itself
        print(f"ml8s: the {task_name} Deck: {seen[0]}", file=sys.stderr)


YamlFileReadingCommand.parse_args = _parse_args  # type: ignore[method-assign]
YamlFileReadingCommand.invoke = _invoke  # type: ignore[method-assign]
pyflyte_run.click = _StdoutForOutputOnly(sys.stdout)  # type: ignore[attr-defined]
pyflyte_utils.pretty_print_traceback = _print_one_line
flytekit_deck._output_deck = _output_deck
