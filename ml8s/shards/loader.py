"""Loading a sharded checkpoint: one rank's shard, the whole state dict, or any rank of another world size.

Every shard opened is first checked against the metadata (rank, world size, checkpoint id, tensor entries,
header sha256), so a shard of another checkpoint is refused (WrongCheckpointError) before its bytes are
used. Tensor bytes are read through the block hashes: resharding reads only the blocks holding the rows
the target rank needs, in place on a local store, by ranged GETs (``Store.get_range``) on S3, so every byte
used is checked (header against the metadata's header sha256, data against its block's sha256) and no shard
is downloaded whole.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from types import TracebackType
from typing import TypeVar

import torch

from ml8s.errors import Ml8sError, NotFoundError, ShardChecksumError, ShardFormatError, WrongCheckpointError
from ml8s.shards import dtypes, layout
from ml8s.shards.metadata import (
    CheckpointMetadata,
    TensorRecord,
    decode_metadata,
    header_disagreements,
    metadata_problems,
)
from ml8s.shards.plan import PlanConfig, TensorPiece, TensorSpec, check_world, plan_shards
from ml8s.shards.reader import RangedObject, ShardFile, as_bytes, local_shard
from ml8s.store import LocalStore, Store
from ml8s.tempdirs import owned_tempdir

_WRONG_CHECKPOINT = {"header_rank", "header_world_size", "header_checkpoint_id"}
T = TypeVar("T")


def read_metadata(store: Store, prefix: str) -> CheckpointMetadata:
    """The checkpoint's metadata, checked for internal consistency (ShardFormatError naming the first problem)."""
    key = layout.metadata_key(prefix)
    meta = decode_metadata(store.get(key, max_bytes=layout.METADATA_MAX_BYTES), store.uri(key))
    if problems := metadata_problems(meta, prefix):
        reasons = "; ".join(reason for _, reason in problems[:5])
        raise ShardFormatError(f"{store.uri(key)}: {reasons}", check=problems[0][0])
    return meta


def load_shard(
    store: Store, prefix: str, rank: int, *, metadata: CheckpointMetadata | None = None
) -> list[TensorPiece]:
    """The pieces rank ``rank`` wrote, as written (sorted by name), every byte verified."""
    return _loaded(store, prefix, metadata, lambda meta: _shard(store, prefix, rank, meta))


def _shard(store: Store, prefix: str, rank: int, meta: CheckpointMetadata) -> list[TensorPiece]:
    check_world(rank, meta.world_size)
    with _Shards(store, prefix, meta) as shards:
        shard = shards.get(rank)
        return [
            TensorPiece(
                name=e.name,
                tensor=shard.read_entry(e),
                row_start=e.row_start,
                global_rows=None if (e.row_start, e.row_stop) == (0, e.global_rows) else e.global_rows,
            )
            for e in shard.header.entries
        ]


def load_state_dict(
    store: Store, prefix: str, *, metadata: CheckpointMetadata | None = None
) -> dict[str, torch.Tensor]:
    """Every tensor whole, assembled from all shards, keyed by name in sorted order."""
    return _loaded(store, prefix, metadata, lambda meta: _state_dict(store, prefix, meta))


def _state_dict(store: Store, prefix: str, meta: CheckpointMetadata) -> dict[str, torch.Tensor]:
    with _Shards(store, prefix, meta) as shards:
        return {
            name: _assemble(shards, name, record, 0, dtypes.row_count(record.shape))
            for name, record in sorted(meta.tensors.items())
        }


def load_resharded(
    store: Store,
    prefix: str,
    world_size: int,
    rank: int,
    *,
    plan: PlanConfig | None = None,
    metadata: CheckpointMetadata | None = None,
) -> list[TensorPiece]:
    """What the plan assigns to ``rank`` of ``world_size`` ranks (any world size, not only the written one).

    Args:
        plan: the plan config of the target layout; default: the one the checkpoint was written with.

    Returns:
        The rank's pieces, sorted by name: whole tensors (``global_rows`` None) and dim-0 row slices.
    """
    return _loaded(store, prefix, metadata, lambda meta: _resharded(store, prefix, world_size, rank, plan, meta))


def _resharded(
    store: Store, prefix: str, world_size: int, rank: int, plan: PlanConfig | None, meta: CheckpointMetadata
) -> list[TensorPiece]:
    check_world(rank, world_size)
    specs = [TensorSpec(name=n, dtype=r.dtype, shape=r.shape) for n, r in meta.tensors.items()]
    target = plan_shards(specs, world_size, plan or meta.plan).ranks[rank]
    pieces = []
    with _Shards(store, prefix, meta) as shards:
        for s in target:
            record, rows = meta.tensors[s.name], dtypes.row_count(meta.tensors[s.name].shape)
            tensor = _assemble(shards, s.name, record, s.row_start, s.row_stop)
            whole = (s.row_start, s.row_stop) == (0, rows)
            global_rows = None if whole else rows
            pieces.append(TensorPiece(name=s.name, tensor=tensor, row_start=s.row_start, global_rows=global_rows))
    return pieces


