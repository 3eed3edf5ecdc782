"""Committing weights: a FULL every ``interval`` versions, a DELTA on the parent's weights in between.

``commit_weights`` hands the commit protocol a payload *builder*: on every attempt, once the parent is
known, it decides the kind and encodes the payload against that parent, so a committer that lost a race
re-encodes its DELTA on the new head rather than publishing one on a version that is no longer the
parent. The parent's weights are rebuilt (and verified) from the weights this committer last rebuilt or
committed when the new parent descends from them by DELTAs, else from the nearest FULL.

The rule (``WeightsMode.AUTO``): a DELTA when the parent carries float weights with a recorded weights
hash, ``counter - parent's FULL counter < interval``, and the tensors have the parent's names, dtypes and
shapes; a FULL otherwise: the FULL anchor of every ``interval`` versions, a changed tensor set or shape,
tensors other than float32/bfloat16/float16 (recorded without a weights hash: no DELTA follows them).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping

import torch

from ml8s.chain import (
    WEIGHTS_DELTA,
    WEIGHTS_FULL,
    ChainVersion,
    ChainVersions,
    CommitMeta,
    LocalFile,
    PayloadKind,
    PayloadSource,
    RetryPolicy,
    WeightsFields,
    commit_with_retry,
    delta_due,
    nan_weight_error,
    to_stderr,
)
from ml8s.contract import layout
from ml8s.deltas import encode_delta, encode_full, weights_hash
from ml8s.errors import ConfigError, DeltaShapeError, WeightsError
from ml8s.weights.nan import first_nan
from ml8s.weights.rebuild import (
    VersionWeights,
    is_float_weights,
    rebuild_weights,
)
from ml8s.weights.stream import StreamingCheckpointBuilder, delta_fields


class WeightsMode(enum.StrEnum):
    """What ``commit_weights`` may write: the interval rule, always a FULL, or a DELTA or nothing."""

    AUTO = "auto"
    FULL = "full"
    DELTA = "delta"


class _Builder:
    """The per-attempt payload of one set of weights (module docstring); keeps the last parent rebuilt."""

    def __init__(
        self,
        chain: ChainVersions,
        tensors: Mapping[str, torch.Tensor],
        source: LocalFile | None,
        interval: int,
        mode: WeightsMode,
        known: VersionWeights | None,
        extra: Mapping[str, PayloadSource],
    ) -> None:
        self.chain, self.interval, self.mode, self.known = chain, interval, mode, known
        self.extra = dict(extra)
        self.tensors = {name: tensors[name].detach().contiguous() for name in sorted(tensors)}
        self.float = is_float_weights(self.tensors)
        self.hash = weights_hash(self.tensors) if self.float else ""
        self.source = source
        self.full_bytes: bytes | None = None

    def __call__(self, parent: ChainVersion) -> tuple[Mapping[str, PayloadSource], WeightsFields]:
        counter = parent.counter + 1
        if self._delta_due(parent):
            base = rebuild_weights(self.chain, parent, known=self.known)
            self.known = base
            try:
                delta = encode_delta(base.tensors, self.tensors, base_hash=base.weights_hash)
            except DeltaShapeError:
                if self.mode is WeightsMode.DELTA:
                    raise
            else:
                return {**self.extra, WEIGHTS_DELTA: delta}, delta_fields(parent, self.hash)
        full = WeightsFields(weights_hash=self.hash, weights_full_counter=counter if self.float else 0)
        return {**self.extra, WEIGHTS_FULL: self._full()}, full

    def _delta_due(self, parent: ChainVersion) -> bool:
        header = parent.header
        possible = self.float and bool(header.weights_hash) and header.payload_kind is not PayloadKind.GENESIS
        if self.mode is WeightsMode.DELTA:
            if not possible:
                raise WeightsError(
                    f"chain {self.chain.name!r}: no DELTA on version {parent.counter}: "
                    + ("its block records no weights hash" if self.float else "the weights are not all float tensors")
                )
            return True
        return self.mode is WeightsMode.AUTO and self.float and delta_due(parent, self.interval)

    def _full(self) -> PayloadSource:
        if self.source is not None:
            return self.source  # the committed file itself, streamed
        if self.full_bytes is None:
            self.full_bytes = encode_full(self.tensors) if self.float else _plain_safetensors(self.tensors)
        return self.full_bytes


def commit_weights(
    chain: ChainVersions,
    tensors: Mapping[str, torch.Tensor],
    meta: CommitMeta,
    *,
    interval: int,
    mode: WeightsMode = WeightsMode.AUTO,
    source: LocalFile | None = None,
    known: VersionWeights | None = None,
    policy: RetryPolicy | None = None,
    extra: Mapping[str, PayloadSource] | None = None,
) -> ChainVersion:
    """Commit ``tensors`` as the next version, FULL or DELTA (module docstring), retrying conflicts.

    Args:
        chain: the chain (a ``ChainStore`` or its storage layer).
        tensors: the weights; CPU tensors.
        meta: what the committer says about the model (run identity, architecture, steps).
        interval: DELTA_BASE_INTERVAL, >= 1 (1: every version is a FULL).
        mode: ``AUTO`` (the interval rule), ``FULL`` or ``DELTA`` (WeightsError when a DELTA is impossible).
        source: the safetensors file ``tensors`` were read from: a FULL stores it as is, streamed.
        known: weights the caller holds (e.g. of its last commit), to rebuild the parent from quickly.
        policy: retries (default ``RetryPolicy()``).
        extra: other payload files, stored whole in every version (e.g. ``model.onnx``, ``feature_schema.json``).

    Raises:
        ConfigError: ``interval`` < 1, an ``extra`` file takes a name the weights or ``ml8s follow`` use, or a
            float tensor holds a NaN (nothing committed, FULL or DELTA).
        WeightsError (and subclasses), DeltaError: the parent's weights cannot be rebuilt, or DELTA refused.
        ConflictError, CommitDeadlineError, ...: as ``commit_with_retry``.
    """
    if interval < 1:
        raise ConfigError(f"DELTA_BASE_INTERVAL={interval}: expected a whole number >= 1")
    reserved = (WEIGHTS_FULL, WEIGHTS_DELTA, layout.SERVED_VERSION_FILE)
    # the follower writes ml8s_version.json beside the payload: a payload file of that name would be overwritten
    clash = layout.clashing_names(extra or {}, reserved)
    if clash:
        raise ConfigError(f"extra payload files {clash}: expected no file named (or under) {', '.join(reserved)}")
    builder = _Builder(chain, tensors, source, interval, mode, known, extra or {})
    # Before any attempt: a DELTA's payload holds only the changed values, so its NaN would reach a follower
    # through a hop no commit-time file check ever read.
    nan = first_nan(builder.tensors)
    if nan is not None:
        raise nan_weight_error(f"chain {chain.name!r}: the weights to commit", *nan)
    return commit_with_retry(chain, builder, meta, policy or RetryPolicy(), notify=to_stderr)


def checkpoint_builder(
    chain: ChainVersions, path: str, source: LocalFile, *, weights_hash: str, interval: int
) -> StreamingCheckpointBuilder:
    """The interval rule's builder for the checkpoint file ``path`` (``source`` and ``weights_hash`` its hashes):
    what ``ml8s.chain.CheckpointBuilder`` hands a DELTA to. It reads the file one tensor at a time
    (``ml8s.weights.stream``)."""
    return StreamingCheckpointBuilder(chain, path, source, weights_hash, interval)


def _plain_safetensors(tensors: Mapping[str, torch.Tensor]) -> bytes:
    import safetensors.torch

    return bytes(safetensors.torch.save(dict(tensors)))
