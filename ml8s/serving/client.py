"""The inference client: serve one chain version (pinned) or follow the head (tracking), verified.

A chain with a promotion gate (``ml8s.chain``'s promotion log) is followed by its promoted version, not its
head: a committed candidate is served only once promoted (``PromotionReader``).

*Pinned*: the version ``pinned`` is checked to be on the chain (reached from the head by hash links,
new versions' signatures checked as the trust policy requires), rebuilt from its FULL anchor, verified
by its weights hash, and then never changes. *Tracking*: every ``refresh`` polls the head through a
``Follower`` (refusing a head rolled back, forked or unsigned: ChainRollbackError, ChainForkError,
ChainCorruptionError) and, when it moved, builds the new version *beside* the served one: the DELTAs
from the served version up to the head applied to a copy of its weights (fast path), or, when the head
does not descend from it by DELTAs alone, a rebuild from the nearest FULL (slow path). Only a version
whose every hop verified is swapped in, by one reference assignment; any error leaves the served model
exactly as it was, and the next refresh tries again.

Blocking: ``refresh`` and ``predict_sync`` block the caller (store reads, hashing, tensor work,
onnxruntime). ``start``/``stop``/``predict`` are async and run that work in a thread; the polling task
sleeps ``poll_interval_s`` between refreshes and records a failure in ``last_error`` instead of dying.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ml8s.chain import Anchor, ChainVersion, ChainVersions, Follower, PayloadKind, PromotionReader, ReadTrust
from ml8s.errors import Ml8sError, ServingError
from ml8s.identity.settings import PlatformSettings
from ml8s.inference import Predictions
from ml8s.inference.cells import Rows
from ml8s.serving.served import Served, ServedVersion, build_served
from ml8s.weights import rebuild_weights

log = logging.getLogger(__name__)


class ClientMode(enum.StrEnum):
    PINNED = "pinned"
    TRACKING = "tracking"


class ClientConfig(BaseModel):
    """How a client serves: ``pinned`` names the version of a pinned client (None: tracking)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    pinned: int | None = Field(default=None, ge=1)
    poll_interval_s: float = Field(default=5.0, gt=0)
    state_path: str | None = None  # the follower's persisted last head (a restart still refuses a rollback)

    @property
    def mode(self) -> ClientMode:
        return ClientMode.TRACKING if self.pinned is None else ClientMode.PINNED

    @model_validator(mode="after")
    def _finite(self) -> ClientConfig:
        if self.poll_interval_s == float("inf"):
            raise ValueError("poll_interval_s must be finite")
        return self


class SwapStats(BaseModel):
    """How the client reached each version it swapped in."""

    model_config = ConfigDict(extra="forbid")

    fast: int = 0  # by DELTAs applied to a copy of the served weights
    slow: int = 0  # rebuilt from a FULL anchor


