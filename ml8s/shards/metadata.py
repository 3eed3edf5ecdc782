"""``{prefix}.metadata.json``: the checkpoint's shards and where every tensor's rows are.

Rank 0 writes it last, from every rank's :class:`ShardReceipt`, so its presence means every shard it
lists was written. Serialized with sorted keys and no timestamps: the same checkpoint, the same bytes.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, NonNegativeInt, ValidationError

from ml8s.errors import (
    NotFoundError,
    ObjectTooLargeError,
    ShardFormatError,
    ShardInputError,
    ShardVersionError,
    UnsafeObjectError,
)
from ml8s.identity.hashing import json_loads
from ml8s.shards import dtypes, layout
from ml8s.shards.format import FORMAT_VERSION, ShardHeader, TensorEntry
from ml8s.shards.plan import PlanConfig
from ml8s.store import Store
from ml8s.text import first_problem

_FROZEN = ConfigDict(extra="forbid", frozen=True)


class ShardFileInfo(BaseModel):
    """One shard file: its name in the prefix's directory, size, and the sha256 of the file, header and data."""

    model_config = _FROZEN

    rank: NonNegativeInt
    file: str
    size: NonNegativeInt
    sha256: str
    header_sha256: str
    data_sha256: str
    tensor_count: NonNegativeInt


class PieceLocation(BaseModel):
    """Rows [row_start, row_stop) of a tensor: ``length`` bytes at ``offset`` (from the file start) of ``shard``."""

    model_config = _FROZEN

    shard: str
    rank: NonNegativeInt
    offset: NonNegativeInt
    length: NonNegativeInt
    row_start: NonNegativeInt
    row_stop: NonNegativeInt


class TensorRecord(BaseModel):
    """A whole tensor: dtype, global shape, and its pieces sorted by rows, covering every row exactly once."""

    model_config = _FROZEN

    dtype: str
    shape: tuple[NonNegativeInt, ...]
    pieces: tuple[PieceLocation, ...]


class CheckpointMetadata(BaseModel):
    """The metadata file: format version, checkpoint id, ranks, shard files, the tensor map, the plan config."""

    model_config = _FROZEN

    format_version: NonNegativeInt
    checkpoint_id: str
    world_size: NonNegativeInt
    ranks: tuple[NonNegativeInt, ...]
    plan: PlanConfig
    shards: tuple[ShardFileInfo, ...]
    tensors: dict[str, TensorRecord]


class ShardReceipt(BaseModel):
    """What one rank's write_shard produced; rank 0 gathers every rank's into the metadata (JSON-able)."""

    model_config = _FROZEN

    checkpoint_id: str
    world_size: NonNegativeInt
    shard: ShardFileInfo
    entries: tuple[TensorEntry, ...]


def encode_metadata(meta: CheckpointMetadata) -> bytes:
    return (json.dumps(meta.model_dump(mode="json"), sort_keys=True, indent=1) + "\n").encode()


def decode_metadata(data: bytes, where: str) -> CheckpointMetadata:
    """Parse metadata JSON; ShardVersionError for another format version, ShardFormatError for anything malformed."""
    try:
        raw = json_loads(data)
    except ValueError as exc:
        raise ShardFormatError(f"{where}: not JSON ({exc})", check="metadata_invalid") from None
    if isinstance(raw, dict) and raw.get("format_version") != FORMAT_VERSION:
        found = raw.get("format_version")
        raise ShardVersionError(f"{where}: format version {found!r}, expected {FORMAT_VERSION}", check="format_version")
    try:
        # strict: the writer writes integers, and lax parsing read ``true``, ``1.0`` and ``2.0`` as 1, 1 and 2 (a
        # format version, a world size, a rank no writer wrote); parsed again as JSON, where strict mode takes arrays
        return CheckpointMetadata.model_validate_json(data, strict=True)
    except ValidationError as exc:
        raise ShardFormatError(
            f"{where}: not checkpoint metadata: {first_problem(exc)}", check="metadata_invalid"
        ) from None


