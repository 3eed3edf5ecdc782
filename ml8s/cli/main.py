"""The ``ml8s`` entry point: one parser, one module per command group.

Exit codes: 0 success, 1 a named ml8s error (one line on stderr: ``ml8s: CODE: message``) or a FAIL
verdict, 2 usage.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from ml8s import __version__
from ml8s.cli import audit, chain, follow, ops, pipeline, predict
from ml8s.identity.variables import CANONICALIZATION_VERSION


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


if __name__ == "__main__":
    raise SystemExit(main())
