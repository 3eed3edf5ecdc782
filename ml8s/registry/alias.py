"""The registered model's aliases follow the chain: ``head`` its head, ``promoted`` the version its promotion log
serves (``models:/{name}@head``, ``@promoted``).

The chain and its promotion log are the records; an alias is MLflow's view of them, moved after them. A run
killed between the two (after its commit or its decision, before the alias moved) left the alias on the old
version, and its re-run, an early exit, moved nothing: the alias stayed stale for good. So every run, trained
or returned early, ends by converging both aliases to the records (:func:`converge_aliases`): a read when they
agree (:mod:`ml8s.registry.alias_view`, no MLflow import for a ``sqlite:///`` registry), a write only for an
alias that differs, never a new version or database. With two runs committing at once, the later commit's
alias may land first; the next run of either puts it right. The chain, not MLflow, stays the record. A run whose
work is done returns promptly whatever MLflow does: the whole of it is bounded by ALIAS_DEADLINE_SECONDS.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from pydantic import BaseModel, ConfigDict

from ml8s.chain import ChainStore, ChainVersion, Follower, PromotionReader, ReadTrust
from ml8s.context.run import RunContext
from ml8s.errors import ChainError, Ml8sError, RegistryError
from ml8s.identity.uri import public_tracking_uri
from ml8s.mlflow_probe import require_answer
from ml8s.registry.alias_view import open_view
from ml8s.registry.confirm import registry_errors
from ml8s.registry.mlflow_model import silenced
from ml8s.registry.promoted_alias import PROMOTED_ALIAS
from ml8s.registry.registration import _sqlite_lock
from ml8s.registry.schema import check_schema
from ml8s.store import Store

HEAD_ALIAS = "head"


class AliasMove(BaseModel):
    """One alias moved to what the chain records: ``was`` is the version it pointed at ("" for none)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    alias: str
    was: str
    version: str
    chain_counter: int

    def __str__(self) -> str:
        was = f"version {self.was}" if self.was else "no version"
        return f"alias {self.alias!r}: {was} -> version {self.version} (chain v{self.chain_counter})"


def converge_aliases(ctx: RunContext, store: Store) -> list[AliasMove]:
    """Point ``head`` at the MLflow version of the chain's head and ``promoted`` at that of the served version,
    where they point elsewhere or nowhere; returns the moves made (none: they agreed, or MLflow is not configured).

    An alias whose chain version has no version in this registry (a version committed by ``ml8s chain commit``,
    or registered in another MLflow) is left as it is. The run's result stands either way: a chain head or
    promotion log that cannot be read, a registry that cannot be read or written, or all of it not done within
    ALIAS_DEADLINE_SECONDS, is a warning naming it, never a failure (the next run tries again).
    """
    uri = ctx.settings.mlflow_tracking_uri
    if not uri:  # an s3:// root without MLFLOW_TRACKING_URI: no registry to converge
        return []
    name = ctx.settings.mlflow_model_name
    done: list[AliasMove] = []
    try:
        # Read as every chain reader reads (CHAIN_TRUST_ROOT, CHAIN_REQUIRE_SIGNED): a head a store writer appended
        # unsigned, which followers refuse, must not become MLflow's @head either. Read before the deadline starts,
        # bounded by the store's own timeouts as every chain read of the run: ALIAS_DEADLINE_SECONDS bounds the
        # registry (a long chain on S3 is thousands of requests, and would miss a deadline on every run)
        trust = ReadTrust.from_settings(ctx.settings)
        targets = _targets(ChainStore(store, ctx.settings.chain_name, trust_root=trust.root), trust)
        _within(ctx.settings.alias_deadline_seconds, lambda deadline: _converge(ctx, uri, targets, deadline, done))
    except Ml8sError as exc:  # the chain's damage too: ml8s chain verify reports it, the run's work stands
        logging.getLogger("ml8s").warning(
            "MLflow aliases of %r not brought in line with chain %r: %s (the next run tries again)",
            name,
            ctx.settings.chain_name,
            exc,
            extra={"step": "aliases"},
        )
    made = list(done)  # what MLflow took by now: a move left running past the deadline is not claimed
    for move in made:
        ctx.log("aliases", f"MLflow {name!r} {move}")
    return made


