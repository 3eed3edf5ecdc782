"""The registered model's aliases follow the chain: ``head`` its head, ``promoted`` the version its promotion log
serves (``models:/{name}@head``, ``@promoted``).

The chain and its promotion log are the records; an alias is MLflow's view of them, moved after them. A run
killed between the two (after its commit or its decision, before the alias moved) left the alias on the old
version, and its re-run, an early exit, moved nothing: the alias stayed stale for good. So every run, trained
or returned early, ends by converging both aliases to the records (:func:`converge_aliases`): a read when they
agree (:mod:`ml8s.registry.alias_view`, no MLflow import for a ``sqlite:///`` registry), a write only for an
alias that differs, never a new version or database. Each write first asks whether the chain moved since it was
read (:func:`_moved`), and leaves the aliases to the run that moved it; under a ``sqlite:///`` registry's lock that
rules out a write pointing an alias back. A write to an MLflow server sent before, landing after another run's
(MLflow has no conditional alias write), is stale until the next run; ``ml8s verify`` names it
(:func:`stale_aliases`). The chain, not MLflow, stays the record. A run whose work is done returns promptly
whatever MLflow does: the whole of it is bounded by ALIAS_DEADLINE_SECONDS.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from pydantic import BaseModel, ConfigDict

from ml8s.chain import ChainStore, ChainVersion, Follower, PromotionLog, PromotionReader, ReadTrust
from ml8s.context.run import RunContext
from ml8s.errors import ChainError, Ml8sError, RegistryError
from ml8s.identity.uri import public_tracking_uri
from ml8s.mlflow_probe import require_answer
from ml8s.registry.alias_view import AliasView, open_view
from ml8s.registry.confirm import registry_errors
from ml8s.registry.deadline import within_deadline
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
        chain = ChainStore(store, ctx.settings.chain_name, trust_root=trust.root)
        read = _targets(chain, trust)
        within_deadline(
            ctx.settings.alias_deadline_seconds, lambda deadline: _converge(ctx, uri, chain, read, deadline, done)
        )
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


class _ReadAt(BaseModel):
    """The chain the targets were read from: its head's block and how many promotion decisions it held by then."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    head_hash: str
    decisions: int


def _moved(chain: ChainStore, read: _ReadAt) -> str | None:
    """Why the chain is no longer the one the targets were read from (None: it still is). Two store reads, so it
    is asked right before each alias write: a run that committed or decided meanwhile moves the aliases itself, at
    its end, and this run's older targets written after its move would point them back."""
    pointer = chain.read_head()
    if pointer is None or pointer[0].block_hash != read.head_hash:
        return f"its head is {'gone' if pointer is None else f'v{pointer[0].counter}'} now"
    if PromotionLog(chain).appended_after(read.decisions):
        return f"promotion decision {read.decisions + 1} was made"
    return None


def _converge(
    ctx: RunContext,
    uri: str,
    chain: ChainStore,
    read: tuple[dict[str, ChainVersion], _ReadAt],
    deadline: float,
    done: list[AliasMove],
) -> None:
    moves = _stale(ctx, uri, read[0], deadline)
    if moves:
        _set(uri, ctx.settings.mlflow_model_name, moves, done, deadline, lambda: _moved(chain, read[1]))


def _targets(chain: ChainStore, trust: ReadTrust) -> tuple[dict[str, ChainVersion], _ReadAt]:
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
    decisions = 0
    if promotions.gated():
        # counted before the decision served is read: one appended in between reads as a chain moved (no write)
        decisions = len(promotions.log.decisions())
        if (promoted := promotions.served()) is not None:
            # committed and decided since the head was read (a run meanwhile): the head is read again, moves too
            targets[PROMOTED_ALIAS] = follower.fresh_version(promoted.counter, promoted.block_hash)
            targets[HEAD_ALIAS] = follower.current or head
    return targets, _ReadAt(head_hash=targets[HEAD_ALIAS].block_hash, decisions=decisions)


def stale_aliases(uri: str, model_name: str, chain: ChainStore, trust: ReadTrust) -> list[AliasMove]:
    """The aliases that point elsewhere than the chain, read as a follower reads it, says: what the next run's
    alias step moves (``ml8s verify`` reports them). Reads only. One cause no writer can rule out: an HTTP alias
    write sent before another run moved the chain and its aliases, landing after them (MLflow's alias API has no
    condition to write on, and a server applies a request it got whether or not its sender still waits).

    Raises:
        ChainError: the chain or its promotion log does not check. RegistryError: the registry cannot be read.
    """
    view = open_view(uri, model_name)
    return [] if view is None else _moves(view, _targets(chain, trust)[0])


def _stale(ctx: RunContext, uri: str, targets: dict[str, ChainVersion], deadline: float) -> list[AliasMove]:
    view = open_view(uri, ctx.settings.mlflow_model_name, deadline)
    if view is None:  # a sqlite:/// registry that does not exist: nothing to point, nothing created
        return []
    return _moves(view, targets)


def _moves(view: AliasView, targets: dict[str, ChainVersion]) -> list[AliasMove]:
    current = view.aliases()
    moves = []
    for alias, version in sorted(targets.items()):
        wanted = view.version_of(version.header.full_config_hash)
        if wanted is not None and current.get(alias) != wanted:
            moves.append(
                AliasMove(alias=alias, was=current.get(alias, ""), version=wanted, chain_counter=version.counter)
            )
    return moves


def _set(
    uri: str, name: str, moves: list[AliasMove], done: list[AliasMove], deadline: float, moved: Callable[[], str | None]
) -> None:
    """Make ``moves``, appending each to ``done`` once MLflow took it (a refusal halfway claims only those);
    none past ``deadline``, when the run has gone on without them, nor once ``moved`` says why the chain is no
    longer the one they were read from (its mover moves them)."""
    require_answer(uri, deadline - time.monotonic())
    try:  # under registration's sqlite lock: concurrent runs of one sqlite file would hit "database is locked"
        with _sqlite_lock(uri, deadline), silenced("mlflow.store.db.utils"):
            check_schema(uri, max(deadline - time.monotonic(), 0.0))  # MLflow's client would upgrade it in place
            with registry_errors(f"MLflow at {public_tracking_uri(uri)}"):
                from mlflow import MlflowClient

                client = MlflowClient(tracking_uri=uri, registry_uri=uri)
                for move in moves:
                    # asked under the sqlite lock: a run that moved the chain before this write is seen here, and
                    # one that moves it after writes its own aliases after this write (they wait for the lock)
                    if (why := moved()) is not None:
                        _left(name, moves[len(done) :], why)
                        return
                    if time.monotonic() >= deadline:  # after the chain's reads, which take time too
                        raise RegistryError(f"ALIAS_DEADLINE_SECONDS passed before {move.alias!r} was written")
                    client.set_registered_model_alias(name, move.alias, move.version)
                    done.append(move)
    except RegistryError as exc:
        left = ", ".join(str(m) for m in moves[len(done) :])
        raise RegistryError(f"{name!r}: {left} not made: {exc.message}") from exc


def _left(name: str, moves: list[AliasMove], why: str) -> None:
    logging.getLogger("ml8s").info(
        "MLflow aliases of %r left to the run or command that moved the chain (%s) since they were read: %s not made",
        name,
        why,
        ", ".join(str(m) for m in moves),
        extra={"step": "aliases"},
    )
