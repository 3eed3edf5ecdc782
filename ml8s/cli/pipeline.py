"""``ml8s identity`` and ``ml8s run``: the run identity of the environment, and the whole pipeline without Flyte."""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

from ml8s.cli.args import guarded, print_warning
from ml8s.errors import ConfigError
from ml8s.identity.priority import checked_utf8
from ml8s.identity.uri import parse_root_uri
from ml8s.identity.variables import USER_VARIABLES
from ml8s.pipeline.summary import summary_line
from ml8s.text import quoted, terminal_json, terminal_text

ROOT_HELP = "ml8s run --help"
# Flags whose value is a root: checked here too, so that a bad one is named as the flag given, not its variable.
_ROOT_FLAGS = ("data_root", "pipeline_root_uri")

if TYPE_CHECKING:
    from ml8s.cli.args import Subcommands


def register(commands: Subcommands) -> None:
    """Add ``identity`` and ``run`` to the ``ml8s`` parser."""
    identity = commands.add_parser(
        "identity", help="print the run identity of the configuration in the environment as JSON"
    )
    identity.set_defaults(handler=guarded(_identity))
    run = commands.add_parser(
        "run",
        help="run the whole pipeline locally without Flyte; prints the manifest",
        description="Each flag overrides its environment variable (--epochs 30 = EPOCHS=30), with the same RUN_ID.",
    )
    for name, default in USER_VARIABLES.items():
        flag = _flag(name)
        unset = "required" if default is None else f"else {default or 'unset'}"
        run.add_argument(flag, dest=name.lower(), metavar="VALUE", help=f"(unset: {name}, {unset})")
    run.add_argument("--pipeline-root-uri", metavar="URI", help="where runs are written (unset: PIPELINE_ROOT_URI)")
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
    print(terminal_json(identity_report(os.environ)))
    return 0


def _flag(name: str) -> str:
    return "--" + name.lower().replace("_", "-")


def _given(name: str, value: str) -> str:
    """A flag's value as given. Empty counts as "not given" only for a workflow input: on the command line
    (``--data-root "$UNSET"``) it silently took the environment's value, or the default."""
    flag = _flag(name)
    if not checked_utf8(flag, value).strip():
        raise ConfigError(f"{flag}={quoted(value)} is empty; expected a value (leave {flag} out to use {name.upper()})")
    if name in _ROOT_FLAGS:
        from ml8s.store.root_shape import check_local_root

        check_local_root(parse_root_uri(value, variable=flag).uri, variable=flag)
    return value


def _run(args: argparse.Namespace) -> int:
    from ml8s import log
    from ml8s.identity.lookalike import lookalikes
    from ml8s.pipeline.run import run_pipeline

    for name, meant in lookalikes(os.environ):
        hint = f"; did you mean {meant}?" if meant else f"; ml8s reads none such (see {ROOT_HELP})"
        print_warning(f"{name} is set but ml8s does not read it{hint}")
    names = [*(n.lower() for n in USER_VARIABLES), "pipeline_root_uri"]
    overrides = {name: _given(name, getattr(args, name)) for name in names if getattr(args, name) is not None}
    if args.force_rerun:
        overrides["force_rerun"] = "true"
    started = time.monotonic()
    with log.stdout_to_stderr():  # stdout is the manifest only: MLflow prints "View run …" lines meanwhile
        manifest = run_pipeline(os.environ, overrides)
    print(terminal_text(summary_line(manifest, time.monotonic() - started)), file=sys.stderr)
    sys.stdout.write(manifest)
    return 0
