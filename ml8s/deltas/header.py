"""The DELTA header: what a delta was computed from, what it produces, and each tensor's layout.

Binary form (little-endian)::

    32 bytes  base weights hash (raw sha256)
    32 bytes  result weights hash (raw sha256)
    u32       tensor count
    per tensor, names strictly increasing (Python string order):
        u16 name length, name as UTF-8
        u8  dtype code (1 float32, 2 float16, 3 bfloat16)
        u8  index width in bytes (1, 2, 4 or 8; 1 when nothing changed)
        u8  ndim, then ndim x u64 dimensions
        u64 count of changed elements

Every tensor of the weights is listed, changed or not, so a reader can check the target's layout before it
reads any index. Parsing refuses anything not exactly of this form (unknown code, unsorted names, a count
above the element count, trailing bytes).
"""

from __future__ import annotations

import math
import struct
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ml8s.deltas.dtypes import DtypeName, kind_by_code, kind_by_name
from ml8s.deltas.hashing import encode_name
from ml8s.errors import DeltaFormatError

FORMAT_VERSION = 1
INDEX_WIDTHS = (1, 2, 4, 8)
MAX_NDIM = 64
_MAX_NUMEL = 2**63 - 1  # torch indexes elements with int64
_HEAD = struct.Struct("<32s32sI")
_COUNT = struct.Struct("<I")
_NAME_LEN = struct.Struct("<H")
_LAYOUT = struct.Struct("<BBB")
_U64 = struct.Struct("<Q")
_MIN_ENTRY = _NAME_LEN.size + _LAYOUT.size + _U64.size  # an empty name, no dimension
_HASH_PATTERN = r"^[0-9a-f]{64}$"


class DeltaTensorInfo(BaseModel):
    """One tensor of a DELTA: its layout, how many elements changed and the width of its index gaps."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    dtype: DtypeName
    shape: tuple[Annotated[int, Field(ge=0)], ...]
    count: int = Field(ge=0)
    index_width: Literal[1, 2, 4, 8]

    @property
    def numel(self) -> int:
        """Elements in the tensor."""
        return math.prod(self.shape)


class DeltaHeader(BaseModel):
    """What a DELTA payload records about itself, readable without applying it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    version: int
    base_hash: str = Field(pattern=_HASH_PATTERN)
    result_hash: str = Field(pattern=_HASH_PATTERN)
    tensors: tuple[DeltaTensorInfo, ...]


def section_sizes(header: DeltaHeader) -> tuple[int, int]:
    """Decompressed sizes of the index planes and of the values that ``header`` implies."""
    index_size = sum(info.count * info.index_width for info in header.tensors)
    values_size = sum(info.count * kind_by_name(info.dtype).itemsize for info in header.tensors)
    return index_size, values_size


def encode_header(header: DeltaHeader) -> bytes:
    """The binary form of a header (its ``version`` is written by the payload prefix, not here)."""
    parts = [_HEAD.pack(bytes.fromhex(header.base_hash), bytes.fromhex(header.result_hash), len(header.tensors))]
    for info in header.tensors:
        name = encode_name(info.name)
        if len(name) > 0xFFFF:
            raise DeltaFormatError(f"tensor name {info.name[:80]!r}... is {len(name)} bytes; a DELTA allows 65535")
        parts.append(_NAME_LEN.pack(len(name)) + name)
        parts.append(_LAYOUT.pack(kind_by_name(info.dtype).code, info.index_width, len(info.shape)))
        parts.append(struct.pack(f"<{len(info.shape)}Q", *info.shape) + _U64.pack(info.count))
    return b"".join(parts)