def _within(seconds: int, work: Callable[[float], None]) -> None:
    """``work(deadline)`` on a thread of its own, waited for ``seconds`` at most.

    The early exit of a run whose work is done must return promptly, and MLflow's client waits minutes on a hung
    server (MLFLOW_HTTP_REQUEST_TIMEOUT per request, then retries) with no bound to hand it: so the work runs on a
    daemon thread, left to end with its connection, and is told the deadline, past which it writes nothing.

    Raises:
        RegistryError: ``work`` was not done within ``seconds``; or what ``work`` raised.
    """
    deadline = time.monotonic() + seconds
    outcome: list[Exception | None] = []

    def run() -> None:
        try:
            work(deadline)
            outcome.append(None)
        except Exception as exc:  # handed to the caller's thread, which warns of it or raises it
            outcome.append(exc)

    thread = threading.Thread(target=run, name="ml8s-aliases", daemon=True)
    thread.start()
    thread.join(max(deadline - time.monotonic(), 0.0))
    late = f"not done within ALIAS_DEADLINE_SECONDS={seconds} s"
    if not outcome:
        raise RegistryError(
            f"{late} (by then the registry had not answered, or MLflow was still retrying the errors it answered, "
            "or the lock beside a sqlite:/// registry was still held); expected the registry to answer within it"
        )
    failed = outcome[0]
    if isinstance(failed, Ml8sError) and time.monotonic() >= deadline:  # cut short by the deadline: say so
        raise RegistryError(f"{late}: {failed.message}") from failed
    if failed is not None:
        raise failed


def _converge(
    ctx: RunContext, uri: str, targets: dict[str, ChainVersion], deadline: float, done: list[AliasMove]
) -> None:
    moves = _stale(ctx, uri, targets, deadline)
    if moves:
        _set(uri, ctx.settings.mlflow_model_name, moves, done, deadline)


def _targets(chain: ChainStore, trust: ReadTrust) -> dict[str, ChainVersion]:
    """The versions the aliases name, read as a follower serves them (CHAIN_TRUST_ROOT, CHAIN_REQUIRE_SIGNED,
    signatures, evidence, the promotion log against the policies checked): MLflow serves ``@head`` and
    ``@promoted`` too, and a head or decision a store writer forged (unsigned, or under a rewritten ``trust/``)
    would otherwise point them at a registered version of its choice.

    Raises:
        ChainError: the chain or its promotion log does not check (nothing is moved).
    """
    follower = Follower(chain, trust=trust)
    follower.poll()
    head = follower.current
    if head is None:  # poll() always sets it; a guard for the type checker
        raise ChainError(f"chain {chain.name!r}: no head was read")
    targets = {HEAD_ALIAS: head}
    promotions = PromotionReader(chain, root=trust.root, policies=follower.checked_policies)
    if promotions.gated() and (promoted := promotions.served()) is not None:
        # committed and decided since the head was read (a run meanwhile): the head is read again, and moves too
        targets[PROMOTED_ALIAS] = follower.fresh_version(promoted.counter, promoted.block_hash)
        targets[HEAD_ALIAS] = follower.current or head
    return targets


def _stale(ctx: RunContext, uri: str, targets: dict[str, ChainVersion], deadline: float) -> list[AliasMove]:
    view = open_view(uri, ctx.settings.mlflow_model_name, deadline)
    if view is None:  # a sqlite:/// registry that does not exist: nothing to point, nothing created
        return []
    current = view.aliases()
    moves = []
    for alias, version in sorted(targets.items()):
        wanted = view.version_of(version.header.full_config_hash)
        if wanted is not None and current.get(alias) != wanted:
            moves.append(
                AliasMove(alias=alias, was=current.get(alias, ""), version=wanted, chain_counter=version.counter)
            )
    return moves


def _set(uri: str, name: str, moves: list[AliasMove], done: list[AliasMove], deadline: float) -> None:
    """Make ``moves``, appending each to ``done`` once MLflow took it (a refusal halfway claims only those);
    none past ``deadline``, when the run has gone on without them."""
    require_answer(uri, deadline - time.monotonic())
    try:  # under registration's sqlite lock: concurrent runs of one sqlite file would hit "database is locked"
        with _sqlite_lock(uri, deadline), silenced("mlflow.store.db.utils"):
            check_schema(uri)  # MLflow's client would upgrade an older database in place
            with registry_errors(f"MLflow at {public_tracking_uri(uri)}"):
                from mlflow import MlflowClient

                client = MlflowClient(tracking_uri=uri, registry_uri=uri)
                for move in moves:
                    if time.monotonic() >= deadline:
                        raise RegistryError(f"ALIAS_DEADLINE_SECONDS passed before {move.alias!r} was written")
                    client.set_registered_model_alias(name, move.alias, move.version)
                    done.append(move)
    except RegistryError as exc:
        left = ", ".join(str(m) for m in moves[len(done) :])
        raise RegistryError(f"{name!r}: {left} not made: {exc.message}") from exc
