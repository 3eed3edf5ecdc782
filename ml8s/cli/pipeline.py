"""``ml8s identity`` and ``ml8s run``: the run identity of the environment, and the whole pipeline without Flyte."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING

from ml8s.cli.args import guarded

if TYPE_CHECKING:
    from ml8s.cli.args import Subcommands


def register(commands: Subcommands) -> None:
    """Add ``identity`` and ``run`` to the ``ml8s`` parser."""
    identity = commands.add_parser(
        "identity", help="print the run identity of the configuration in the environment as JSON"
    )
    identity.set_defaults(handler=guarded(_identity))
    run = commands.add_parser("run", help="run the whole pipeline locally without Flyte; prints the manifest")
    run.add_argument("--force-rerun", action="store_true", help="same as FORCE_RERUN=true")
    # The pipeline logs its progress (INFO) on stderr; identity prints JSON only.
    run.set_defaults(handler=guarded(_run, log_level=None))


def identity_report(env: Mapping[str, str]) -> dict[str, object]:
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


def _identity(args: argparse.Namespace) -> int:
    print(json.dumps(identity_report(os.environ), indent=2, sort_keys=True, ensure_ascii=False))
    return 0


def _run(args: argparse.Namespace) -> int:
    from ml8s.pipeline.run import run_pipeline

    overrides = {"force_rerun": "true"} if args.force_rerun else {}
    sys.stdout.write(run_pipeline(os.environ, overrides))
    return 0
