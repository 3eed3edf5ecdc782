"""Committing a safetensors checkpoint file without torch: its hashes in one read, FULL or DELTA per parent.

``hash_checkpoint``: a checked checkpoint's file sha256 and weights hash in one read of the file.

The weights hash is ``ml8s.deltas.weights_hash`` of the file's tensors (the framing is restated here, the
chain must not import torch; tests/test_chain_checkpoint_hash.py holds the two equal): a safetensors file
stores each tensor's elements row-major and little-endian, exactly the raw bits that framing hashes, so
the file's bytes are hashed as they are, never turned into tensors. The file is read once, in file order,
for its sha256; each tensor's bytes feed the weights hash from the same buffer when the tensor comes next
in name order, which is every tensor of a file saved by ``safetensors`` with one dtype (it sorts by
alignment, then name). A tensor out of name order is read again afterwards, once, from the page cache.

Every byte the weights hash reads is read at or after the file hash read it, so a file changed meanwhile
gives a copy whose sha256 differs from the recorded one, which ``Store.put_file_expecting`` refuses.
Memory holds one chunk, whatever the checkpoint's size. A chunk feeding both hashes is hashed by both at
once, one in a second thread (hashlib releases the GIL): on two cores the read costs one sha256 pass.

``CheckpointBuilder``: the payload builder of ``commit_with_retry`` for such a file. A FULL stores the
file as is (streamed); only when the parent makes a DELTA due (``delta_due``, the interval rule of
``ml8s.weights.commit_weights``) does it call the DELTA builder it was given, which reads the tensors
one at a time (torch): a FULL commit never imports torch.
"""

from __future__ import annotations

import hashlib
import io
import struct
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from ml8s.chain.models import ChainVersion, LocalFile, PayloadBuilder, PayloadKind, PayloadSource, WeightsFields
from ml8s.chain.safetensors_check import SafetensorsSummary, TensorSpan
from ml8s.errors import ConfigError

WEIGHTS_FULL = "model_native.safetensors"
WEIGHTS_DELTA = "weights.delta"
# safetensors dtype -> the dtype name the weights hash frames (only these carry a weights hash)
FLOAT_DTYPES = {"F32": "float32", "F16": "float16", "BF16": "bfloat16"}
_DOMAIN = b"ml8s.weights.v1\x00"
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_CHUNK = 1024 * 1024


def hash_checkpoint(path: str, summary: SafetensorsSummary) -> tuple[LocalFile, str]:
    """The file as a payload entry (sha256, size) and its weights hash ("" unless every tensor is float).

    Raises:
        ConfigError: the file cannot be read, or its size changed since ``summary`` was taken.
    """
    hashed = all(span.dtype in FLOAT_DTYPES for span in summary.spans)
    by_name = sorted(summary.spans, key=lambda span: span.name) if hashed else []
    weights = hashlib.sha256(_DOMAIN + _U64.pack(len(by_name)))
    whole = hashlib.sha256()
    done = 0  # tensors (in name order) already in the weights hash
    try:
        with ThreadPoolExecutor(1, thread_name_prefix="ml8s-hash") as pool, open(path, "rb", buffering=0) as handle:
            feed = _Feeder(path, handle, pool)
            feed(summary.data_start, (whole.update,))
            for span in summary.spans:
                inline = done < len(by_name) and by_name[done] == span
                if inline:
                    weights.update(_frame(path, span))
                    done += 1
                feed(span.end - span.begin, (whole.update, weights.update)[: 1 + inline])
            size = handle.tell()
            if handle.read(1):
                raise ConfigError(f"--payload {path}: the file grew while it was read; expected it unchanged")
            for span in by_name[done:]:
                handle.seek(span.begin)
                weights.update(_frame(path, span))
                feed(span.end - span.begin, (weights.update,))
    except OSError as exc:
        raise ConfigError(f"--payload {path}: {exc.strerror or exc}; expected a readable .safetensors file") from exc
    source = LocalFile(path=path, sha256=whole.hexdigest(), size=size)
    return source, weights.hexdigest() if hashed else ""


def delta_due(parent: ChainVersion, interval: int) -> bool:
    """Whether float weights committed on ``parent`` are due as a DELTA: the parent records a weights hash and
    its FULL anchor is fewer than ``interval`` versions below the new one."""
    header = parent.header
    possible = bool(header.weights_hash) and header.payload_kind is not PayloadKind.GENESIS
    return possible and parent.counter + 1 - header.weights_full_counter < interval


class CheckpointBuilder:
    """The per-attempt payload of a checkpoint file (module docstring); ``make_delta`` is called once, when
    a parent first makes a DELTA due, and its builder decides every attempt after that."""

    def __init__(
        self, source: LocalFile, weights_hash: str, interval: int, make_delta: Callable[[], PayloadBuilder]
    ) -> None:
        self.source, self.weights_hash, self.interval = source, weights_hash, interval
        self.make_delta = make_delta
        self.delta: PayloadBuilder | None = None

    def __call__(self, parent: ChainVersion) -> tuple[dict[str, PayloadSource], WeightsFields]:
        if self.delta is None and self.weights_hash and delta_due(parent, self.interval):
            self.delta = self.make_delta()
        if self.delta is not None:
            payload, fields = self.delta(parent)
            return dict(payload), fields
        counter = parent.counter + 1 if self.weights_hash else 0
        return {WEIGHTS_FULL: self.source}, WeightsFields(weights_hash=self.weights_hash, weights_full_counter=counter)


def _frame(path: str, span: TensorSpan) -> bytes:
    """The weights-hash framing before a tensor's bits: name, dtype name, shape, byte length."""
    try:
        name = span.name.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ConfigError(f"--payload {path}: tensor name {span.name!r} is not valid Unicode: {exc.reason}") from None
    dtype = FLOAT_DTYPES[span.dtype].encode("ascii")
    shape = _U32.pack(len(span.shape)) + struct.pack(f"<{len(span.shape)}Q", *span.shape)
    return _U32.pack(len(name)) + name + _U32.pack(len(dtype)) + dtype + shape + _U64.pack(span.end - span.begin)


class _Feeder:
    """Reads ``handle`` on from where it is, a chunk at a time, into hashes (the first here, any other in ``pool``)."""

    def __init__(self, path: str, handle: io.FileIO, pool: ThreadPoolExecutor) -> None:
        self.path, self.handle, self.pool = path, handle, pool
        self.buffer = memoryview(bytearray(_CHUNK))

    def __call__(self, count: int, updates: tuple[Callable[[memoryview], None], ...]) -> None:
        while count > 0:
            got = self.handle.readinto(self.buffer[: min(count, len(self.buffer))])
            if not got:
                raise ConfigError(f"--payload {self.path}: the file shrank while it was read; expected it unchanged")
            chunk = self.buffer[:got]
            others = [self.pool.submit(update, chunk) for update in updates[1:]]
            updates[0](chunk)
            for other in others:  # before the buffer is read into again
                other.result()
            count -= got