class InferenceClient:
    """Serves one chain's model (module docstring)."""

    def __init__(
        self,
        chain: ChainVersions,
        config: ClientConfig,
        *,
        anchor: Anchor | None = None,
        trust: ReadTrust | None = None,
    ) -> None:
        """``trust``: the pinned root and CHAIN_REQUIRE_SIGNED; by default read from the platform settings
        (CHAIN_TRUST_ROOT, CHAIN_REQUIRE_SIGNED), as every reader reads them: a client built in an application
        without ``trust`` never serves what ``ml8s follow`` would refuse."""
        if trust is None:
            trust = ReadTrust.from_settings(PlatformSettings.load())
        self.chain, self.config = chain, config
        self.follower = Follower(chain, state_path=config.state_path, anchor=anchor, trust=trust)
        self.promotions = PromotionReader(
            chain, state_path=config.state_path, root=trust.root, policies=self.follower.checked_policies
        )
        self.stats = SwapStats()
        self.last_error: Ml8sError | None = None
        self._served: Served | None = None
        self._pending: ChainVersion | None = None
        self._task: asyncio.Task[None] | None = None

    # -- what is served ------------------------------------------------------------------------
    @property
    def served(self) -> Served | None:
        """The model served now (an immutable snapshot; a refresh replaces it, never edits it)."""
        return self._served

    @property
    def version(self) -> ServedVersion | None:
        return self._served.info if self._served is not None else None

    def predict_sync(self, rows: Rows) -> Predictions:
        """Predict with the served version; blocks the caller.

        Raises:
            ServingError: nothing is served yet. NoModelGraphError: the version has no model graph.
        """
        served = self._served  # one read: the whole call uses one version
        if served is None:
            raise ServingError(f"chain {self.chain.name!r}: no version is served yet; expected a refresh first")
        return served.predict(rows)

    # -- updating ------------------------------------------------------------------------------
    def refresh(self) -> bool:
        """Bring the served model up to date (pinned: load once). True when a new version was swapped in.

        Raises (the served model untouched): ChainRollbackError, ChainForkError, ChainCorruptionError (the
        head), WeightsError, DeltaError, ChecksumError (a version that does not verify).
        """
        if self.config.pinned is not None:
            return self._pin(self.config.pinned)
        if (head := self.follower.poll()) is not None:
            self._pending = head
        if self._pending is None and self._served is None:
            # Unchanged since the follower's persisted head: serve what this poll read and checked, never a
            # second read of the head (a store writer could flip it in between).
            self._pending = self.follower.current
        anchor = self.follower.anchor
        # the chain has a promotion gate: serve what it promoted, never a candidate (nor a cut log's older choice)
        if self.promotions.gated(anchor.checkpoint.promotion if anchor is not None else None):
            promoted = self.promotions.served()
            # checked like the head: the promoted block must be reached from the checked head by hash links (a
            # head read again when the decision names a version committed since the poll)
            self._pending = (
                None if promoted is None else self.follower.fresh_version(promoted.counter, promoted.block_hash)
            )
        target, served = self._pending, self._served
        same = served is not None and target is not None and served.info.block_hash == target.block_hash
        if target is None or target.counter == 0 or same:
            self._pending = None
            return False
        self._swap(target)
        self._pending = None
        return True

    def _pin(self, counter: int) -> bool:
        if self._served is not None:
            return False  # pinned: never changes
        self.follower.poll()  # the head extends what this node saw, and new versions are signed as required
        self._swap(self.follower.fresh_version(counter))
        return True

    def _swap(self, target: ChainVersion) -> None:
        served = self._served
        known = served.weights if served is not None else None
        fast = known is not None and self._reached_by_deltas(target, known.version)
        weights = rebuild_weights(self.chain, target, known=known if fast else None)
        fresh = build_served(self.chain, weights)
        self._served = fresh  # the swap: one reference assignment
        if fast:
            self.stats.fast += 1
        else:
            self.stats.slow += 1
        log.info("chain %s: serving v%d (%s)", self.chain.name, target.counter, weights.weights_hash)

    def _reached_by_deltas(self, target: ChainVersion, served: ChainVersion) -> bool:
        """Whether ``target`` descends from ``served`` by DELTA versions only (then those DELTAs suffice)."""
        if target.counter <= served.counter:
            return False
        for version in self.chain.walk(target):
            if version.block_hash == served.block_hash:
                return True
            if version.header.payload_kind is not PayloadKind.DELTA or version.counter <= served.counter:
                return False
        return False

    # -- async lifecycle -----------------------------------------------------------------------
    async def start(self) -> None:
        """Load the first version (blocking work in a thread); tracking: then poll in the background.

        Raises:
            Ml8sError: the first load failed (pinned: the pinned version does not verify).
        """
        await asyncio.to_thread(self.refresh)
        if self.config.pinned is None and self._task is None:
            self._task = asyncio.create_task(self._poll(), name=f"ml8s-serving-{self.chain.name}")

    async def stop(self) -> None:
        """Stop polling (the served model stays readable)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def predict(self, rows: Rows) -> Predictions:
        """``predict_sync`` in a thread (onnxruntime blocks)."""
        return await asyncio.to_thread(self.predict_sync, rows)

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(self.config.poll_interval_s)
            try:
                await asyncio.to_thread(self.refresh)
                self.last_error = None
            except Ml8sError as exc:  # keep serving what verified; say why the new head was refused
                self.last_error = exc
                log.warning("chain %s: still serving %s: %s", self.chain.name, self.version, exc)
