"""The ``ml8s`` command line: ``identity``, ``run``, ``verify``, ``audit``, ``chain`` and the operator tools.

Exit codes: 0 success, 1 a named ml8s error (one line on stderr: ``ml8s: CODE: message``), 2 usage.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable

from ml8s import cli_chain
from ml8s.audit import commands as audit_commands
from ml8s.errors import Ml8sError
from ml8s.ops import commands as ops_commands


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ml8s", description="Deterministic, idempotent, auditable training.")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("identity", help="print the run identity of the configuration in the environment as JSON")
    run = commands.add_parser("run", help="run the whole pipeline locally without Flyte; prints the manifest")
    run.add_argument("--force-rerun", action="store_true", help="same as FORCE_RERUN=true")
    # Subcommands that dispatch themselves: each sets a `handler` (one function per subcommand).
    audit_commands.register(commands)  # verify, audit bundle|verify
    ops_commands.register(commands)  # tmp-cleanup, resolve-collision, runs list
    cli_chain.register(commands)  # chain init|commit|log|show|verify|gc|tensorboard
    args = parser.parse_args(argv)
    if "handler" in args:
        handler: Callable[[argparse.Namespace], int] = args.handler
        return handler(args)
    from ml8s import log

    log.configure("WARNING" if args.command == "identity" else None)
    try:
        if args.command == "identity":
            print(json.dumps(identity_report(os.environ), indent=2, sort_keys=True, ensure_ascii=False))
        else:
            from ml8s.pipeline.run import run_pipeline

            overrides = {"force_rerun": "true"} if args.force_rerun else {}
            sys.stdout.write(run_pipeline(os.environ, overrides))
    except Ml8sError as exc:
        print(f"ml8s: {exc}", file=sys.stderr)
        return 1
    return 0


def identity_report(env: os._Environ[str] | dict[str, str]) -> dict[str, object]:
    """The fields of ``ml8s identity``."""
    from ml8s.pipeline.bootstrap import bootstrap

    ctx = bootstrap(env)
    return {
        "artifact_root": ctx.artifact_root,
        "canonical_config": ctx.identity.canonical_config,
        "canonical_json": ctx.identity.canonical_json,
        "canonicalization_version": ctx.identity.canonicalization_version,
        "data_fingerprint": ctx.identity.data_fingerprint,
        "full_config_hash": ctx.identity.full_config_hash,
        "run_id": ctx.run_id,
    }


if __name__ == "__main__":
    raise SystemExit(main())
