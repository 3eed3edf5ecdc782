"""The producer side: publish a trainer's weights to a chain, as a FULL anchor or a DELTA on the head.

Each publish is one chain commit (compare-and-swap, retried on conflict: ml8s.chain.commit_weights), so
many producers may publish to one chain; a DELTA is always encoded on the version it is committed on,
re-encoded when a race moves the head. The producer keeps a private copy of the last weights it
published, so its next DELTA rebuilds the head from them (one DELTA per version in between) rather than
from the FULL anchor. Async like the consumer: the commit runs in a thread.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Mapping

import torch
from pydantic import BaseModel, ConfigDict

from ml8s.chain import ChainVersions, CommitMeta, RetryPolicy
from ml8s.deltas import weights_hash
from ml8s.weights import VersionWeights, WeightsMode, commit_weights, is_float_weights


class PublishResult(BaseModel):
    """What a publish committed: the version, its kind, and the bytes stored against the weights' size."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    counter: int
    block_hash: str
    version_dir: str
    payload_kind: str
    weights_hash: str
    stored_bytes: int
    weights_bytes: int


class DeltaProducer:
    """Publishes weights to one chain; ``interval`` is DELTA_BASE_INTERVAL (a FULL every N versions)."""

    def __init__(self, chain: ChainVersions, *, interval: int, policy: RetryPolicy | None = None) -> None:
        self.chain, self.interval, self.policy = chain, interval, policy or RetryPolicy()
        self._last: VersionWeights | None = None

    async def publish(self, state_dict: Mapping[str, torch.Tensor], meta: CommitMeta) -> PublishResult:
        """FULL or DELTA by the interval rule (ml8s.chain.commit_weights). Blocks (in a thread): the commit."""
        return await asyncio.to_thread(functools.partial(self.publish_sync, state_dict, meta, WeightsMode.AUTO))

    async def publish_full(self, state_dict: Mapping[str, torch.Tensor], meta: CommitMeta) -> PublishResult:
        """A FULL anchor, whatever the interval says."""
        return await asyncio.to_thread(functools.partial(self.publish_sync, state_dict, meta, WeightsMode.FULL))

    async def publish_delta(self, state_dict: Mapping[str, torch.Tensor], meta: CommitMeta) -> PublishResult:
        """A DELTA on the head's weights, whatever the interval says.

        Raises:
            WeightsError: the head has no weights hash, or the weights are not float tensors.
            DeltaShapeError: the tensor names, dtypes or shapes differ from the head's (publish a FULL).
        """
        return await asyncio.to_thread(functools.partial(self.publish_sync, state_dict, meta, WeightsMode.DELTA))

    def publish_sync(
        self,
        state_dict: Mapping[str, torch.Tensor],
        meta: CommitMeta,
        mode: WeightsMode = WeightsMode.AUTO,
        extra: Mapping[str, bytes] | None = None,
    ) -> PublishResult:
        """``publish`` (``mode``), blocking the caller; ``extra``: other payload files, stored whole."""
        # A private copy: a trainer keeps updating its tensors in place after publishing them.
        tensors = {name: state_dict[name].detach().to("cpu", copy=True).contiguous() for name in sorted(state_dict)}
        version = commit_weights(
            self.chain,
            tensors,
            meta,
            interval=self.interval,
            mode=mode,
            known=self._last,
            policy=self.policy,
            extra=dict(extra or {}),
        )
        header = version.header
        if header.weights_hash and is_float_weights(tensors) and header.weights_hash == weights_hash(tensors):
            self._last = VersionWeights(version=version, tensors=tensors, weights_hash=header.weights_hash)
        return PublishResult(
            counter=version.counter,
            block_hash=version.block_hash,
            version_dir=version.version_dir,
            payload_kind=str(header.payload_kind),
            weights_hash=header.weights_hash,
            stored_bytes=sum(f.size for f in header.files),
            weights_bytes=sum(t.numel() * t.element_size() for t in tensors.values()),
        )
