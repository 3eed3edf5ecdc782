"""The DELTA container: a fixed prefix, then three zstd frames (header, index planes, values).

Prefix, 80 bytes, little-endian::

    8s  magic b"ML8SDLTA"
    u16 format version (1)
    u16 flags (0; any other value is refused)
    u32 reserved (0)
    u64 header length, decompressed
    u64 header frame length
    u64 index frame length
    u64 values frame length
    32s sha256 of the three frames

The payload is exactly the prefix plus the three frames. The digest makes every changed byte an error:
zstd's checksums cover decoded content only, and a few bits of a frame's encoding do not change it.
Each frame is one zstd frame with its content size and a checksum, and must decompress to exactly the
size the prefix (header) or the header (index planes, values) implies, with no byte after it. Index and
value sizes follow from the header's shapes, so a reader checks them against the weights it applies to
before decompressing anything large; the header itself is capped at 64 MiB.
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass

import zstandard

from ml8s.errors import DeltaFormatError

MAGIC = b"ML8SDLTA"
MAX_HEADER_BYTES = 64 * 1024 * 1024
_PREFIX = struct.Struct("<8sHHIQQQQ32s")


@dataclass(frozen=True)
class Frames:
    """A payload split into its parts: the decompressed header and the two still-compressed sections."""

    version: int
    header: bytes
    index_frame: memoryview
    values_frame: memoryview


def compress(data: bytes | memoryview, level: int, threads: int) -> bytes:
    """One zstd frame with content size and checksum, in zstd's multi-threaded mode.

    With one worker or more zstd's output does not depend on the number of workers (zstd >= 1.5), so
    ``threads`` tunes speed without changing a byte; the level does change the bytes.
    """
    compressor = zstandard.ZstdCompressor(level=level, threads=threads, write_checksum=True, write_content_size=True)
    return compressor.compress(data)


def decompress(frame: memoryview, expected: int, what: str) -> bytes:
    """Exactly one zstd frame that decompresses to exactly ``expected`` bytes.

    Raises:
        DeltaFormatError: another declared size, a corrupt or truncated frame, trailing bytes.
    """
    try:
        declared = zstandard.frame_content_size(frame)
    except zstandard.ZstdError as exc:
        raise DeltaFormatError(f"{what}: not a zstd frame ({exc})") from None
    if declared != expected:
        raise DeltaFormatError(f"{what}: frame declares {declared} bytes, the header implies {expected}")
    decompressor = zstandard.ZstdDecompressor().decompressobj(write_size=max(expected, 1))
    try:
        data = decompressor.decompress(frame)
    except zstandard.ZstdError as exc:
        raise DeltaFormatError(f"{what}: corrupt zstd frame ({exc})") from None
    if not decompressor.eof:
        raise DeltaFormatError(f"{what}: zstd frame is truncated")
    if decompressor.unused_data:
        raise DeltaFormatError(f"{what}: {len(decompressor.unused_data)} bytes after the zstd frame")
    if len(data) != expected:
        raise DeltaFormatError(f"{what}: decompressed to {len(data)} bytes, expected {expected}")
    return data


def pack(version: int, header: bytes, index_frame: bytes, values_frame: bytes, level: int, threads: int) -> bytes:
    """Prefix and frames of a payload (the header is compressed here; the sections come compressed)."""
    header_frame = compress(header, level, threads)
    frames = (header_frame, index_frame, values_frame)
    digest = hashlib.sha256()
    for part in frames:
        digest.update(part)
    lengths = (len(part) for part in frames)
    return b"".join((_PREFIX.pack(MAGIC, version, 0, 0, len(header), *lengths, digest.digest()), *frames))


def unpack(data: bytes, supported_version: int) -> Frames:
    """Split a payload, checking its prefix and every length, and decompress the header.

    Raises:
        DeltaFormatError: not a DELTA payload of this version, or not exactly the length its prefix says.
    """
    if len(data) < _PREFIX.size:
        raise DeltaFormatError(f"DELTA payload of {len(data)} bytes is shorter than its {_PREFIX.size}-byte prefix")
    magic, version, flags, reserved, header_len, *frame_lens, recorded = _PREFIX.unpack_from(data)
    if magic != MAGIC:
        raise DeltaFormatError(f"not a DELTA payload: magic {magic!r}, expected {MAGIC!r}")
    if version != supported_version:
        raise DeltaFormatError(f"DELTA format version {version}; this reader reads version {supported_version}")
    if flags or reserved:
        raise DeltaFormatError(f"DELTA prefix: flags {flags} and reserved {reserved} must both be 0")
    if header_len > MAX_HEADER_BYTES:
        raise DeltaFormatError(f"DELTA header of {header_len} bytes exceeds the {MAX_HEADER_BYTES}-byte limit")
    total = _PREFIX.size + sum(frame_lens)
    if total != len(data):
        raise DeltaFormatError(f"DELTA payload is {len(data)} bytes, its prefix describes {total}")
    view = memoryview(data)
    if hashlib.sha256(view[_PREFIX.size :]).digest() != recorded:
        raise DeltaFormatError("DELTA payload does not match the sha256 its prefix records: corrupted or tampered")
    bounds = [_PREFIX.size]
    for length in frame_lens:
        bounds.append(bounds[-1] + length)
    header = decompress(view[bounds[0] : bounds[1]], header_len, "DELTA header frame")
    return Frames(version, header, view[bounds[1] : bounds[2]], view[bounds[2] : bounds[3]])
