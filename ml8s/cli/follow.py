"""``ml8s follow``: keep a local directory holding a chain's current verified model (ml8s.serving)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import TYPE_CHECKING

from ml8s.chain import RECORD_MAX_BYTES, Anchor, ChainStore, ReadTrust, read_anchor
from ml8s.cli.args import add_require_signed, add_root, command_root, guarded, print_error
from ml8s.errors import ConfigError
from ml8s.identity.settings import PlatformSettings
from ml8s.store.operator_files import read_operator_file
from ml8s.text import shown

if TYPE_CHECKING:
    from ml8s.cli.args import Subcommands
    from ml8s.serving import ServedVersion


def register(commands: Subcommands) -> None:
    """Add ``ml8s follow`` to the CLI."""
    text = (
        "keep --out holding the chain's current verified model (weights as safetensors plus the version's other "
        "payload files) under versions/, with a 'current' symlink swapped atomically"
    )
    follow = commands.add_parser("follow", help=text, description=text)
    add_root(follow)
    follow.add_argument("--chain", default="", help="chain name (default: CHAIN_NAME)")
    follow.add_argument("--out", required=True, help="the directory to keep current")
    follow.add_argument("--once", action="store_true", help="catch up to the head, then exit")
    follow.add_argument("--pinned", type=int, default=None, metavar="VERSION", help="serve this version only")
    follow.add_argument("--poll-seconds", type=float, default=5.0, help="between polls (default 5)")
    follow.add_argument("--anchor", default=None, help="an anchor file (ml8s chain anchor) to start from")
    add_require_signed(follow)
    follow.set_defaults(handler=guarded(_follow))


def _follow(args: argparse.Namespace) -> int:
    from ml8s.serving import FollowOptions, follow

    if args.pinned is not None and args.pinned < 1:
        raise ConfigError(f"--pinned {args.pinned}: expected a version counter >= 1")
    if not 0 < args.poll_seconds < 86400:
        raise ConfigError(f"--poll-seconds {args.poll_seconds}: expected a number of seconds in (0, 86400)")
    root = command_root(args)
    settings = PlatformSettings.load(os.environ, {"pipeline_root_uri": root.uri, "chain_name": args.chain})
    chain = ChainStore(root.open(), settings.chain_name)
    trust = ReadTrust.from_settings(settings, args.require_signed)
    for note in trust.notes(chain):
        print(f"ml8s: chain {chain.name!r}: {shown(note)}", file=sys.stderr)
    anchor = anchor_file(args.anchor)
    options = FollowOptions(out=args.out, pinned=args.pinned, once=args.once, poll_interval_s=args.poll_seconds)
    # its lines name the --out folder and quote store errors: printed as safe as an error line
    held = follow(chain, options, anchor=anchor, trust=trust, report=_report, warn=print_error)
    if held is None:
        print(f"ml8s: chain {chain.name!r} has no version to serve yet", file=sys.stderr)
    return 0


def anchor_file(path: str | None) -> Anchor | None:
    """The anchor in file ``path`` (an ``--anchor`` option); None when not given."""
    if path is None:
        return None
    data = read_operator_file(path, setting="--anchor", expected="an anchor file", max_bytes=RECORD_MAX_BYTES)
    return read_anchor(data, where=f"--anchor {path}")


def _report(info: ServedVersion) -> None:
    print(json.dumps(info.model_dump(mode="json"), sort_keys=True), flush=True)
