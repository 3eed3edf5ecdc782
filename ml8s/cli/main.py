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
from ml8s.identity.variables import CANONICALIZATION_VERSION
from ml8s.process_exit import end_process


def build_parser() -> argparse.ArgumentParser:
    """The whole command line; each group adds its subcommands, each with its ``handler``."""
    parser = argparse.ArgumentParser(prog="ml8s", description="Deterministic, idempotent, auditable training.")
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
    (a native thread pool torn down at exit must not turn a finished command into SIGABRT)."""
    try:
        code = main()
    except SystemExit as exc:  # argparse's usage errors, --help and --version: it has printed what it had to
        if isinstance(exc.code, str):
            print(exc.code, file=sys.stderr)
        code = exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 1
    end_process(code)


if __name__ == "__main__":
    console()
