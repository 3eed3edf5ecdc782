"""Arguments and error handling shared by every ``ml8s`` subcommand.

Exit codes of every command: 0 success (or PASS), 1 FAIL or a named ml8s error (one line on stderr:
``ml8s: CODE: message``; a bad --root or PIPELINE_ROOT_URI is a CONFIG_ERROR naming the one given), 2 usage
errors (argparse's own, a malformed RUN_ID),
143 / 130 stopped by SIGTERM / SIGINT (one line, ``ml8s: INTERRUPTED: ...``, after cleaning up).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, NoReturn

from pydantic import BaseModel, ConfigDict

from ml8s.errors import Ml8sError, TrackingUriError
from ml8s.identity.priority import checked_utf8, explicit_or_env
from ml8s.identity.settings import DEFAULT_PIPELINE_ROOT
from ml8s.identity.uri import check_tracking_uri, parse_root_uri
from ml8s.interrupts import Interrupted, interrupted, stopping_on_signals
from ml8s.text import is_utf8, terminal_text

if TYPE_CHECKING:  # argparse's subparsers action is generic only to type checkers
    from ml8s.store import Store

    Subcommands = argparse._SubParsersAction["Parser"]
Handler = Callable[[argparse.Namespace], int]


def run_id_arg(text: str) -> str:
    """argparse type of a RUN_ID: 12 lowercase hex digits (a usage error otherwise)."""
    from ml8s.audit.offline import is_run_id

    if not is_run_id(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a RUN_ID; expected 12 lowercase hex digits")
    return text


def hours_arg(text: str) -> float:
    """argparse type of a grace period in hours: ``nan`` or a negative value would make every candidate old
    enough to delete (a usage error instead)."""
    try:
        hours = float(text)
    except ValueError:
        hours = math.nan
    if not 0 <= hours * 3600 < math.inf:  # 1e308 hours is finite, its seconds are not
        raise argparse.ArgumentTypeError(f"{text!r}: expected a finite number of hours >= 0")
    return hours


def tracking_uri_arg(text: str) -> str:
    """argparse type of --mlflow-tracking-uri: "" (not given), or a URI MLflow can keep a registry at."""
    if not text.strip():
        return ""
    try:
        return check_tracking_uri(text.strip(), variable="--mlflow-tracking-uri")
    except TrackingUriError as exc:
        raise argparse.ArgumentTypeError(f"{exc.text!r} {exc.problem}; expected {exc.expected}") from exc


def text_arg(text: str) -> str:
    """argparse type of free text that is recorded (a decision's --reason): Python keeps an argument's bytes
    that are not UTF-8 as lone surrogates, which no JSON record can hold."""
    if not is_utf8(text):
        raise argparse.ArgumentTypeError(f"{text!r} holds bytes that are not UTF-8; expected UTF-8 text")
    return text


def output_arg(text: str) -> str:
    """argparse type of a file a command writes: '' (an unset variable) named the working directory, which the
    command found only after its work ('cannot write ... to : Is a directory')."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"{text!r} is empty; expected the path of a file to write")
    return text


ROOT_VARIABLE = "PIPELINE_ROOT_URI"


class CommandRoot(BaseModel):
    """A command's pipeline root, normalized, and where it came from: ``--root`` or PIPELINE_ROOT_URI (which
    the default ./pipeline_root stands in for), the name every error about it gives."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    uri: str
    source: str

    def open(self) -> Store:
        """The store at the root; a local root that is a file, a FIFO or a symlink loop is a ConfigError naming
        it (not an empty listing, nor an OS error from deep inside a read)."""
        from ml8s.store import open_store
        from ml8s.store.root_shape import check_local_root

        check_local_root(self.uri, variable=self.source)
        return open_store(self.uri)


def command_root(args: argparse.Namespace, env: Mapping[str, str] = os.environ) -> CommandRoot:
    """The root of a command made with :func:`add_root`: ``--root`` when given, else PIPELINE_ROOT_URI, else
    ./pipeline_root.

    Parsed here, in the handler, not by argparse: a bad value is then a CONFIG_ERROR naming the one given, and a
    malformed PIPELINE_ROOT_URI fails only the commands that use it. ``--root ''`` is given, so it is an error,
    never the default.

    Raises:
        ConfigError: the root given is empty, malformed or not UTF-8 (named ``--root`` or PIPELINE_ROOT_URI).
    """
    given: str | None = args.root
    if given is not None:
        return CommandRoot(uri=parse_root_uri(checked_utf8("--root", given), variable="--root").uri, source="--root")
    text = explicit_or_env(ROOT_VARIABLE, env) or DEFAULT_PIPELINE_ROOT
    return CommandRoot(uri=parse_root_uri(text, variable=ROOT_VARIABLE).uri, source=ROOT_VARIABLE)


def add_root(parser: argparse.ArgumentParser) -> None:
    """``--root URI``, read by :func:`command_root` (None when not given: an empty one is an error there)."""
    parser.add_argument(
        "--root",
        default=None,
        metavar="URI",
        help="pipeline root URI (default: PIPELINE_ROOT_URI, else ./pipeline_root)",
    )


def add_require_signed(parser: argparse.ArgumentParser) -> None:
    """``--require-signed`` / ``--allow-unsigned``: override CHAIN_REQUIRE_SIGNED (``args.require_signed``,
    None when neither is given)."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument(
        "--require-signed",
        dest="require_signed",
        action="store_const",
        const=True,
        default=None,
        help="refuse a chain without a trust policy and unsigned versions (default: CHAIN_REQUIRE_SIGNED)",
    )
    group.add_argument(
        "--allow-unsigned",
        dest="require_signed",
        action="store_const",
        const=False,
        help="accept a legacy unsigned chain (says what it could not check)",
    )


