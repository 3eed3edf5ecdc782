"""CLI subcommands ``ml8s verify`` and ``ml8s audit bundle|verify`` (registered by :mod:`ml8s.cli`).

Exit codes: 0 PASS (or done), 1 FAIL or a named ml8s error (``ml8s: CODE: message`` on stderr),
2 usage errors (argparse's own, a malformed RUN_ID, an unsupported --root).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from ml8s.config import normalize_uri
from ml8s.errors import Ml8sError
from ml8s.settings import DEFAULT_PIPELINE_ROOT

if TYPE_CHECKING:  # argparse's subparsers action is generic only to type checkers
    Subcommands = argparse._SubParsersAction[argparse.ArgumentParser]
Handler = Callable[[argparse.Namespace], int]


def run_id_arg(text: str) -> str:
    """argparse type of a RUN_ID: 12 lowercase hex digits (a usage error otherwise)."""
    from ml8s.audit.offline import is_run_id

    if not is_run_id(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a RUN_ID; expected 12 lowercase hex digits")
    return text


def root_arg(text: str) -> str:
    """argparse type of --root: a local path, file:// or s3:// (normalized like PIPELINE_ROOT_URI)."""
    root = normalize_uri(text)
    if not root.startswith(("file://", "s3://")):
        raise argparse.ArgumentTypeError(f"{text!r}: expected a local path, file:// or s3://")
    return root


def add_root(parser: argparse.ArgumentParser) -> None:
    default = os.environ.get("PIPELINE_ROOT_URI", "").strip() or DEFAULT_PIPELINE_ROOT
    parser.add_argument(
        "--root",
        type=root_arg,
        default=default,
        help="pipeline root URI (default: PIPELINE_ROOT_URI, else ./pipeline_root)",
    )


def guarded(handler: Handler) -> Handler:
    """Run a handler; a named ml8s error is one line on stderr and exit 1."""

    def run(args: argparse.Namespace) -> int:
        from ml8s import log

        log.configure("WARNING")
        try:
            return handler(args)
        except Ml8sError as exc:
            print(f"ml8s: {exc}", file=sys.stderr)
            return 1

    return run


def register(commands: Subcommands) -> None:
    """Add ``verify`` and ``audit`` to the ``ml8s`` parser."""
    verify = commands.add_parser("verify", help="verify a run: artifacts, checksums, identity, MLflow (PASS/FAIL)")
    verify.add_argument("run_id", type=run_id_arg, metavar="RUN_ID")
    add_root(verify)
    verify.add_argument("--json", action="store_true", help="print the report as JSON")
    verify.add_argument("--recheck-data", action="store_true", help="fingerprint DATA_ROOT again, report drift")
    verify.set_defaults(handler=guarded(_verify))

    audit = commands.add_parser("audit", help="audit bundles: write one for a run, or verify one offline")
    sub = audit.add_subparsers(dest="audit_command", required=True)
    bundle = sub.add_parser("bundle", help="write a deterministic audit bundle (.tar.gz) of a verified run")
    bundle.add_argument("run_id", type=run_id_arg, metavar="RUN_ID")
    bundle.add_argument("-o", "--output", required=True, metavar="FILE", help="the archive to write")
    add_root(bundle)
    bundle.add_argument("--no-model", action="store_true", help="leave the model files out (their sha256 stay)")
    bundle.add_argument("--allow-failed", action="store_true", help="bundle a run that fails verification")
    bundle.set_defaults(handler=guarded(_bundle))
    check = sub.add_parser("verify", help="verify an audit bundle offline (no store, no MLflow)")
    check.add_argument("file", metavar="FILE")
    check.add_argument("--json", action="store_true", help="print the report as JSON")
    check.set_defaults(handler=guarded(_audit_verify))


def _verify(args: argparse.Namespace) -> int:
    from ml8s.audit import render_text, verify_run

    report = verify_run(args.root, args.run_id, os.environ, recheck_data=args.recheck_data)
    sys.stdout.write(report.model_dump_json(indent=2) + "\n" if args.json else render_text(report))
    return 0 if report.passed else 1


def _bundle(args: argparse.Namespace) -> int:
    from ml8s.audit import build_bundle, render_text, write_bundle

    data, report = build_bundle(
        args.root, args.run_id, os.environ, include_model=not args.no_model, allow_failed=args.allow_failed
    )
    write_bundle(args.output, data)
    sys.stderr.write(render_text(report))
    print(f"wrote {args.output} ({len(data)} bytes): verify it with `ml8s audit verify {args.output}`")
    return 0


def _audit_verify(args: argparse.Namespace) -> int:
    from ml8s.audit import render_text, verify_bundle

    report = verify_bundle(args.file)
    sys.stdout.write(report.model_dump_json(indent=2) + "\n" if args.json else render_text(report))
    return 0 if report.passed else 1