def metadata_problems(meta: CheckpointMetadata, prefix: str) -> list[tuple[str, str]]:
    """Every inconsistency inside the metadata, as (check, reason); empty when it is self-consistent."""
    problems: list[tuple[str, str]] = []
    try:
        layout.check_checkpoint_id(meta.checkpoint_id)
    except ShardInputError as exc:
        problems.append(("metadata_invalid", exc.message))
    # compared by length first: a hostile world size must not make us build a list that large
    if meta.world_size < 1 or len(meta.ranks) != meta.world_size or meta.ranks != tuple(range(len(meta.ranks))):
        problems.append(("metadata_ranks", f"ranks {list(meta.ranks)[:20]} for world size {meta.world_size}"))
    found = [(s.rank, s.file) for s in meta.shards]
    named = all(s.file in layout.shard_names(prefix, r, s.header_sha256) for r, s in enumerate(meta.shards))
    if len(found) != meta.world_size or [r for r, _ in found] != list(range(len(found))) or not named:
        problems.append(
            (
                "metadata_ranks",
                f"shards {found[:20]}, expected one per rank named {prefix}_shard_<rank>.shard (or a generation of "
                "it, .shard.<its header sha256's first 16 hex digits>)",
            )
        )
    files = {s.rank: s for s in meta.shards}
    counts = dict.fromkeys(files, 0)
    for name, record in sorted(meta.tensors.items()):
        problems += [("metadata_tensors", f"tensor {name!r}: {p}") for p in _record_problems(record, files)]
        for piece in record.pieces:
            counts[piece.rank] = counts.get(piece.rank, 0) + 1
    for rank, info in sorted(files.items()):
        if counts[rank] != info.tensor_count:
            problems.append(
                ("metadata_tensors", f"{info.file}: tensor_count {info.tensor_count}, map has {counts[rank]}")
            )
    return problems


def _record_problems(record: TensorRecord, files: dict[int, ShardFileInfo]) -> list[str]:
    if record.dtype not in dtypes.SUPPORTED_DTYPES:
        return [f"unknown dtype {record.dtype!r}"]
    if not dtypes.shape_fits(record.dtype, record.shape):
        return [f"shape {record.shape} too large to address"]
    problems, row = [], 0
    per_row = dtypes.row_bytes(record.dtype, record.shape)
    for p in record.pieces:
        info = files.get(p.rank)
        if info is None or info.file != p.shard:
            problems.append(f"piece in {p.shard!r} of rank {p.rank}, which the shards do not list")
        if p.row_start != row or p.row_stop < p.row_start:
            problems.append(f"piece rows {p.row_start}..{p.row_stop}, expected to start at row {row}")
        if p.length != (p.row_stop - p.row_start) * per_row:
            problems.append(
                f"piece at {p.offset} of {p.length} bytes, rows {p.row_start}..{p.row_stop} make {per_row}/row"
            )
        row = p.row_stop
    if row != dtypes.row_count(record.shape) or not record.pieces:
        problems.append(f"pieces cover rows 0..{row}, the tensor has {dtypes.row_count(record.shape)}")
    return problems


def build_metadata(prefix: str, receipts: Sequence[ShardReceipt], plan: PlanConfig) -> CheckpointMetadata:
    """The metadata of one checkpoint from every rank's receipt; ShardInputError when they do not fit together."""
    if not receipts:
        raise ShardInputError(f"{prefix}: no shard receipts; expected one per rank")
    first = receipts[0]
    ids = sorted({(r.checkpoint_id, r.world_size) for r in receipts})
    if len(ids) != 1:
        raise ShardInputError(f"{prefix}: receipts from different checkpoints (checkpoint id, world size): {ids}")
    ranks = sorted(r.shard.rank for r in receipts)
    if ranks != list(range(first.world_size)):
        raise ShardInputError(f"{prefix}: receipts for ranks {ranks}, expected each of 0..{first.world_size - 1} once")
    pieces: dict[str, list[tuple[TensorEntry, ShardFileInfo]]] = {}
    for receipt in receipts:
        for entry in receipt.entries:
            pieces.setdefault(entry.name, []).append((entry, receipt.shard))
    tensors = {name: _record(name, found) for name, found in sorted(pieces.items())}
    shards = tuple(sorted((r.shard for r in receipts), key=lambda s: s.rank))
    meta = CheckpointMetadata(
        format_version=FORMAT_VERSION,
        checkpoint_id=first.checkpoint_id,
        world_size=first.world_size,
        ranks=tuple(ranks),
        plan=plan,
        shards=shards,
        tensors=tensors,
    )
    if problems := metadata_problems(meta, prefix):
        raise ShardInputError(f"{prefix}: the shards do not form one checkpoint: " + "; ".join(r for _, r in problems))
    return meta