def guarded(handler: Handler, *, log_level: str | None = "WARNING") -> Handler:
    """Run a handler; a named ml8s error is one line on stderr and exit 1, any other exception (a bug) one
    INTERNAL_ERROR line and exit 2.

    ``log_level`` None keeps the pipeline's INFO progress lines on stderr. A closed stdout (``| head``)
    ends the command quietly, as other Unix tools do.
    """

    def run(args: argparse.Namespace) -> int:
        from ml8s import log

        try:
            log.configure(log_level)
            with stopping_on_signals():
                code = handler(args)
            sys.stdout.flush()  # buffered output's write error is this handler's: named below, not lost at exit
            return code
        except Interrupted as exc:
            return _stopped(exc)
        except Ml8sError as exc:
            if (stop := interrupted()) is not None:  # the signal, not what the code it hit made of it
                return _stopped(stop)
            print_error(f"ml8s: {exc}")
            return 1
        except BrokenPipeError:
            # Python would print a traceback while flushing stdout at exit: point stdout at devnull first.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 1
        except Exception as exc:
            if (stop := interrupted()) is not None:  # e.g. ImportError: a signal while torch or onnx was imported
                return _stopped(stop)
            # A bug of ours, not the user's input: still one line; the traceback is for ML8S_LOG_LEVEL=DEBUG.
            if os.environ.get("ML8S_LOG_LEVEL", "").upper() == "DEBUG":
                raise
            where = exc.__traceback__
            while where is not None and where.tb_next is not None:
                where = where.tb_next
            at = f" at {os.path.basename(where.tb_frame.f_code.co_filename)}:{where.tb_lineno}" if where else ""
            print_error(
                f"ml8s: INTERNAL_ERROR: {type(exc).__name__}{at}: {exc} (an ml8s bug, please report it; "
                "ML8S_LOG_LEVEL=DEBUG prints the traceback)"
            )
            return 2

    return run


def print_error(line: str) -> None:
    """The CLI's one printer of errors: ``line`` on stderr as :func:`~ml8s.text.terminal_text` makes it safe (a
    store key or file name in a message carried its escape sequences and carriage returns to the terminal)."""
    print(terminal_text(line), file=sys.stderr)


def print_warning(message: str) -> None:
    """The CLI's one printer of warnings, ``ml8s: warning: {message}``, made safe as :func:`print_error` makes an
    error: the file, column and variable names a warning holds came from outside (a newline in one forged a line
    of its own, an escape sequence reached the terminal)."""
    print_error(f"ml8s: warning: {message}")


class Parser(argparse.ArgumentParser):
    """argparse's parser, its usage errors printed as every other error (it echoes arguments as given:
    "unrecognized arguments: ...")."""

    def exit(self, status: int = 0, message: str | None = None) -> NoReturn:
        if message:
            print_error(message)
        sys.exit(status)


def _stopped(stop: Interrupted) -> int:
    print(
        f"ml8s: INTERRUPTED: stopped by {stop.name}; its temp files removed, its child processes stopped",
        file=sys.stderr,
    )
    return stop.exit_code
