"""Validate a safetensors checkpoint's whole structure before anything is written, reading only its header.

A safetensors file is an 8-byte little-endian header length N, N bytes of a JSON object, then the data
section. The header maps each tensor name to ``{"dtype", "shape", "data_offsets": [begin, end]}``
(offsets relative to the data section), plus an optional ``"__metadata__"`` of strings. A file that
``safetensors.load_file`` would reject must be rejected here too, so every rule it relies on is
checked: the header's types, known dtypes, non-negative integer dimensions, each tensor's byte span
equal to dtype size x element count, and spans that tile the data section exactly (no gap, overlap or
trailing byte), so the file size must match. Each failure is one ConfigError naming the file and rule.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import struct
from typing import NoReturn

from pydantic import BaseModel, ConfigDict

from ml8s.errors import ConfigError
from ml8s.text import clipped, is_utf8

MAX_HEADER = 100 * 1024 * 1024  # safetensors' own limit
MAX_DIM = 2**62
DTYPE_BYTES = {
    "BOOL": 1,
    "U8": 1,
    "I8": 1,
    "F8_E5M2": 1,
    "F8_E4M3": 1,
    "I16": 2,
    "U16": 2,
    "F16": 2,
    "BF16": 2,
    "I32": 4,
    "U32": 4,
    "F32": 4,
    "I64": 8,
    "U64": 8,
    "F64": 8,
}


class TensorSpan(BaseModel):
    """One tensor of a checked checkpoint: where its bytes lie in the file (absolute offsets)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    dtype: str
    shape: tuple[int, ...]
    begin: int
    end: int


