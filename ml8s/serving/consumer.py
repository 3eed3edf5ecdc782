"""The consumer side of weights on a chain: find versions, rebuild them, apply a DELTA in place.

The same code for every store (local directory, S3, radosgw): it reads through ``ml8s.chain``, which
reads through ``ml8s.store.Store``. The API is async: each call runs the blocking store reads, hashing
and tensor work in a thread pool (``asyncio.to_thread``, or the executor given), so an event loop that
serves requests keeps running while a model is fetched. The ``*_sync`` methods are the same calls,
blocking the caller.

Versions are named by their chain counter. A version's weights are always checked against the weights
hash its block records, and the block against the chain: every call reads through a ``Follower`` (the one
checked path, ml8s.chain.trusted: signatures, the pinned root, rollback, evidence), whose checked head
is where versions are found by hash links.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, MutableMapping
from concurrent.futures import Executor
from typing import TypeVar

import torch

from ml8s.chain import Anchor, ChainVersion, ChainVersions, Follower, PayloadKind, ReadTrust
from ml8s.deltas import weights_hash
from ml8s.errors import DeltaBaseMismatchError, DeltaDtypeError, VersionNotFoundError, WeightsMismatchError
from ml8s.identity.settings import PlatformSettings
from ml8s.serving.served import Served, build_served
from ml8s.weights import VersionWeights, apply_hop, rebuild_weights

T = TypeVar("T")


class DeltaConsumer:
    """Reads weights from one chain (module docstring)."""

    def __init__(
        self,
        chain: ChainVersions,
        *,
        executor: Executor | None = None,
        trust: ReadTrust | None = None,
        anchor: Anchor | None = None,
    ) -> None:
        """``trust``: the pinned root and CHAIN_REQUIRE_SIGNED; by default from the platform settings, as the
        inference client reads them: a consumer built without it never reads what ``ml8s follow`` refuses."""
        if trust is None:
            trust = ReadTrust.from_settings(PlatformSettings.load())
        self.chain, self._executor = chain, executor
        self.follower = Follower(chain, trust=trust, anchor=anchor)

    async def _run(self, call: Callable[[], T]) -> T:
        if self._executor is None:
            return await asyncio.to_thread(call)
        return await asyncio.get_running_loop().run_in_executor(self._executor, call)

    async def discover_latest(self, before: int | None = None) -> ChainVersion | None:
        """The newest version above genesis (with ``before``: the newest below that counter), or None.

        Blocks (in the pool): one head read, and one block read per version walked below the head.
        """
        return await self._run(functools.partial(self.discover_latest_sync, before))

    def _version(self, counter: int) -> ChainVersion:
        """Version ``counter`` below the head this call polled and checked (VersionNotFoundError: none). A counter
        above that head (committed since the poll read it: a producer's notice can outrun the read) reads the head
        once more, with every check of a poll, rather than calling a committed version missing."""
        self.follower.poll()
        return self.follower.fresh_version(counter)

    def discover_latest_sync(self, before: int | None = None) -> ChainVersion | None:
        self.follower.poll()
        for version in self.chain.walk(self.follower.current):
            if version.counter == 0:
                return None
            if before is None or version.counter < before:
                return version
        return None

    async def get_checkpoint(self, counter: int, *, known: VersionWeights | None = None) -> Served | None:
        """Version ``counter`` rebuilt and verified, with its other payload files; None if the chain has no
        such version. ``known``: weights the caller holds (fast path: only the DELTAs above them are read);
        otherwise the nearest FULL below is the start (slow path).

        Blocks (in the pool): the walk from the head, the payload downloads, the DELTA applications and
        the weights hashes.

        Raises:
            WeightsMissingError, WeightsMismatchError, DeltaError, ChecksumError: the version does not rebuild.
        """
        return await self._run(functools.partial(self.get_checkpoint_sync, counter, known=known))

    def get_checkpoint_sync(self, counter: int, *, known: VersionWeights | None = None) -> Served | None:
        try:
            version = self._version(counter)
        except VersionNotFoundError:
            return None
        if known is not None and known.version.block_hash == version.block_hash:
            # no DELTA's result hash will prove them: the caller may have edited its tensors since they were served
            found = weights_hash(known.tensors)
            if found != (version.header.weights_hash or known.weights_hash):
                raise WeightsMismatchError(
                    f"chain {self.chain.name!r} version {counter} ({version.version_dir}): the weights given as known "
                    f"hash to {found}, the block records weights hash {version.header.weights_hash or '-'}"
                )
        return build_served(self.chain, rebuild_weights(self.chain, version, known=known))

    async def apply_delta_in_place(
        self, tensors: MutableMapping[str, torch.Tensor], target: int, current: int
    ) -> VersionWeights | None:
        """Update ``tensors`` (version ``current``'s weights) to version ``target`` by its DELTA, in place.

        All or nothing: the tensors are either ``target``'s weights, verified by the hash ``target``'s
        block records, or left exactly as they were.

        Returns:
            The updated weights (the same tensor objects), or None when ``target`` is no DELTA on
            ``current`` or no version of the chain (the caller takes the slow path: ``get_checkpoint``).

        Raises:
            DeltaBaseMismatchError: the tensors are not ``current``'s weights, by their weights hash (nothing
                changed): also when they are ``target``'s already (a DELTA applied twice is refused, not repeated).
            WeightsMismatchError, DeltaError, ChecksumError: the DELTA does not verify (nothing changed).
            DeltaDtypeError: a value of ``tensors`` is no tensor (nothing changed).
            DeltaNanError: the DELTA writes a NaN weight (a chain written by an older ml8s, or by hand; nothing
                changed), as ``get_checkpoint`` refuses such a version.
        """
        return await self._run(functools.partial(self.apply_delta_in_place_sync, tensors, target, current))

    def apply_delta_in_place_sync(
        self, tensors: MutableMapping[str, torch.Tensor], target: int, current: int
    ) -> VersionWeights | None:
        try:
            version = self._version(target)
        except VersionNotFoundError:
            return None  # no such version is a DELTA on ``current`` either: get_checkpoint says None too
        header = version.header
        if header.payload_kind is not PayloadKind.DELTA or header.delta_base_counter != current or target < 1:
            return None
        base = self.follower.version(current)
        if base.block_hash != header.delta_base_block_hash or not base.header.weights_hash:
            raise WeightsMismatchError(
                f"chain {self.chain.name!r} version {target} is a DELTA on block {header.delta_base_block_hash}; "
                f"version {current} on the chain is block {base.block_hash}"
            )
        for name in sorted(tensors):
            if not isinstance(tensors[name], torch.Tensor):
                raise DeltaDtypeError(
                    f"tensors[{name!r}] is a {type(tensors[name]).__name__}; expected version {current}'s weights as "
                    "torch tensors"
                )
        # Hashed, not taken on the caller's word: a DELTA is assignment, so applied again to its own result (or
        # to any weights agreeing at its positions) it verified and "succeeded" on weights that were not its base.
        found = weights_hash(tensors)
        if found != base.header.weights_hash:
            said = f"they are already version {target}'s" if found == header.weights_hash else f"they hash to {found}"
            raise DeltaBaseMismatchError(
                f"chain {self.chain.name!r}: the tensors given as version {current}'s weights are not: {said}; "
                f"expected weights hash {base.header.weights_hash} (nothing was changed)"
            )
        held = VersionWeights(version=base, tensors=dict(tensors), weights_hash=found)
        # checked before the writes: after them a NaN could not be taken back, and the caller serves these tensors
        return apply_hop(self.chain, held, version, refuse_nan=True)
