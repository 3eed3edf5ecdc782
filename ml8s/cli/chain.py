"""``ml8s chain init|commit|log|show|verify|gc|tensorboard|anchor|keygen|root|trust``: a model chain from a shell.

Every subcommand takes ``--root URI`` (default PIPELINE_ROOT_URI) and ``--chain NAME`` (default
CHAIN_NAME, else MLFLOW_MODEL_NAME's chain; with neither, the one chain under the root, else the
default). ``verify`` exits 0 when the chain is intact and 1 naming the first bad version.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
import time
from typing import TYPE_CHECKING

from ml8s.chain import (
    ENV_KEY,
    ENV_KEY_FILE,
    KEY_MAX_BYTES,
    Anchor,
    ChainStore,
    ChainVersion,
    ReadTrust,
    SigningKey,
    adopt_policy,
    chain_names,
    collect_garbage,
    make_anchor,
    make_root,
    root_json,
    verify_chain,
)
from ml8s.cli.args import add_require_signed, add_root, command_root, guarded, hours_arg, text_arg
from ml8s.cli.chain_payload import commit_external
from ml8s.cli.chain_views import add_tensorboard_flags, list_chains, log_versions, tensorboard
from ml8s.cli.names import named_in
from ml8s.errors import ConfigError
from ml8s.identity.settings import PlatformSettings
from ml8s.output_files import write_new
from ml8s.store.operator_files import read_operator_file
from ml8s.text import shown, terminal_json

if TYPE_CHECKING:
    from ml8s.cli.args import Subcommands

_CREATING = ("init", "commit", "trust", "root")  # verbs that may start a chain: they keep the default name


def register(commands: Subcommands) -> None:
    """Add ``ml8s chain …`` to the CLI."""
    chain = commands.add_parser("chain", help="operate a model chain (hash-linked model versions)")
    chain.set_defaults(handler=guarded(run))
    verbs = chain.add_subparsers(dest="verb", required=True)
    for name, text in (
        ("init", "create the genesis block unless the chain exists; prints the head"),
        ("commit", "commit an external safetensors checkpoint as the next version; prints it as JSON"),
        ("log", "list the versions, newest first"),
        ("show", "print one version's header as JSON (default: the head)"),
        ("verify", "verify the chain from genesis to head; exit 1 naming the first bad version"),
        ("gc", "find (and with --execute delete) orphaned or incomplete versions"),
        ("tensorboard", "print the TensorBoard log directories of versions (default: all)"),
        ("anchor", "write a signed checkpoint of the head (keep it outside the store) to --out"),
        ("keygen", "write a new ed25519 signing key (PEM) to --out; prints its key id and public key"),
        ("root", "write a trust root (public keys and a threshold) to --out, to pin as CHAIN_TRUST_ROOT"),
        ("trust", "adopt the next trust policy: the keys that may sign, signed by ML8S_SIGNING_KEY(_FILE) and --key"),
        ("reproduce", "re-train versions above --from K from their parents and data; exit 0 only if all match"),
        ("promote", "make version N what followers serve (a signed promotion decision; moves the MLflow alias)"),
        ("reject", "record that candidate N is not served (followers keep the promoted version)"),
        ("promotions", "list the promotion decisions, oldest first"),
    ):
        verb = verbs.add_parser(name, help=text, description=text)
        add_root(verb)
        verb.add_argument(
            "--chain", default="", help="chain name (default: CHAIN_NAME, else the one chain under the root)"
        )
        verb.add_argument("--json", action="store_true", help="machine-readable output")
    verbs.choices["commit"].add_argument("--payload", required=True, help="a .safetensors checkpoint file")
    verbs.choices["commit"].add_argument("--steps", type=int, default=0, help="training steps since the parent")
    verbs.choices["show"].add_argument("counter", nargs="?", type=int, help="version counter (default: head)")
    verbs.choices["verify"].add_argument("--known-head", default=None, help="a block hash seen before (>= 12 hex)")
    verbs.choices["verify"].add_argument(
        "--anchor", default=None, help="an anchor: a file (ml8s chain anchor --out), or mlflow:[MODEL[/VERSION]]"
    )
    add_require_signed(verbs.choices["verify"])
    verbs.choices["anchor"].add_argument("--out", default=None, help="anchor file to write")
    verbs.choices["anchor"].add_argument(
        "--publish", choices=["mlflow"], default=None, help="also tag the registered model and the head run's versions"
    )
    verbs.choices["anchor"].add_argument("--ttl-hours", type=float, default=24.0, help="validity (default 24)")
    verbs.choices["gc"].add_argument("--grace-hours", type=hours_arg, default=24.0, help="keep younger garbage")
    verbs.choices["gc"].add_argument("--execute", action="store_true", help="delete (default: dry run)")
    short = "apply a --grace-hours under 1 to .tmp/ too: a commit in flight loses its staged files (none may run)"
    verbs.choices["gc"].add_argument("--allow-short-grace", action="store_true", help=short)
    verbs.choices["gc"].add_argument(
        "--anchor",
        default=None,
        help="refuse unless the chain extends this anchor (a file, or mlflow:[MODEL[/VERSION]])",
    )
    verbs.choices["keygen"].add_argument("--out", required=True, help="private key file to create (mode 0600)")
    for keyed in ("trust", "root"):
        verbs.choices[keyed].add_argument(
            "--public-key", action="append", required=True, help="base64 raw ed25519 public key (repeat)"
        )
        verbs.choices[keyed].add_argument("--threshold", type=int, default=1, help="signatures needed (default 1)")
    verbs.choices["root"].add_argument("--out", required=True, help="root file to create")
    verbs.choices["trust"].add_argument(
        "--key", action="append", default=[], help="another private key file that signs the policy (repeat)"
    )
    verbs.choices["tensorboard"].add_argument("counters", nargs="*", type=int, help="versions (default: all)")
    add_tensorboard_flags(verbs.choices["tensorboard"])
    for name in ("promote", "reject"):
        verbs.choices[name].add_argument("counter", type=int, help="the version's counter")
        verbs.choices[name].add_argument("--reason", default="", type=text_arg, help="recorded with the decision")
    verbs.choices["reproduce"].add_argument(
        "--from", dest="start", required=True, type=int, metavar="K", help="re-train versions K+1 .. head"
    )
    verbs.choices["reproduce"].add_argument(
        "--anchor",
        default=None,
        help="refuse unless the chain extends this anchor (a file, or mlflow:[MODEL[/VERSION]])",
    )


def run(args: argparse.Namespace) -> int:
    pipeline_root = command_root(args)
    settings = PlatformSettings.load(os.environ, {"pipeline_root_uri": pipeline_root.uri, "chain_name": args.chain})
    verb: str = args.verb
    if verb == "keygen":
        return _keygen(args.out)
    if not args.chain and not named_in(os.environ) and verb not in _CREATING:
        # Nobody named a chain: the one under the root; with none or several, log lists them.
        names = chain_names(pipeline_root.open())
        if len(names) == 1:
            settings = PlatformSettings.load(
                os.environ, {"pipeline_root_uri": pipeline_root.uri, "chain_name": names[0]}
            )
        elif verb == "log":
            return list_chains(pipeline_root.open(), as_json=args.json)
        elif names and settings.chain_name not in names:
            raise ConfigError(f"the root holds chains {', '.join(names)}; expected --chain NAME (or CHAIN_NAME)")
    if verb == "reproduce":
        from ml8s.audit.anchor_tags import load_anchor
        from ml8s.cli.reproduce import reproduce

        trust = ReadTrust.from_settings(settings, getattr(args, "require_signed", None))
        anchor = load_anchor(args.anchor, settings)
        root_uri, name = settings.pipeline_root_uri, settings.chain_name
        return reproduce(root_uri, name, args.start, as_json=args.json, trust=trust, anchor=anchor)
    if verb == "root":
        root = make_root(args.public_key, args.threshold)
        _write_new(args.out, root_json(root), mode=0o644)
        _print({"root_id": root.root_id, "root_file": args.out, "threshold": root.threshold, "keys": len(root.keys)})
        return 0
    signer = SigningKey.from_env(os.environ)
    trust = ReadTrust.from_settings(settings, getattr(args, "require_signed", None))
    store = pipeline_root.open()
    chain = ChainStore(store, settings.chain_name, signer=signer, trust_root=trust.root)
    if verb in ("promote", "reject", "promotions"):
        from ml8s.cli.promote import promotion_verb

        return promotion_verb(args, settings, chain)
    if verb == "anchor":
        if signer is None or not 0 < args.ttl_hours <= 24 * 366 or not (args.out or args.publish):
            raise ConfigError(
                f"chain anchor: needs {ENV_KEY} or {ENV_KEY_FILE}, --ttl-hours in (0, 8784], and --out or --publish"
            )
        anchor = make_anchor(chain, signer, dt.timedelta(hours=args.ttl_hours), dt.datetime.now(dt.UTC), trust.root)
        if args.out:
            _write_new(args.out, anchor.model_dump_json(indent=2).encode("utf-8") + b"\n", mode=0o644)
        published = _publish(settings, anchor, chain) if args.publish else None
        _print({**anchor.checkpoint.model_dump(mode="json"), "published": published})
    elif verb == "trust":
        signers = ([signer] if signer is not None else []) + [_key_file(path) for path in args.key]
        if not signers:
            raise ConfigError(
                f"chain trust: set {ENV_KEY} or {ENV_KEY_FILE} (or --key) to keys the current policy trusts"
            )
        policy = adopt_policy(chain, signers, args.public_key, threshold=args.threshold, root=trust.root)
        _print(policy.model_dump(mode="json", by_alias=True))
    elif verb == "init":
        _print(_summary(chain.init()))
    elif verb == "commit":
        _print(_summary(commit_external(chain, args.payload, args.steps, settings.delta_base_interval)))
    elif verb == "log":
        return log_versions(chain, as_json=args.json, summary={v.counter: _summary(v) for v in chain.list()})
    elif verb == "show":
        version = chain.head() if args.counter is None else chain.get(args.counter)
        _print({**_summary(version), "header": version.header.model_dump(mode="json")})
    elif verb == "verify":
        from ml8s.audit.anchor_tags import load_anchor  # MLflow's client only for an mlflow: anchor
        from ml8s.audit.chain_check import weights_check

        report = verify_chain(
            chain,
            known_head=args.known_head,
            anchor=load_anchor(args.anchor, settings),
            require_signed=trust.require_signed,
            weights=weights_check,
            root=trust.root,
        )
        if args.json:
            _print(report.model_dump(mode="json"))
        elif report.ok:
            print(f"PASS chain {chain.name!r}: {len(report.chain)} versions, head v{report.head_counter}")
            for line in report.unchecked:
                print(f"  not checked: {shown(line)}", file=sys.stderr)
        else:
            first = min(report.findings, key=lambda f: (f.counter is None, f.counter or 0))
            where = f" at version {first.counter} ({first.version_dir})" if first.counter is not None else ""
            # a reason names store keys, which a store writer chooses: shown, so no escape sequence reaches the terminal
            print(f"FAIL chain {chain.name!r}{where}: {first.check}: {shown(first.reason)}")
            for finding in report.findings:
                at = f"v{finding.counter} " if finding.counter is not None else ""
                print(f"  {finding.check}: {at}{shown(finding.reason)}", file=sys.stderr)
        return 0 if report.ok else 1
    elif verb == "gc":
        from ml8s.audit.anchor_tags import load_anchor

        gc = collect_garbage(
            chain,
            grace_s=args.grace_hours * 3600,
            dry_run=not args.execute,
            anchor=load_anchor(args.anchor, settings),
            local_now=time.time(),
            trust=trust,
            allow_short_grace=args.allow_short_grace,
        )
        _print(gc.model_dump(mode="json"))
    else:
        return tensorboard(args, chain)
    return 0


def _write_new(path: str, data: bytes, *, mode: int) -> None:
    def fail(reason: str) -> ConfigError:
        return ConfigError(f"--out {path}: {reason}; expected a new file that can be written whole")

    write_new(path, data, mode, fail)


def _publish(settings: PlatformSettings, anchor: Anchor, chain: ChainStore) -> dict[str, object]:
    """Tag the registered model MLFLOW_MODEL_NAME and the head run's versions with the anchor."""
    from ml8s.audit.anchor_tags import publish_anchor

    head = chain.head()
    uri = settings.mlflow_tracking_uri_for_registry()
    where = publish_anchor(uri, settings.mlflow_model_name, anchor, head.header.full_config_hash)
    return where.model_dump(mode="json")


def _key_file(path: str) -> SigningKey:
    data = read_operator_file(path, setting="--key", expected="a private key file", max_bytes=KEY_MAX_BYTES)
    return SigningKey.from_text(data, where=f"--key {path}")


def _keygen(out: str) -> int:
    key = SigningKey.generate()
    _write_new(out, key.private_pem(), mode=0o600)
    _print({"key_id": key.key_id, "private_key_file": out, "public_key": key.public_key})
    return 0


def _summary(version: ChainVersion) -> dict[str, object]:
    h = version.header
    return {
        "block_hash": version.block_hash,
        "content_hash": version.content_hash,
        "counter": version.counter,
        "global_step": h.global_step,
        "payload_kind": str(h.payload_kind),
        "stored_bytes": sum(f.size for f in h.files),
        "weights_hash": h.weights_hash,
        "parent_block_hash": h.parent_block_hash,
        "run_id": h.run_id,
        "semver": version.semver,
        "version_dir": version.version_dir,
    }


def _print(obj: object) -> None:
    print(terminal_json(obj))
