"""Writing a sharded checkpoint: each rank its own shard, then rank 0 the metadata, last.

A shard is streamed: its header's size is known from the pieces' names and shapes, so a zeroed header is
written first, then each tensor's bytes straight from the tensor's memory in chunks (hashed on the way),
then the real header over the zeros. Only one chunk of one tensor is in flight: never the whole shard.
The finished local file goes to the store through ``Store.put_file_atomic`` (tmp key, fsynced, then moved),
so a reader never sees half a shard. A save over an existing checkpoint writes each shard under its generation
name (:mod:`ml8s.shards.layout`), never over another shard the old metadata lists: the new metadata is the
commit, and the old set's files are deleted after it.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from typing import BinaryIO

import torch
from pydantic import BaseModel, ConfigDict, Field

from ml8s.errors import ShardFormatError, ShardInputError, ShardVerificationError, StoreError
from ml8s.shards import dtypes, layout
from ml8s.shards.format import (
    FORMAT_VERSION,
    MAX_NDIM,
    ShardHeader,
    TensorEntry,
    align,
    block_count,
    check_entries,
    encode_header,
    header_length,
    size_problem,
)
from ml8s.shards.hashing import DataHasher
from ml8s.shards.metadata import (
    CheckpointMetadata,
    ShardFileInfo,
    ShardReceipt,
    build_metadata,
    encode_metadata,
    plain_name_free,
)
from ml8s.shards.plan import PlanConfig, TensorPiece, check_world, split_state_dict
from ml8s.store import Store
from ml8s.text import is_utf8

MiB = 1024 * 1024


class WriterConfig(BaseModel):
    """How shards are written. ``block_size``: the unit a reader verifies ranged reads by; ``chunk_bytes``:
    how much of a tensor is written (and hashed) per call; ``local_tmp_dir``: where the shard is built
    before upload (None: the system temp dir); ``plan``: recorded in the metadata for resharding."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    block_size: int = Field(default=4 * MiB, ge=64, le=1 << 30, multiple_of=64)
    chunk_bytes: int = Field(default=8 * MiB, ge=1)
    local_tmp_dir: str | None = None
    plan: PlanConfig = PlanConfig()


def write_shard(
    store: Store,
    prefix: str,
    rank: int,
    world_size: int,
    tensors: Sequence[TensorPiece] | Mapping[str, torch.Tensor],
    *,
    checkpoint_id: str,
    config: WriterConfig | None = None,
) -> ShardReceipt:
    """Write rank ``rank``'s shard, ``{prefix}_shard_{rank}.shard``; returns the receipt rank 0 needs.

    Args:
        tensors: this rank's pieces (:func:`pieces_for_rank` of a replicated state dict, or the rank's own
            slices), or a mapping of whole tensors. Names must be unique within a shard.
        checkpoint_id: 64 hex digits naming the checkpoint, the same on every rank.
    """
    config = config or WriterConfig()
    check_world(rank, world_size)
    layout.check_checkpoint_id(checkpoint_id)
    name = layout.shard_name(prefix, rank)
    if sys.byteorder != "little":
        raise ShardInputError(f"{name}: shards hold little-endian bytes; this machine is {sys.byteorder}-endian")
    pieces = _pieces(tensors, where=name)
    entries, data_length = _layout(pieces, config.block_size)
    header = ShardHeader(
        format_version=FORMAT_VERSION,
        rank=rank,
        world_size=world_size,
        checkpoint_id=checkpoint_id,
        block_size=config.block_size,
        header_length=_header_length([(e.name, len(e.shape)) for e in entries], data_length, config.block_size),
        data_length=data_length,
        data_sha256="00" * 32,
        entries=tuple(entries),
        block_sha256=("00" * 32,) * block_count(data_length, config.block_size),
        header_sha256="00" * 32,
    )
    if problem := size_problem(len(entries), header.header_length, len(header.block_sha256)):  # no reader takes it
        raise ShardInputError(f"{name}: {problem}; expected fewer tensors per rank or a larger block_size")
    try:  # the reader's own checks of the entries, before a byte is written (a global shape it cannot address)
        check_entries(header, name)
    except ShardFormatError as exc:
        raise ShardInputError(f"{exc.message}; expected pieces a reader accepts") from None
    with _local_file(config.local_tmp_dir, name) as (handle, path):
        handle.write(bytes(header.data_offset))
        hasher = DataHasher(config.block_size)
        position = header.data_offset
        for entry, piece in zip(header.entries, pieces, strict=True):
            gap = bytes(entry.offset - position)
            handle.write(gap)
            hasher.update(gap)
            wrote = 0
            for chunk in _chunks(piece.tensor, config.chunk_bytes):
                handle.write(chunk)
                hasher.update(chunk)
                wrote += len(chunk)
            if wrote != entry.length:  # the tensor was resized while being saved: the layout no longer holds
                raise ShardInputError(f"{name}: tensor {entry.name!r} gave {wrote} bytes, {entry.length} expected")
            position = entry.offset + entry.length
        data_sha, blocks = hasher.finish()
        header = header.model_copy(update={"data_sha256": data_sha, "block_sha256": blocks})
        encoded = encode_header(header)
        handle.seek(0)
        handle.write(encoded)
        handle.close()
        header_sha = encoded[header.header_length - 32 : header.header_length].hex()
        if not plain_name_free(store, prefix, rank, header_sha):  # the old set stays whole until the commit
            name = layout.generation_name(prefix, rank, header_sha)
        key = layout.file_key(prefix, name)
        written = store.put_file_atomic(key, path, tmp_key=layout.tmp_key(prefix, name))
    info = ShardFileInfo(
        rank=rank,
        file=name,
        size=written.size,
        sha256=written.sha256,
        header_sha256=header_sha,
        data_sha256=data_sha,
        tensor_count=len(entries),
    )
    return ShardReceipt(checkpoint_id=checkpoint_id, world_size=world_size, shard=info, entries=header.entries)


