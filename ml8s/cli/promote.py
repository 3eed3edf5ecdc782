"""``ml8s chain promote N`` / ``reject N`` / ``promotions``: the promotion gate by hand (docs/chain.md)."""

from __future__ import annotations

import argparse
import sys

from ml8s.chain import ChainStore, PromotionLog, ReadTrust, SignedDecision, TrustedReader, load_policies
from ml8s.cli.args import print_warning
from ml8s.errors import ChainError, ConfigError, RegistryError
from ml8s.identity.settings import PlatformSettings
from ml8s.text import terminal_json


def promotion_verb(args: argparse.Namespace, settings: PlatformSettings, chain: ChainStore) -> int:
    """Run ``promote``, ``reject`` or ``promotions``; prints JSON (the decision, or every one)."""
    log = PromotionLog(chain)
    if args.verb == "promotions":
        decisions = log.decisions()
        if args.json:
            _print([d.model_dump(mode="json") for d in decisions])
        for signed in [] if args.json else decisions:
            d = signed.decision
            print(
                f"#{d.sequence:<5} {d.action.upper():<8} v{d.counter:<6} serving v{d.served_counter:<6} "
                f"{'signed' if signed.signature else 'unsigned':<8} {d.rule}"
            )
        return 0
    if args.counter is None or args.counter < 1:
        raise ConfigError(f"chain {args.verb}: expected a version counter >= 1")
    version = chain.get(args.counter)
    trusted = TrustedReader(chain, trust=ReadTrust.from_settings(settings))
    if args.verb == "promote":  # as followers check it: this operator's key never signs a version they refuse
        trusted.check(version)
    latest = log.latest()
    head = None
    if latest is None:
        # a chain with no decision: followers serve its head, read as they read it (a store writer's unsigned head
        # would otherwise be recorded as served, signed by this operator's key). A promotion only asks whether the
        # version just checked is that head: a forged head must not keep the operator from promoting another
        head = trusted.head() if args.verb == "reject" else chain.head()
    served = latest.decision.served_counter if latest is not None else head.counter if head is not None else 0
    if args.verb == "reject" and served == version.counter:
        gateless = " (the chain has no promotion decision: they serve its head)" if latest is None else ""
        raise ChainError(
            f"v{version.counter} is the version followers serve{gateless}; expected a candidate (promote another "
            "version to stop serving it)"
        )
    if args.verb == "reject" and latest is None:
        log.keep_head_served(head, chain.signer)
    policies = load_policies(chain, chain.trust_root)[0]
    rotated = latest is not None and latest.decision.trust_policy_version < len(policies)
    if args.verb == "promote" and served == version.counter and not rotated:  # after a rotation: re-signed
        print(f"ml8s: chain {chain.name!r} v{version.counter} is already the promoted version", file=sys.stderr)
        if latest is not None:  # stdout still carries the decision in force, as after a promotion
            # and MLflow's alias is moved again: the first promote's move may have been refused (a lock held past
            # ALIAS_DEADLINE_SECONDS), and this command again is what its warning offers
            _move_alias(settings, version.header.full_config_hash)
            _print(latest.model_dump(mode="json"))
        return 0
    rule = f"manual: ml8s chain {args.verb}" + (f" ({args.reason})" if args.reason else "")
    decided = log.decide(args.verb, version, rule, chain.signer)
    if args.verb == "promote":
        _move_alias(settings, version.header.full_config_hash)
    _print(decided.model_dump(mode="json"))
    return 0


def decision_of(decisions: list[SignedDecision], block_hash: str) -> str:
    """What ``chain log`` shows of a version's promotion: promoted, rejected, or a candidate."""
    last = next((d for d in reversed(decisions) if d.decision.block_hash == block_hash), None)
    if last is None:
        return "candidate" if decisions else ""
    return "promoted" if last.decision.action == "promote" else "rejected"


def _move_alias(settings: PlatformSettings, full_config_hash: str) -> None:
    from ml8s.registry.promoted_alias import PROMOTED_ALIAS, move_promoted_alias

    if not full_config_hash:
        return
    try:
        moved = move_promoted_alias(settings, full_config_hash)
    except (RegistryError, ConfigError) as exc:  # the decision stands; say why MLflow's view lags
        print_warning(f"the MLflow alias {PROMOTED_ALIAS!r} was not moved: {exc}")  # names the tracking URI
        return
    if moved is not None:
        print(
            f"ml8s: MLflow alias {PROMOTED_ALIAS!r} of {settings.mlflow_model_name!r} -> version {moved}",
            file=sys.stderr,
        )


def _print(obj: object) -> None:
    print(terminal_json(obj))
