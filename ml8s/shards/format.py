"""The shard file, format version 1: ``{prefix}_shard_{rank}.shard``, one per rank.

Every integer is unsigned little-endian; every offset is absolute (from the file's first byte).

Fixed header, 104 bytes::

    off  size  type  field
    0    4     u32   magic 0x53484152 ("SHAR"; on disk the bytes 52 41 48 53, as the seed's writer puts it)
    4    2     u16   format_version = 1
    6    2     u16   flags = 0 (reserved; a reader refuses any other value)
    8    4     u32   rank, < world_size
    12   4     u32   world_size, >= 1
    16   32    raw   checkpoint_id: the 32-byte digest the caller names the checkpoint by (same in every shard)
    48   4     u32   tensor_count
    52   4     u32   block_size: bytes per data block (a multiple of 64), the unit of the block hash table
    56   8     u64   header_length: bytes from offset 0 to the end of header_sha256
    64   8     u64   data_length: bytes of the data section
    72   32    raw   data_sha256: sha256 of the data section

Then ``tensor_count`` entries, sorted by name (names unique within a shard), each::

    2     u16   name_length (>= 1), then name_length bytes of UTF-8
    1     u8    dtype code (``ml8s.shards.dtypes``)
    1     u8    ndim (<= 32), then ndim × u64: the shape of this piece
    8     u64   row_start: the piece's first row along dim 0 of the whole tensor (0 for a whole tensor)
    8     u64   global_rows: dim 0 of the whole tensor (a 0-d tensor counts as one row)
    8     u64   offset of the piece's bytes (a multiple of 64, inside the data section, ascending)
    8     u64   length = elements × item size

Then the block hash table, ``ceil(data_length / block_size)`` × 32 bytes: the sha256 of each block of the
data section (the last block may be shorter), then 32 bytes ``header_sha256``: sha256 of every header byte
before it. Zero bytes pad the header to ``data_offset`` = header_length rounded up to 64. The data section
holds each piece's C-contiguous bytes at its offset, zero padding between pieces (each starts 64-aligned),
and ends with the last piece: the file is exactly ``data_offset + data_length`` bytes.

A header is at most ``MAX_HEADER`` (64 MiB) long and lists at most ``MAX_TENSORS`` (2**18) pieces: the writer
refuses to write more, a reader refuses it before parsing an entry.

Departures from the seed, on purpose: the seed's header is magic, rank, a length-prefixed checksum string,
tensor count, then the data length and the data. Its writer stores that length as a 32-bit int (its table
says 8 bytes), which caps a shard at 2-4 GiB, so every length and offset here is 64-bit. A format version,
world size and checkpoint id are added so a reader can refuse a shard of another format or another
checkpoint. The checksum is a fixed 32-byte sha256 of the data plus one of the header itself (the seed's
only checksum sat in the header it could not cover). The seed keeps tensor descriptions only in the
metadata file; here each shard describes its own pieces, so a shard is readable and checkable alone, and
per-block hashes let a resharding reader fetch and verify only the byte ranges it needs. Pieces start
64-byte aligned, so a reader can hand their bytes to torch in place.
"""

from __future__ import annotations

import hashlib
import struct

from pydantic import BaseModel, ConfigDict

from ml8s.errors import ShardChecksumError, ShardFormatError, ShardVersionError
from ml8s.shards import dtypes

MAGIC = 0x53484152
FORMAT_VERSION = 1
FIXED_SIZE = 104
ALIGN = 64
MAX_NDIM = 32
# A header is read whole and parsed into a model per entry and a hex digest per block: ~1 KiB of memory per
# 37-byte entry, ~120 bytes per 32-byte block hash. So both are bounded, for the writer as for the reader: a
# planted 1 GiB header of minimal entries would have cost ~27 GiB before its first check failed. 64 MiB holds
# the block table of an 8 TiB shard (4 MiB blocks); 2**18 tensors is more pieces than the metadata's 64 MiB
# can map in all (ml8s.shards.layout.METADATA_MAX_BYTES).
MAX_HEADER = 64 * 1024 * 1024
MAX_TENSORS = 1 << 18
_MIN_ENTRY = 2 + 1 + 1 + 1 + 32  # a 1-byte name, dtype, ndim 0, the four u64 fields
_FIXED = struct.Struct("<IHHII32sIIQQ32s")
_ENTRY_TAIL = struct.Struct("<QQQQ")
_FROZEN = ConfigDict(extra="forbid", frozen=True)