def write_metadata(
    store: Store, prefix: str, receipts: Sequence[ShardReceipt], *, plan: PlanConfig | None = None
) -> CheckpointMetadata:
    """Rank 0, after every rank's write_shard returned: check each shard is stored, then write the metadata.

    ``plan`` is recorded as the default target layout for resharding: pass the writers' ``WriterConfig.plan``.
    ShardInputError when the receipts are not one checkpoint's or the metadata would be larger than a reader
    takes (layout.METADATA_MAX_BYTES); ShardVerificationError when a shard is missing from the store. Once
    the metadata is written, shard files of ranks it does not list (an earlier save by more ranks at this
    prefix) are deleted.
    """
    meta = build_metadata(prefix, receipts, plan or PlanConfig())
    # existence only: each receipt's size and sha256 were validated by put_file_atomic, and listing would
    # make a LocalStore hash every shard again
    if missing := [key for s in meta.shards if not store.exists(key := layout.file_key(prefix, s.file))]:
        raise ShardVerificationError(f"{store.uri(missing[0])}: expected in the store before the metadata, absent")
    mkey = layout.metadata_key(prefix)
    if (size := len(encoded := encode_metadata(meta))) > layout.METADATA_MAX_BYTES:  # every reader refuses it unread
        raise ShardInputError(
            f"{store.uri(mkey)}: metadata of {size} bytes, readers take at most {layout.METADATA_MAX_BYTES} (not "
            f"written; the shards are): expected fewer tensors or ranks in one checkpoint"
        )
    store.put_atomic(mkey, encoded, tmp_key=layout.tmp_key(prefix, mkey.rsplit("/", 1)[-1]))
    _remove_strays(store, prefix, meta)
    return meta


def _remove_strays(store: Store, prefix: str, meta: CheckpointMetadata) -> None:
    """Delete the shard-named files the new metadata does not list (ranks 2-3 of an earlier save by 4 ranks,
    re-saved here by 2; the old set a save over it replaced; generations a save cut short left): left, they made
    the set look like a 4-rank one and verify call it damaged.

    Only after the metadata is committed: a reader of the old metadata until then found every shard it
    lists (or one replaced, refused by its header's hash), a reader of the new one never opens these.
    A save cut short here leaves them, as strays verify names; the next save removes them. A delete that
    fails is a StoreError saying the checkpoint is saved all the same (the error alone read as a failed save).
    """
    directory, _ = layout.split_prefix(prefix)
    kept = {layout.file_key(prefix, s.file) for s in meta.shards}
    for info in store.list(directory):
        named = layout.shard_rank_of(prefix, info.key) is not None or layout.is_generation(prefix, info.key)
        if info.key not in kept and named:
            try:
                store.delete(info.key)
            except StoreError as exc:
                raise StoreError(
                    f"{store.uri(layout.metadata_key(prefix))} is written (the checkpoint of {meta.world_size} "
                    f"ranks is saved), but {store.uri(info.key)}, a shard file it does not list, could not be "
                    f"deleted: {exc.message}; expected it gone (verify names it stray_shard until a save removes it)"
                ) from exc


def save_state_dict(
    store: Store,
    prefix: str,
    state_dict: Mapping[str, torch.Tensor],
    *,
    world_size: int,
    checkpoint_id: str,
    config: WriterConfig | None = None,
) -> CheckpointMetadata:
    """One process writing every rank's shard of a full state dict (split by the plan), then the metadata."""
    config = config or WriterConfig()
    receipts = [
        write_shard(store, prefix, rank, world_size, pieces, checkpoint_id=checkpoint_id, config=config)
        for rank, pieces in enumerate(split_state_dict(state_dict, world_size, config.plan))
    ]
    return write_metadata(store, prefix, receipts, plan=config.plan)


