"""CLI subcommands ``ml8s tmp-cleanup``, ``ml8s resolve-collision`` and ``ml8s runs list``."""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from typing import TYPE_CHECKING

from ml8s.cli.args import add_root, command_root, guarded, print_error, print_warning, run_id_arg, text_arg

if TYPE_CHECKING:
    from ml8s.cli.args import Subcommands


def _days(text: str) -> float:
    try:
        days = float(text)
    except ValueError:
        days = -1.0
    if not 0 <= days < math.inf:  # inf kept everything but printed "Infinity" in --json, which is no JSON
        raise argparse.ArgumentTypeError(f"{text!r}: expected a finite number of days >= 0")
    return days


def register(commands: Subcommands) -> None:
    """Add the operator tools to the ``ml8s`` parser."""
    cleanup = commands.add_parser(
        "tmp-cleanup",
        help="remove stale .tmp/ entries (never an artifact) and abort S3 uploads to them, and $TMPDIR directories of "
        "ended runs",
    )
    cleanup.add_argument(
        "--older-than-days", type=_days, default=None, metavar="N", help="age to remove (default TMP_RETENTION_DAYS, 7)"
    )
    short = (
        "apply an --older-than-days under 1 hour to .tmp/ too: a write in flight loses its staged file (none may run)"
    )
    cleanup.add_argument("--allow-short-grace", action="store_true", help=short)
    cleanup.add_argument("--dry-run", action="store_true", help="list what would be removed, remove nothing")
    cleanup.add_argument("--json", action="store_true", help="print the report as JSON")
    add_root(cleanup)
    cleanup.set_defaults(handler=guarded(_tmp_cleanup))

    resolve = commands.add_parser(
        "resolve-collision", help="after audit, move a colliding run aside so the new configuration can run"
    )
    resolve.add_argument("run_id", type=run_id_arg, metavar="RUN_ID")
    resolve.add_argument("--quarantine", action="store_true", help="move ARTIFACT_ROOT to ml8s_quarantine/ (required)")
    resolve.add_argument(  # text_arg: a non-UTF-8 reason failed to serialize after the run had been moved
        "--reason", type=text_arg, default="", help="recorded in the incident log (e.g. the audit reference)"
    )
    add_root(resolve)
    resolve.set_defaults(handler=guarded(_resolve), parser=resolve)

    runs = commands.add_parser("runs", help="list runs with their status and model version")
    sub = runs.add_subparsers(dest="runs_command", required=True)
    listing = sub.add_parser("list", help="every run: complete, incomplete, collided, quarantined")
    listing.add_argument("--json", action="store_true", help="print the runs as JSON")
    add_root(listing)
    listing.set_defaults(handler=guarded(_runs_list))


def _tmp_cleanup(args: argparse.Namespace) -> int:
    from ml8s.ops.tmp_cleanup import cleanup_tmp, retention_days
    from ml8s.ops.tmp_local import cleanup_local_tmp
    from ml8s.text import shown

    days: float = retention_days(os.environ) if args.older_than_days is None else args.older_than_days
    report = cleanup_tmp(
        command_root(args).open(), days, dry_run=args.dry_run, allow_short_grace=args.allow_short_grace
    )
    # $TMPDIR directories of ml8s processes that ended; anyone may name one there, so shown escaped
    removed, left = cleanup_local_tmp(dry_run=args.dry_run)
    local, local_left = [shown(path) for path in removed], [shown(path) for path in left]
    for path in local_left:
        print_warning(f"could not remove {path} (another user's? its ml8s process has ended)")
    if args.json:
        found = {"local_temp_dirs": local, "local_temp_dirs_left": local_left}
        print(json.dumps({**json.loads(report.model_dump_json()), **found}, indent=2))
        return 0 if report.complete else 1
    verb = "would remove" if report.dry_run else "removed"
    averb = "would abort" if report.dry_run else "aborted"
    for path in local:
        print(f"{verb} {path} (its ml8s process has ended)")
    for entry in report.removed:
        print(f"{verb} {entry.uri} ({entry.size} bytes, {entry.age_days:.1f} days old)")
    for uri in report.left_alone:
        print_warning(
            f"left alone {uri}: no regular file (a symbolic link, FIFO, socket or device); "
            "tmp-cleanup removes regular files only: check what it is and remove it by hand"
        )
    raised = report.min_age_days != days
    age = "1 hour" if raised else f"{days:g} days"
    print(f"{verb} {len(report.removed)} tmp entries older than {age}; kept {report.kept} younger ones")
    if raised:  # named as the user gave it: an unset --older-than-days is TMP_RETENTION_DAYS's
        given = f"TMP_RETENTION_DAYS={days:g}" if args.older_than_days is None else f"--older-than-days {days:g}"
        print(
            f"ml8s: note: {given} raised to 1 hour: a younger .tmp/ entry may be a write in flight; "
            "--allow-short-grace removes it too (no write may run)",
            file=sys.stderr,
        )
    for upload in report.aborted_uploads:
        print(f"{averb} multipart upload {upload.upload_id} to {upload.uri} ({upload.age_days:.1f} days old)")
    if report.aborted_uploads or report.kept_uploads:  # S3 only: a local store has none, and says nothing of them
        print(
            f"{averb} {len(report.aborted_uploads)} multipart uploads to tmp keys older than {age}; "
            f"kept {report.kept_uploads} younger ones"
        )
    for failure in report.failed:
        print_error(f"ml8s: STORE_ERROR: could not remove {failure}")
    for failure in report.failed_uploads:
        print_error(f"ml8s: STORE_ERROR: could not {failure}")
    return 0 if report.complete else 1


def _resolve(args: argparse.Namespace) -> int:
    from ml8s.ops.collision import resolve_collision

    if not args.quarantine:
        parser: argparse.ArgumentParser = args.parser
        parser.error("the only resolution is --quarantine (move the colliding run aside); pass it to proceed")
    outcome = resolve_collision(command_root(args).open(), args.run_id, reason=args.reason)
    print(outcome.model_dump_json(indent=2))
    done = "was already resolved" if outcome.already_resolved else "quarantined"
    print(f"run {args.run_id} {done}: {outcome.resolution.quarantine_uri} ({outcome.record_uri})", file=sys.stderr)
    return 0


def _runs_list(args: argparse.Namespace) -> int:
    from ml8s.ops.runs import list_root, render_runs
    from ml8s.text import shown

    listing = list_root(command_root(args).open(), os.environ)  # registrations checked in MLflow
    for uri in listing.not_runs:  # a folder anyone with write access named: shown escaped
        print_warning(f"{shown(uri)} is no run (not a RUN_ID folder of run files): not listed")
    if args.json:
        print(json.dumps([e.model_dump() for e in listing.runs], indent=2))
    else:
        sys.stdout.write(render_runs(list(listing.runs)))
    return 0