class TensorEntry(BaseModel):
    """One tensor piece in a shard: rows [row_start, row_start + shape[0]) of a tensor of global_rows rows."""

    model_config = _FROZEN

    name: str
    dtype: str
    shape: tuple[int, ...]
    row_start: int
    global_rows: int
    offset: int
    length: int

    @property
    def row_stop(self) -> int:
        return self.row_start + dtypes.row_count(self.shape)

    @property
    def global_shape(self) -> tuple[int, ...]:
        return (self.global_rows, *self.shape[1:]) if self.shape else ()


class ShardHeader(BaseModel):
    """A decoded (or to-be-encoded) header; digests as lowercase hex."""

    model_config = _FROZEN

    format_version: int
    rank: int
    world_size: int
    checkpoint_id: str
    block_size: int
    header_length: int
    data_length: int
    data_sha256: str
    entries: tuple[TensorEntry, ...]
    block_sha256: tuple[str, ...]
    header_sha256: str

    @property
    def data_offset(self) -> int:
        return align(self.header_length)

    @property
    def file_size(self) -> int:
        return self.data_offset + self.data_length


def align(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def block_count(data_length: int, block_size: int) -> int:
    return -(-data_length // block_size)


def header_length(names: list[str], ndims: list[int], blocks: int) -> int:
    """Bytes of a header with these entries (known before any data is written, so pieces can be placed)."""
    entries = sum(2 + len(n.encode()) + 2 + 8 * d + _ENTRY_TAIL.size for n, d in zip(names, ndims, strict=True))
    return FIXED_SIZE + entries + 32 * blocks + 32


def size_problem(count: int, head_len: int, blocks: int) -> str:
    """Why a header of ``count`` entries, ``blocks`` block hashes and ``head_len`` bytes is refused ("" if it is
    not): over a limit (MAX_HEADER, MAX_TENSORS), or too short to hold what it counts."""
    if count > MAX_TENSORS:
        return f"{count} tensors, at most {MAX_TENSORS} per shard"
    if not FIXED_SIZE + 32 <= head_len <= MAX_HEADER:
        return f"header length {head_len}, expected {FIXED_SIZE + 32}..{MAX_HEADER}"
    if (need := FIXED_SIZE + count * _MIN_ENTRY + 32 * blocks + 32) > head_len:
        return f"{count} entries and {blocks} block hashes need at least {need} bytes, header_length is {head_len}"
    return ""


def encode_header(h: ShardHeader) -> bytes:
    """The header bytes, header_sha256 computed here (``h.header_sha256`` is ignored), padded to data_offset."""
    out = bytearray(
        _FIXED.pack(
            MAGIC,
            h.format_version,
            0,
            h.rank,
            h.world_size,
            bytes.fromhex(h.checkpoint_id),
            len(h.entries),
            h.block_size,
            h.header_length,
            h.data_length,
            bytes.fromhex(h.data_sha256),
        )
    )
    for e in h.entries:
        name = e.name.encode()
        out += struct.pack("<H", len(name)) + name
        out += struct.pack(f"<BB{len(e.shape)}Q", dtypes.dtype_code(e.dtype), len(e.shape), *e.shape)
        out += _ENTRY_TAIL.pack(e.row_start, e.global_rows, e.offset, e.length)
    for digest in h.block_sha256:
        out += bytes.fromhex(digest)
    out += hashlib.sha256(out).digest()
    if len(out) != h.header_length:
        raise AssertionError(f"header of {len(out)} bytes, planned {h.header_length}")
    return bytes(out) + bytes(h.data_offset - len(out))


class _Cursor:
    """Reads header fields, turning a short buffer into a named error instead of struct.error."""

    def __init__(self, buf: bytes, where: str) -> None:
        self.buf, self.pos, self.where = buf, FIXED_SIZE, where

    def take(self, n: int) -> bytes:
        if self.pos + n > len(self.buf):
            raise ShardFormatError(
                f"{self.where}: header field at byte {self.pos} runs past header_length {len(self.buf)}",
                check="header_invalid",
            )
        self.pos += n
        return self.buf[self.pos - n : self.pos]


def decode_fixed(fixed: bytes, file_size: int, where: str) -> tuple[int, int]:
    """Check the fixed header's magic, version, flags and lengths; returns (header_length, data_length)."""
    if len(fixed) < FIXED_SIZE:
        raise ShardFormatError(
            f"{where}: {len(fixed)} bytes, shorter than the {FIXED_SIZE}-byte header", check="truncated"
        )
    magic, version, flags, rank, world, _, count, block_size, head_len, data_len, _ = _FIXED.unpack(fixed[:FIXED_SIZE])
    if magic != MAGIC:
        raise ShardFormatError(f"{where}: magic {magic:#010x}, expected {MAGIC:#010x}", check="bad_magic")
    if version != FORMAT_VERSION:
        raise ShardVersionError(f"{where}: format version {version}, expected {FORMAT_VERSION}", check="format_version")
    problems = [
        f"flags {flags}, expected 0" if flags else "",
        f"rank {rank} not below world size {world}" if rank >= world else "",
        f"block size {block_size}, expected a positive multiple of {ALIGN}"
        if not block_size or block_size % ALIGN
        else "",
        size_problem(count, head_len, block_count(data_len, block_size)) if block_size else "",
    ]
    if problem := "; ".join(p for p in problems if p):
        raise ShardFormatError(f"{where}: {problem}", check="header_invalid")
    if head_len > file_size:
        raise ShardFormatError(f"{where}: header of {head_len} bytes, file of {file_size}", check="truncated")
    return head_len, data_len


def decode_header(buf: bytes, where: str) -> ShardHeader:
    """Parse and check a whole header (``buf`` = its header_length bytes, from decode_fixed)."""
    _, version, _, rank, world, ckpt, count, block_size, head_len, data_len, data_sha = _FIXED.unpack(buf[:FIXED_SIZE])
    if hashlib.sha256(buf[:-32]).digest() != buf[-32:]:
        raise ShardChecksumError(f"{where}: header bytes do not match header_sha256", check="header_checksum")
    cur, entries = _Cursor(buf[:-32], where), []
    for i in range(count):
        (name_len,) = struct.unpack("<H", cur.take(2))
        try:
            name = cur.take(name_len).decode()
        except UnicodeDecodeError:
            raise ShardFormatError(f"{where}: entry {i} name is not UTF-8", check="header_invalid") from None
        code, ndim = cur.take(1)[0], cur.take(1)[0]
        if ndim > MAX_NDIM:
            raise ShardFormatError(
                f"{where}: entry {name!r} has {ndim} dims, at most {MAX_NDIM}", check="header_invalid"
            )
        shape = struct.unpack(f"<{ndim}Q", cur.take(8 * ndim))
        row_start, rows, offset, length = _ENTRY_TAIL.unpack(cur.take(_ENTRY_TAIL.size))
        dtype = dtypes.name_from_code(code, where=f"{where} entry {name!r}")
        entries.append(
            TensorEntry(
                name=name, dtype=dtype, shape=shape, row_start=row_start, global_rows=rows, offset=offset, length=length
            )
        )
    blocks = [cur.take(32).hex() for _ in range(block_count(data_len, block_size))]
    if cur.pos != len(buf) - 32:
        raise ShardFormatError(f"{where}: {len(buf) - 32 - cur.pos} unexplained header bytes", check="header_invalid")
    header = ShardHeader(
        format_version=version,
        rank=rank,
        world_size=world,
        checkpoint_id=ckpt.hex(),
        block_size=block_size,
        header_length=head_len,
        data_length=data_len,
        data_sha256=data_sha.hex(),
        entries=tuple(entries),
        block_sha256=tuple(blocks),
        header_sha256=buf[-32:].hex(),
    )
    check_entries(header, where)
    return header


def check_entries(h: ShardHeader, where: str) -> None:
    """Entries sorted and unique, each aligned inside the data section after the previous, sizes consistent."""
    end, previous = h.data_offset, ""
    for e in h.entries:
        rows, size = dtypes.row_count(e.shape), dtypes.row_bytes(e.dtype, e.shape) * dtypes.row_count(e.shape)
        problems = [
            "name empty" if not e.name else "",
            f"name not after {previous!r} (entries sorted, unique)" if previous and e.name <= previous else "",
            f"offset {e.offset} before {end} or not {ALIGN}-aligned" if e.offset < end or e.offset % ALIGN else "",
            f"length {e.length}, its shape and dtype make {size}" if e.length != size else "",
            f"rows {e.row_start}..{e.row_start + rows} outside 0..{e.global_rows}"
            if e.row_stop > e.global_rows
            else "",
            "0-d piece that is not the whole tensor" if not e.shape and (e.row_start, e.global_rows) != (0, 1) else "",
            f"global shape {e.global_shape} too large to address"
            if not dtypes.shape_fits(e.dtype, e.global_shape)
            else "",
        ]
        if problem := "; ".join(p for p in problems if p):
            raise ShardFormatError(f"{where}: entry {e.name!r}: {problem}", check="header_invalid")
        end, previous = e.offset + e.length, e.name
    if h.entries and end != h.data_offset + h.data_length:
        raise ShardFormatError(
            f"{where}: data section ends at {h.data_offset + h.data_length}, its last piece at {end}",
            check="header_invalid",
        )
    if not h.entries and h.data_length:
        raise ShardFormatError(f"{where}: {h.data_length} data bytes but no tensors", check="header_invalid")