def _pieces(tensors: Sequence[TensorPiece] | Mapping[str, torch.Tensor], where: str) -> list[TensorPiece]:
    """The pieces sorted by name, each checked (name, dtype, dims, rows) before anything is written."""
    if isinstance(tensors, Mapping):
        pieces = [TensorPiece(name=n, tensor=t) for n, t in tensors.items()]
    else:
        pieces = list(tensors)
    for p in pieces:  # before sorting: a name that is no str cannot be ordered
        dtypes.tensor_dtype(p.name, p.tensor, where=where)
    pieces.sort(key=lambda p: p.name)
    for i, p in enumerate(pieces):
        what = f"{where}: tensor {p.name!r}"
        if not p.name or not is_utf8(p.name) or len(p.name.encode()) > 0xFFFF:
            raise ShardInputError(f"{what}: expected a name of 1..65535 UTF-8 bytes")
        if p.tensor.layout != torch.strided or p.tensor.is_meta:  # a shard holds each element's bytes in row order
            raise ShardInputError(
                f"{what}: a {p.tensor.layout} tensor on {p.tensor.device}; expected a dense tensor holding its data"
            )
        if i and p.name == pieces[i - 1].name:
            raise ShardInputError(f"{what} given twice; expected one piece per tensor in a shard")
        if p.tensor.dim() > MAX_NDIM:
            raise ShardInputError(f"{what}: {p.tensor.dim()} dims, at most {MAX_NDIM}")
        rows = dtypes.row_count(tuple(p.tensor.shape))
        # without global_rows a piece is a whole tensor: a row_start would make a header every reader refuses
        sliced_scalar = p.global_rows is not None and p.tensor.dim() == 0
        if sliced_scalar or p.row_start < 0 or p.row_start + rows > p.total_rows:
            raise ShardInputError(
                f"{what}: rows {p.row_start}..{p.row_start + rows} of {p.total_rows}; expected a dim-0 slice inside"
            )
    return pieces


def _layout(pieces: list[TensorPiece], block_size: int) -> tuple[list[TensorEntry], int]:
    """Entries with offsets; the data section starts after a header whose size depends only on names,
    dims and the block count, and pieces sit 64-aligned relative to it, so the layout is solved in two steps."""
    relative, end = [], 0
    for p in pieces:
        start = align(end)
        relative.append(start)
        end = start + p.tensor.numel() * p.tensor.element_size()
    data_offset = align(_header_length([(p.name, p.tensor.dim()) for p in pieces], end, block_size))
    entries = [
        TensorEntry(
            name=p.name,
            dtype=dtypes.dtype_name(p.tensor.dtype, where=p.name),
            shape=tuple(p.tensor.shape),
            row_start=p.row_start,
            global_rows=p.total_rows,
            offset=data_offset + rel,
            length=p.tensor.numel() * p.tensor.element_size(),
        )
        for p, rel in zip(pieces, relative, strict=True)
    ]
    return entries, end


def _header_length(names_and_dims: list[tuple[str, int]], data_length: int, block_size: int) -> int:
    names, dims = [n for n, _ in names_and_dims], [d for _, d in names_and_dims]
    return header_length(names, dims, block_count(data_length, block_size))


def _chunks(tensor: torch.Tensor, chunk_bytes: int) -> Iterator[memoryview]:
    """The tensor's C-contiguous bytes, ``chunk_bytes`` at a time, without copying a CPU tensor already contiguous.

    A lazy conjugate or negative view (``x.conj()``) holds its source's bits and a flag: its values are
    materialized first (a uint8 view of it is a RuntimeError), so the shard holds what the tensor reads as.
    """
    flat = tensor.detach().to("cpu").resolve_conj().resolve_neg().contiguous().reshape(-1).view(torch.uint8)
    view = flat.numpy().data
    for start in range(0, len(view), chunk_bytes):
        yield view[start : start + chunk_bytes]


@contextlib.contextmanager
def _local_file(directory: str | None, name: str) -> Iterator[tuple[BinaryIO, str]]:
    """A fresh local file to build a shard in, removed afterwards whatever happens; StoreError when it cannot
    be created or written (a missing ``local_tmp_dir``, a full disk)."""
    where = directory or tempfile.gettempdir()
    try:
        fd, path = tempfile.mkstemp(prefix=f"{name}.", suffix=".tmp", dir=directory)
    except OSError as exc:
        raise StoreError(
            f"{name}: cannot create a file in {where} to build the shard in: {exc.strerror or exc}; expected a "
            "writable directory (WriterConfig.local_tmp_dir)"
        ) from exc
    try:
        with os.fdopen(fd, "w+b") as handle:
            yield handle, path
    except OSError as exc:
        raise StoreError(f"{name}: cannot write {path} while building the shard: {exc.strerror or exc}") from exc
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
