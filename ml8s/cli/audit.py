"""``ml8s verify`` and ``ml8s audit bundle|verify``: a run's checks, and audit bundles written and checked offline."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING

from ml8s.cli.args import (
    add_require_signed,
    add_root,
    command_root,
    guarded,
    output_arg,
    run_id_arg,
    tracking_uri_arg,
)
from ml8s.cli.streams import write_binary

if TYPE_CHECKING:
    from ml8s.chain import Anchor
    from ml8s.cli.args import Subcommands


def register(commands: Subcommands) -> None:
    """Add ``verify`` and ``audit`` to the ``ml8s`` parser."""
    verify = commands.add_parser("verify", help="verify a run: artifacts, checksums, identity, MLflow (PASS/FAIL)")
    verify.add_argument("run_id", type=run_id_arg, metavar="RUN_ID")
    add_root(verify)
    verify.add_argument("--json", action="store_true", help="print the report as JSON")
    verify.add_argument("--recheck-data", action="store_true", help="fingerprint DATA_ROOT again, report drift")
    _add_tracking_uri(verify)
    verify.add_argument("--anchor", default=None, help="check the chain against an anchor: FILE or mlflow:[MODEL[/N]]")
    add_require_signed(verify)
    _add_chain(verify)
    verify.set_defaults(handler=guarded(_verify))

    audit = commands.add_parser("audit", help="audit bundles: write one for a run, or verify one offline")
    sub = audit.add_subparsers(dest="audit_command", required=True)
    bundle = sub.add_parser("bundle", help="write a deterministic audit bundle (.tar.gz) of a verified run")
    bundle.add_argument("run_id", type=run_id_arg, metavar="RUN_ID")
    bundle.add_argument(
        "-o",
        "--output",
        required=True,
        type=output_arg,
        metavar="FILE",
        help="the archive to write ('-': standard output)",
    )
    add_root(bundle)
    bundle.add_argument("--no-model", action="store_true", help="leave the model files out (their sha256 stay)")
    bundle.add_argument("--allow-failed", action="store_true", help="bundle a run that fails verification")
    _add_tracking_uri(bundle)
    bundle.add_argument(
        "--anchor",
        default=None,
        help="anchor to embed and check: FILE or mlflow:[MODEL[/N]] (default: the latest published)",
    )
    _add_chain(bundle)
    bundle.set_defaults(handler=guarded(_bundle))
    check = sub.add_parser("verify", help="verify an audit bundle offline (no store, no MLflow)")
    check.add_argument("file", metavar="FILE")
    check.add_argument("--json", action="store_true", help="print the report as JSON")
    check.set_defaults(handler=guarded(_audit_verify))


def _add_chain(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--chain",
        default="",
        metavar="NAME",
        help="the chain to check the run against (default: the chain whose run index holds the run)",
    )


def _add_tracking_uri(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--mlflow-tracking-uri",
        default="",
        type=tracking_uri_arg,
        metavar="URI",
        help="ask this MLflow instead of the one manifest.json records (a registry that moved); "
        "MLFLOW_TRACKING_URI is used only for runs whose manifest records none",
    )


def _verify(args: argparse.Namespace) -> int:
    from ml8s.audit import render_text, verify_run

    env = _named(args, _environment(args.require_signed))
    report = verify_run(
        command_root(args).uri,
        args.run_id,
        env,
        recheck_data=args.recheck_data,
        tracking_uri=args.mlflow_tracking_uri,
        anchor=_anchor(args, env),
    )
    sys.stdout.write(report.model_dump_json(indent=2) + "\n" if args.json else render_text(report))
    return 0 if report.passed else 1


def _bundle(args: argparse.Namespace) -> int:
    from ml8s.audit import build_bundle, render_text, write_bundle
    from ml8s.audit.bundle import refuse_inside_runs

    refuse_inside_runs(args.output, command_root(args).uri)
    env = _named(args, os.environ)
    data, report = build_bundle(
        command_root(args).uri,
        args.run_id,
        env,
        include_model=not args.no_model,
        allow_failed=args.allow_failed,
        tracking_uri=args.mlflow_tracking_uri,
        anchor=_anchor(args, env),
    )
    if args.output == "-":
        write_binary(data)
    else:
        write_bundle(args.output, data)
    sys.stderr.write(render_text(report))
    if _is_stdout(args.output):  # after the archive, this line was trailing bytes of the .tar.gz a script saved
        print(
            f"wrote the bundle to standard output ({len(data)} bytes): verify the saved file with `ml8s audit "
            "verify FILE`",
            file=sys.stderr,
        )
    else:
        print(f"wrote {args.output} ({len(data)} bytes): verify it with `ml8s audit verify {args.output}`")
    return 0


def _is_stdout(path: str) -> bool:
    if path == "-":
        return True
    try:
        written, out = os.stat(path), os.fstat(sys.stdout.fileno())
    except (OSError, ValueError):  # gone, or stdout has no descriptor (an embedding host): not the same file
        return False
    return (written.st_dev, written.st_ino) == (out.st_dev, out.st_ino)


def _audit_verify(args: argparse.Namespace) -> int:
    from ml8s.audit import render_text, verify_bundle

    report = verify_bundle(args.file)
    sys.stdout.write(report.model_dump_json(indent=2) + "\n" if args.json else render_text(report))
    return 0 if report.passed else 1


def _environment(require_signed: bool | None) -> Mapping[str, str]:
    """The environment, with CHAIN_REQUIRE_SIGNED as --require-signed / --allow-unsigned say (if given)."""
    if require_signed is None:
        return os.environ
    return {**os.environ, "CHAIN_REQUIRE_SIGNED": "true" if require_signed else "false"}


def _named(args: argparse.Namespace, env: Mapping[str, str]) -> Mapping[str, str]:
    """The environment with CHAIN_NAME and MLFLOW_MODEL_NAME of the run (``ml8s.cli.names``)."""
    from ml8s.cli.names import run_names

    return {**env, **run_names(command_root(args).open(), args.run_id, args.chain, env)}


def _anchor(args: argparse.Namespace, env: Mapping[str, str]) -> Anchor | None:
    from ml8s.audit.anchor_tags import load_anchor
    from ml8s.identity.settings import PlatformSettings

    return load_anchor(args.anchor, PlatformSettings.load(env, {"pipeline_root_uri": command_root(args).uri}))