def _record(name: str, found: list[tuple[TensorEntry, ShardFileInfo]]) -> TensorRecord:
    found.sort(key=lambda f: f[0].row_start)
    kinds = sorted({(e.dtype, e.global_shape) for e, _ in found})
    if len(kinds) != 1:
        raise ShardInputError(f"tensor {name!r}: pieces disagree on (dtype, global shape): {kinds}")
    locations = tuple(
        PieceLocation(
            shard=s.file, rank=s.rank, offset=e.offset, length=e.length, row_start=e.row_start, row_stop=e.row_stop
        )
        for e, s in found
    )
    return TensorRecord(dtype=kinds[0][0], shape=kinds[0][1], pieces=locations)


def expected_entries(meta: CheckpointMetadata, rank: int) -> tuple[TensorEntry, ...]:
    """The header entries the metadata's tensor map implies for ``rank``'s shard, sorted by name."""
    entries = []
    for name, record in sorted(meta.tensors.items()):
        for p in (p for p in record.pieces if p.rank == rank):
            shape = (p.row_stop - p.row_start, *record.shape[1:]) if record.shape else ()
            entries.append(
                TensorEntry(
                    name=name,
                    dtype=record.dtype,
                    shape=shape,
                    row_start=p.row_start,
                    global_rows=dtypes.row_count(record.shape),
                    offset=p.offset,
                    length=p.length,
                )
            )
    return tuple(entries)


def header_disagreements(header: ShardHeader, meta: CheckpointMetadata, rank: int) -> list[tuple[str, str]]:
    """Where rank ``rank``'s shard header contradicts the metadata, as (check, reason)."""
    found: list[tuple[str, str]] = []
    pairs = [
        ("header_rank", "rank", header.rank, rank),
        ("header_world_size", "world size", header.world_size, meta.world_size),
        ("header_checkpoint_id", "checkpoint id", header.checkpoint_id, meta.checkpoint_id),
    ]
    found += [
        (c, f"{field} {got} in the header, the metadata expects {want}") for c, field, got, want in pairs if got != want
    ]
    if header.entries != (want_entries := expected_entries(meta, rank)):
        diff = sorted({e.name for e in header.entries} ^ {e.name for e in want_entries}) or [
            a.name for a, b in zip(header.entries, want_entries, strict=False) if a != b
        ]
        found.append(("header_tensors", f"tensor entries differ from the metadata's map (first: {diff[:5]})"))
    info = meta.shards[rank] if rank < len(meta.shards) else None
    if info is not None and header.header_sha256 != info.header_sha256:
        found.append(("header_metadata", f"header sha256 {header.header_sha256}, metadata lists {info.header_sha256}"))
    return found


def plain_name_free(store: Store, prefix: str, rank: int, header_sha256: str) -> bool:
    """Whether rank ``rank``'s shard, of header sha256 ``header_sha256``, may be written under its plain name:
    no metadata is there, or the one there lists that very shard under it (the same header, so the same
    bytes). Otherwise it goes under its generation name (:mod:`ml8s.shards.layout`): written over, a rank at a
    time, a save cut short left the old metadata listing new shards its header hashes refuse."""
    key = layout.metadata_key(prefix)
    try:
        old = decode_metadata(store.get(key, max_bytes=layout.METADATA_MAX_BYTES), store.uri(key))
    except NotFoundError:
        return True
    except (ShardFormatError, ObjectTooLargeError, UnsafeObjectError):  # no reader loads it: its files are left alone
        return False
    plain = layout.shard_name(prefix, rank)
    # listed under its generation name, or not at all: a plain-named file left here by a save cut short would be
    # the old set's stray until the new one commits
    listed = [s.header_sha256 for s in old.shards if s.file == plain]
    return bool(listed) and all(sha == header_sha256 for sha in listed)