class _Reader:
    """Reads fields off a buffer, naming the field and offset when the buffer runs out."""

    def __init__(self, data: bytes) -> None:
        self._data = data
        self.offset = 0

    def unpack(self, layout: struct.Struct, what: str) -> tuple[int | bytes, ...]:
        end = self.offset + layout.size
        if end > len(self._data):
            raise DeltaFormatError(
                f"delta header truncated: {what} needs bytes {self.offset}..{end}, the header has {len(self._data)}"
            )
        fields = layout.unpack_from(self._data, self.offset)
        self.offset = end
        return fields

    def take(self, size: int, what: str) -> bytes:
        return bytes(self.unpack(struct.Struct(f"<{size}s"), what)[0])

    def integers(self, layout: struct.Struct, what: str) -> tuple[int, ...]:
        values = self.unpack(layout, what)
        return tuple(value for value in values if isinstance(value, int))  # layouts passed here hold integers only

    def integer(self, layout: struct.Struct, what: str) -> int:
        return self.integers(layout, what)[0]


def decode_header(data: bytes, version: int) -> DeltaHeader:
    """Parse and check a header's binary form.

    Raises:
        DeltaFormatError: anything short of a well-formed header, naming the field and tensor.
    """
    reader = _Reader(data)
    base_raw = reader.take(32, "base hash")
    result_raw = reader.take(32, "result hash")
    count = reader.integer(_COUNT, "tensor count")
    if count > (len(data) - reader.offset) // _MIN_ENTRY:
        raise DeltaFormatError(f"delta header: {count} tensors cannot fit in a header of {len(data)} bytes")
    tensors: list[DeltaTensorInfo] = []
    previous: str | None = None
    for position in range(count):
        where = f"delta header, tensor #{position}"
        name_bytes = reader.take(reader.integer(_NAME_LEN, f"{where} name length"), f"{where} name")
        try:
            name = name_bytes.decode("utf-8")
        except UnicodeDecodeError:
            raise DeltaFormatError(f"{where}: name is not UTF-8: {name_bytes[:80]!r}") from None
        where = f"delta header, tensor {name!r}"
        if previous is not None and name <= previous:
            raise DeltaFormatError(f"{where}: names must be strictly increasing, it follows {previous!r}")
        code, width, ndim = reader.integers(_LAYOUT, f"{where} dtype code, index width and ndim")
        tensors.append(_tensor_info(reader, where, name, code, width, ndim))
        previous = name
    if reader.offset != len(data):
        raise DeltaFormatError(f"delta header: {len(data) - reader.offset} unexpected bytes after the last tensor")
    try:
        return DeltaHeader(
            version=version, base_hash=base_raw.hex(), result_hash=result_raw.hex(), tensors=tuple(tensors)
        )
    except ValidationError as exc:
        raise DeltaFormatError(f"delta header does not validate: {exc}") from None


def _tensor_info(reader: _Reader, where: str, name: str, code: int, width: int, ndim: int) -> DeltaTensorInfo:
    kind = kind_by_code(code)
    if kind is None:
        raise DeltaFormatError(f"{where}: unknown dtype code {code}")
    if width not in INDEX_WIDTHS:
        raise DeltaFormatError(f"{where}: index width {width} is not one of {INDEX_WIDTHS}")
    if ndim > MAX_NDIM:
        raise DeltaFormatError(f"{where}: {ndim} dimensions, at most {MAX_NDIM} allowed")
    shape = tuple(reader.integer(_U64, f"{where} dimension {axis}") for axis in range(ndim))
    numel = math.prod(shape)
    if numel > _MAX_NUMEL:
        raise DeltaFormatError(f"{where}: shape {shape} has more elements than a tensor can hold")
    changed = reader.integer(_U64, f"{where} changed count")
    if changed > numel:
        raise DeltaFormatError(f"{where}: {changed} changed elements in a tensor of {numel}")
    if changed == 0 and width != 1:
        raise DeltaFormatError(f"{where}: index width {width} for no changed element (must be 1)")
    try:
        return DeltaTensorInfo(name=name, dtype=kind.name, shape=shape, count=changed, index_width=width)
    except ValidationError as exc:
        raise DeltaFormatError(f"{where} does not validate: {exc}") from None