class SafetensorsSummary(BaseModel):
    """What the chain records of a checkpoint (architecture fingerprint, parameter count), and its layout:
    the tensors in file order, which tile ``[data_start, file size)`` exactly."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    architecture: str
    parameter_count: int
    tensors: int
    data_start: int
    spans: tuple[TensorSpan, ...]


_KINDS = {
    stat.S_IFDIR: "a directory",
    stat.S_IFIFO: "a FIFO",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
}


def check_safetensors(path: str) -> SafetensorsSummary:
    """The checkpoint's summary; ConfigError naming the first structural problem (module docstring).

    The architecture names the tensors, their dtypes and ranks but not their sizes: a wider layer is a
    minor bump (more parameters), a new or removed tensor a major one.
    """
    try:
        # O_NONBLOCK: a FIFO opens at once (and is refused below) instead of waiting for a writer forever.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        mode, size = os.fstat(fd).st_mode, os.fstat(fd).st_size
        if not stat.S_ISREG(mode):
            os.close(fd)
            raise ConfigError(
                f"--payload {path}: {_KINDS.get(stat.S_IFMT(mode), 'no regular file')}, not read; "
                "expected a .safetensors file"
            )
        with os.fdopen(fd, "rb") as handle:
            prefix = handle.read(8)
            if len(prefix) < 8:
                _fail(path, f"{size} bytes: too short for the 8-byte header length")
            (length,) = struct.unpack("<Q", prefix)
            if not 2 <= length <= min(MAX_HEADER, size - 8):
                _fail(path, f"header length {length} does not fit a {size}-byte file (at most {MAX_HEADER})")
            raw = handle.read(length)
    except OSError as exc:
        raise ConfigError(f"--payload {path}: {exc.strerror or exc}; expected a readable .safetensors file") from exc
    try:
        header = json.loads(raw.decode("utf-8"), parse_constant=_no_constant, object_pairs_hook=_unique_keys)
    except _DuplicateKey as exc:
        _fail(path, f"the header names {exc.args[0]!r} twice (JSON readers disagree on which one counts)")
    except _LoneSurrogate as exc:
        _fail(path, f"the header's string {_brief(exc.args[0])} escapes a lone UTF-16 surrogate, which is no text")
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        _fail(path, f"the header is not UTF-8 JSON ({type(exc).__name__})")
    if not isinstance(header, dict):
        _fail(path, f"the header is a JSON {type(header).__name__}, expected an object")
    metadata = header.pop("__metadata__", {})
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        _fail(path, "__metadata__ must be an object of strings")
    if not header:
        _fail(path, "the header lists no tensors")
    spans: list[tuple[int, int, str]] = []
    layout: list[str] = []
    tensors: list[TensorSpan] = []
    count = 0
    start = 8 + length
    for name, entry in sorted(header.items()):
        begin, end, elements, dtype, rank = _entry(path, name, entry, size - start)
        spans.append((begin, end, name))
        layout.append(f"{name}:{dtype}:{rank}d")
        tensors.append(TensorSpan(name=name, dtype=dtype, shape=entry["shape"], begin=start + begin, end=start + end))
        count += elements
    _tiles(path, spans, size - start)
    digest = hashlib.sha256("|".join(layout).encode()).hexdigest()[:16]
    return SafetensorsSummary(
        architecture=f"safetensors:{digest}",
        parameter_count=count,
        tensors=len(spans),
        data_start=start,
        spans=tuple(sorted(tensors, key=lambda t: (t.begin, t.end))),
    )


def _entry(path: str, name: str, entry: object, data_size: int) -> tuple[int, int, int, str, int]:
    """(begin, end, element count, dtype, rank) of one tensor entry, every field checked.

    The element count stops growing once it passes the data section: a shape of thousands of 2**62
    dimensions would otherwise make a product of millions of digits (quadratic time, and an integer too
    long to print in the error).
    """
    if not isinstance(entry, dict) or set(entry) != {"dtype", "shape", "data_offsets"}:
        _fail(path, f"tensor {name!r}: expected an object with exactly dtype, shape and data_offsets")
    dtype, shape, offsets = entry["dtype"], entry["shape"], entry["data_offsets"]
    if not isinstance(dtype, str) or dtype not in DTYPE_BYTES:
        _fail(path, f"tensor {name!r}: dtype {dtype!r} is not one of {sorted(DTYPE_BYTES)}")
    if not isinstance(shape, list) or not all(_is_int(d) and 0 <= d <= MAX_DIM for d in shape):
        _fail(path, f"tensor {name!r}: shape {_brief(shape)} must be a list of integers in [0, 2**62]")
    if not isinstance(offsets, list) or len(offsets) != 2 or not all(_is_int(o) and o >= 0 for o in offsets):
        _fail(path, f"tensor {name!r}: data_offsets {_brief(offsets)} must be two non-negative integers")
    elements = 0 if 0 in shape else 1
    for dim in shape:
        if elements > data_size:
            break
        elements *= dim
    if elements > data_size:
        _fail(
            path, f"tensor {name!r}: {dtype} x a {len(shape)}-d shape needs more than the {data_size}-byte data section"
        )
    begin, end = offsets
    if end < begin or end - begin != elements * DTYPE_BYTES[dtype]:
        _fail(
            path,
            f"tensor {name!r}: data_offsets {offsets} span {end - begin} bytes, but {dtype} x {_brief(shape)} needs "
            f"{elements * DTYPE_BYTES[dtype]}",
        )
    return begin, end, elements, dtype, len(shape)


def _tiles(path: str, spans: list[tuple[int, int, str]], data_size: int) -> None:
    """The spans, sorted, must cover [0, data_size) exactly: no gap, no overlap, nothing after."""
    position = 0
    for begin, end, name in sorted(spans):
        if begin != position:
            what = "overlaps the previous tensor" if begin < position else f"leaves a gap at byte {position}"
            _fail(path, f"tensor {name!r} starts at data byte {begin} and {what}")
        position = end
    if position != data_size:
        _fail(path, f"the tensors end at data byte {position}, the data section has {data_size} bytes (truncated?)")


def _brief(value: object) -> str:
    """A header value for an error message, cut short: a hostile header can hold megabytes in one field."""
    return clipped(repr(value))


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


class _DuplicateKey(ValueError):
    """A JSON object names a key twice (Python keeps the last, other readers the first)."""


class _LoneSurrogate(ValueError):
    """A JSON string escapes half a UTF-16 pair ("\\ud800"): Python decodes it, safetensors refuses it, and
    the architecture fingerprint (a UTF-8 encoding of the names) cannot be taken."""


def _unique_keys(pairs: list[tuple[str, object]]) -> dict[str, object]:
    unique: dict[str, object] = {}
    for key, value in pairs:
        if key in unique:
            raise _DuplicateKey(key)
        for text in (key, value):
            if isinstance(text, str) and not text.isascii() and not is_utf8(text):
                raise _LoneSurrogate(text)
        unique[key] = value
    return unique


def _no_constant(name: str) -> object:
    raise ValueError(f"{name} is not JSON")


def _fail(path: str, why: str) -> NoReturn:
    raise ConfigError(f"--payload {path} is not a valid safetensors file: {why}; expected a .safetensors checkpoint")