def _loaded(
    store: Store, prefix: str, metadata: CheckpointMetadata | None, load: Callable[[CheckpointMetadata], T]
) -> T:
    """``load`` under the metadata, once more under the metadata read again when a shard it lists vanished.

    A save over the checkpoint deletes the old set's shards right after committing its metadata, so a load that
    read the old metadata just before finds one gone: the new set is then loaded whole, from the start (nothing
    of the old one kept). A shard gone under metadata that did not change is damage: its NotFoundError stands.
    Metadata the caller passed describes the old set: it is told so, never handed another checkpoint's tensors.
    """
    meta = metadata or read_metadata(store, prefix)
    try:
        return load(meta)
    except NotFoundError as exc:
        try:
            fresh = read_metadata(store, prefix)
        except Ml8sError:
            raise exc from None  # the checkpoint itself gone or unreadable: the shard that vanished is the news
        if fresh == meta:
            raise
        if metadata is not None:
            raise NotFoundError(
                f"{exc.message}: {store.uri(layout.metadata_key(prefix))} was replaced since the metadata given was "
                f"read (checkpoint {meta.checkpoint_id}, now {fresh.checkpoint_id}); expected the metadata read "
                "again (read_metadata) for the set saved now"
            ) from exc
    return load(fresh)


def _assemble(shards: _Shards, name: str, record: TensorRecord, start: int, stop: int) -> torch.Tensor:
    """Rows [start, stop) of a tensor, read from the pieces that hold them straight into a new tensor."""
    dtype = dtypes.torch_dtype(record.dtype, where=f"tensor {name!r}")
    per_row = dtypes.row_bytes(record.dtype, record.shape)
    needed = [(p, max(start, p.row_start), min(stop, p.row_stop)) for p in record.pieces]
    needed = [(p, lo, hi) for p, lo, hi in needed if lo < hi and per_row]
    # open (and check against the metadata) first: a shard's header bounds its pieces by the file's real size,
    # so an edited shape in the metadata fails here instead of allocating whatever it claims
    sources = [shards.get(p.rank) for p, _, _ in needed]
    out = torch.empty((stop - start, *record.shape[1:]) if record.shape else (), dtype=dtype)
    view = as_bytes(out)
    for source, (p, lo, hi) in zip(sources, needed, strict=True):
        target = view[(lo - start) * per_row : (hi - start) * per_row]
        source.read_into(p.offset + (lo - p.row_start) * per_row, target)
    return out


class _Shards:
    """The checkpoint's shards, each opened once, on first use, and checked against the metadata."""

    def __init__(self, store: Store, prefix: str, meta: CheckpointMetadata) -> None:
        self.store, self.prefix, self.meta = store, prefix, meta
        self._open: dict[int, ShardFile] = {}
        self._stack = contextlib.ExitStack()
        self._scratch = ""

    def __enter__(self) -> _Shards:
        self._scratch = self._stack.enter_context(owned_tempdir("ml8s-shards-"))
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self._stack.close()

    def get(self, rank: int) -> ShardFile:
        if (shard := self._open.get(rank)) is not None:
            return shard
        listed = [s.file for s in self.meta.shards if s.rank == rank]
        if len(listed) != 1:  # metadata the caller passed in, not read_metadata's checked one
            where = self.store.uri(layout.metadata_key(self.prefix))
            raise ShardFormatError(
                f"{where}: lists {len(listed)} shards of rank {rank}, expected 1", check="metadata_ranks"
            )
        key = layout.file_key(self.prefix, listed[0])
        where = self.store.uri(key)
        if isinstance(self.store, LocalStore):
            path, _ = self._stack.enter_context(local_shard(self.store, key, self._scratch))
            shard = ShardFile(path, where)
        else:  # by byte ranges: a resharding load fetches the blocks holding its rows, not every shard whole
            if not (sizes := [i.size for i in self.store.list(key) if i.key == key]):
                raise NotFoundError(f"{where} does not exist")
            shard = ShardFile(RangedObject(self.store, key, sizes[0]), where)
        self._stack.callback(shard.close)
        if problems := header_disagreements(shard.header, self.meta, rank):
            check, reason = problems[0]
            if check in _WRONG_CHECKPOINT:
                raise WrongCheckpointError(
                    f"{where} is not rank {rank} of checkpoint {self.meta.checkpoint_id}: {reason}"
                )
            error = ShardChecksumError if check == "header_metadata" else ShardFormatError
            raise error(f"{where}: {reason}", check=check)
        self._open[rank] = shard
        return shard
