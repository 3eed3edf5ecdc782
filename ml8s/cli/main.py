"""The ``ml8s`` entry point: one parser, one module per command group.

Exit codes: 0 success, 1 a named ml8s error (one line on stderr: ``ml8s: CODE: message``) or a FAIL
verdict, 2 usage.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from ml8s import __version__
from ml8s.cli import audit, chain, follow, ops, pipeline, predict
from ml8s.cli.args import Parser, print_error
from ml8s.cli.streams import prepare_streams
from ml8s.errors import OutputError
from ml8s.identity.variables import CANONICALIZATION_VERSION
from ml8s.process_exit import end_process


def build_parser() -> argparse.ArgumentParser:
    """The whole command line; each group adds its subcommands, each with its ``handler``."""
    parser = Parser(prog="ml8s", description="Deterministic, idempotent, auditable training.")
    version = f"%(prog)s {__version__} (canonicalization {CANONICALIZATION_VERSION})"
    parser.add_argument("--version", action="version", version=version)
    commands = parser.add_subparsers(dest="command", required=True)
    pipeline.register(commands)  # identity, run
    audit.register(commands)  # verify, audit bundle|verify
    ops.register(commands)  # tmp-cleanup, resolve-collision, runs list
    chain.register(commands)  # chain init|commit|log|show|verify|gc|tensorboard
    predict.register(commands)  # predict
    follow.register(commands)  # follow
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    handler: Callable[[argparse.Namespace], int] = args.handler
    return handler(args)


def console() -> None:
    """The ``ml8s`` console script: :func:`main`, then :func:`ml8s.process_exit.end_process` with its code
    (a native thread pool torn down at exit must not turn a finished command into SIGABRT).

    The standard streams are made safe first (:mod:`ml8s.cli.streams`): a closed stdout is refused before
    any work, and a stdout that fails to take the result is an ``OUTPUT_ERROR``, not a lost result and exit 0.
    """
    closed = prepare_streams()
    try:
        if closed is not None:
            raise closed
        code = main()
        sys.stdout.flush()  # a failure to write the result is this command's failure, reported below
    except SystemExit as exc:  # argparse's usage errors, --help and --version: it has printed what it had to
        if isinstance(exc.code, str):
            print_error(exc.code)
        code = exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 1
    except OutputError as exc:  # outside a handler: --help or --version into a full disk, a closed stdout
        print_error(f"ml8s: {exc}")
        code = 1
    except BrokenPipeError:  # the reader went away (| head): quiet, as in every handler
        code = 1
    end_process(code)


if __name__ == "__main__":
    console()
