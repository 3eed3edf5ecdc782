"""Committing a safetensors checkpoint file without torch: its hashes in one read, FULL or DELTA per parent.

``hash_checkpoint``: a checked checkpoint's file sha256 and weights hash in one read of the file.

The weights hash is ``ml8s.deltas.weights_hash`` of the file's tensors (the framing is restated here, the
chain must not import torch; tests/test_chain_checkpoint_hash.py holds the two equal): a safetensors file
stores each tensor's elements row-major and little-endian, exactly the raw bits that framing hashes, so
the file's bytes are hashed as they are, never turned into tensors. The file is read once, in file order,
for its sha256; each tensor's bytes feed the weights hash from the same buffer when the tensor comes next
in name order, which is every tensor of a file saved by ``safetensors`` with one dtype (it sorts by
alignment, then name). A tensor out of name order is read again afterwards, once, from the page cache.

Memory holds two chunks, whatever the checkpoint's size: while one is read, the other is hashed by the
file hash and the weights hash, each in its own thread (hashlib releases the GIL), so on two cores the
read costs about one sha256 pass.

``hashed_checkpoint``: on a local store, the same read also writes each chunk, from the buffer hashed,
to a staged file in the chain's store (``LocalStore.stage``), unless the head makes a DELTA due (which
stores no copy). A FULL then links that copy into place (``LocalStore.put_staged``: fsync, link, rename,
directory fsync) instead of reading, hashing and writing the file a second time. Both hashes are of
the bytes written, never of the source read again later (a tensor out of name order is read again from
the staged copy); a source written to while it is read (its size or times change: ``fstat`` before and
after) is ConfigError, nothing committed. Elsewhere (S3, or
a DELTA due) every byte the weights hash reads is read at or after the file hash read it, so a file
changed meanwhile gives an upload whose sha256 differs from the recorded one, which
``Store.put_file_expecting`` refuses.

``CheckpointBuilder``: the payload builder of ``commit_with_retry`` for such a file. A FULL stores the
file as is (streamed); only when the parent makes a DELTA due (``delta_due``, the interval rule of
``ml8s.weights.commit_weights``) does it call the DELTA builder it was given, which reads the tensors
one at a time (torch): a FULL commit never imports torch.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import struct
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor

from ml8s.chain.models import ChainVersion, LocalFile, PayloadBuilder, PayloadKind, PayloadSource, WeightsFields
from ml8s.chain.safetensors_check import SafetensorsSummary, TensorSpan
from ml8s.chain.versions import ChainVersions
from ml8s.errors import ConfigError
from ml8s.store import LocalStore, StagedWriter

WEIGHTS_FULL = "model_native.safetensors"
WEIGHTS_DELTA = "weights.delta"
# safetensors dtype -> the dtype name the weights hash frames (only these carry a weights hash)
FLOAT_DTYPES = {"F32": "float32", "F16": "float16", "BF16": "bfloat16"}
NAN_CHECKED = {*FLOAT_DTYPES, "F64"}  # checked for NaN whether or not the file carries a weights hash
_DOMAIN = b"ml8s.weights.v1\x00"
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_CHUNK = 1024 * 1024
_Update = Callable[[memoryview], None]


def hash_checkpoint(path: str, summary: SafetensorsSummary, stage: StagedWriter | None = None) -> tuple[LocalFile, str]:
    """The file as a payload entry (sha256, size) and its weights hash ("" unless every tensor is float); every
    float tensor (NAN_CHECKED) is checked for NaN either way.

    With ``stage``, every buffer read is also written there, so the copy holds exactly the bytes hashed,
    and a tensor out of name order is read again from that copy, not from ``path``.

    Raises:
        ConfigError: the file cannot be read, or its size changed since ``summary`` was taken.
        StoreError: ``stage`` cannot be written.
    """
    hashed = all(span.dtype in FLOAT_DTYPES for span in summary.spans)
    by_name = sorted(summary.spans, key=lambda span: span.name) if hashed else []
    weights = hashlib.sha256(_DOMAIN + _U64.pack(len(by_name)))
    whole = hashlib.sha256()
    done = 0  # tensors (in name order) already in the weights hash
    try:
        with open(path, "rb", buffering=0) as handle:
            before = _version_of(os.fstat(handle.fileno()))
            with _Feeder(path, handle, stage) as feed:
                feed(summary.data_start, whole.update, None)
                for span in summary.spans:
                    inline = done < len(by_name) and by_name[done] == span
                    if inline:
                        feed.also(weights.update, _frame(path, span))
                        done += 1
                    # no weights hash (an int buffer beside the weights): the NaN check still reads each float tensor
                    check = _checked(path, span, _ignored) if not hashed and span.dtype in NAN_CHECKED else None
                    feed(span.end - span.begin, whole.update, _checked(path, span, weights.update) if inline else check)
                size = handle.tell()
                if handle.read(1):
                    raise ConfigError(f"--payload {path}: the file grew while it was read; expected it unchanged")
            if _version_of(os.fstat(handle.fileno())) != before:  # written to meanwhile: the bytes may be torn
                raise ConfigError(f"--payload {path}: the file was modified while it was read; expected it unchanged")
            if by_name[done:]:  # after the feeder's threads are done with the weights hash
                _hash_again(path, handle if stage is None else None, stage, by_name[done:], weights.update)
    except OSError as exc:
        raise ConfigError(f"--payload {path}: {exc.strerror or exc}; expected a readable .safetensors file") from exc
    source = LocalFile(path=path, sha256=whole.hexdigest(), size=size)
    return source, weights.hexdigest() if hashed else ""


@contextlib.contextmanager
def hashed_checkpoint(
    chain: ChainVersions, path: str, summary: SafetensorsSummary, interval: int
) -> Iterator[tuple[LocalFile, str]]:
    """``hash_checkpoint`` of ``path``, staged in the chain's store while it is read when that store is local
    and the head makes a FULL due (module docstring): the payload entry then names the staged copy.

    The staged file is deleted when the block ends; a crash leaves it under the chain's ``.tmp/``, for
    ``ml8s chain gc`` or ``ml8s tmp-cleanup``.
    """
    store = chain.store
    if not isinstance(store, LocalStore) or _delta_likely(chain, summary, interval):
        yield hash_checkpoint(path, summary)
        return
    tmp_key = chain.tmp_key()
    with store.stage(tmp_key) as stage:
        source, weights_hash = hash_checkpoint(path, summary, stage)
    try:
        yield LocalFile(path=stage.path, sha256=source.sha256, size=source.size, staged=True), weights_hash
    finally:  # a name of ours under .tmp/ (a random one): no pruning or fsync, a lost unlink is a stale tmp
        with contextlib.suppress(FileNotFoundError):
            os.unlink(stage.path)


def _delta_likely(chain: ChainVersions, summary: SafetensorsSummary, interval: int) -> bool:
    """Whether the head makes a DELTA due now (it may move before the commit, whose builder decides again)."""
    if not all(span.dtype in FLOAT_DTYPES for span in summary.spans):
        return False
    pointer = chain.read_head()
    return pointer is not None and delta_due(chain.at(pointer[0]), interval)


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


def _checked(path: str, span: TensorSpan, update: _Update) -> _Update:
    """``update`` of the weights hash with a tensor's bytes (a chunk at a time, from the tensor's start), each
    chunk first checked for NaN: a NaN weight makes every prediction NaN, and a follower would serve it.
    Infinities pass (a mask buffer holds -inf by design). The check reads the chunk the hash reads, from the
    CPU cache: 0.03 s per GiB of float32 here, against 0.6 s for a sha256 pass."""
    import numpy as np  # only for a checkpoint with float tensors; ml8s.chain stays free of torch

    seen = 0

    def check_then_update(chunk: memoryview) -> None:
        nonlocal seen
        if span.dtype in ("F32", "F64"):
            nan = np.isnan(np.frombuffer(chunk, dtype="<f4" if span.dtype == "F32" else "<f8"))
        else:  # NaN: an all-ones exponent and a non-zero mantissa (bit tests: numpy's float16 is slow, bf16 absent)
            nan = (np.frombuffer(chunk, dtype="<u2") & 0x7FFF) > (0x7F80 if span.dtype == "BF16" else 0x7C00)
        if nan.any():
            raise nan_weight_error(f"--payload {path}", span.name, seen + int(np.argmax(nan)))
        seen += len(nan)
        update(chunk)

    return check_then_update


def nan_weight_error(where: str, tensor: str, element: int) -> ConfigError:
    """The refusal of a NaN weight, whoever commits it: a checkpoint file, or a producer's tensors
    (``ml8s.weights.commit_weights``), whether they would go as a FULL or a DELTA."""
    return ConfigError(
        f"{where}: tensor {tensor!r} holds NaN (element {element}); expected no NaN weight (a model with one "
        "predicts NaN; infinities are allowed)"
    )


def _ignored(chunk: memoryview) -> None:
    """The update of a NaN check that feeds no hash."""


def _hash_again(
    path: str, handle: io.FileIO | None, stage: StagedWriter | None, spans: list[TensorSpan], update: _Update
) -> None:
    """The weights hash of tensors out of name order, read again: from the staged copy if there is one."""
    buffer = memoryview(bytearray(_CHUNK))
    with contextlib.ExitStack() as stack:
        again = handle or stack.enter_context(open(stage.path if stage else path, "rb", buffering=0))
        for span in spans:
            update(memoryview(_frame(path, span)))
            tensor = _checked(path, span, update)
            again.seek(span.begin)
            left = span.end - span.begin
            while left > 0:
                got = again.readinto(buffer[: min(left, _CHUNK)])
                if not got:
                    raise ConfigError(f"--payload {path}: the file shrank while it was read; expected it unchanged")
                tensor(buffer[:got])
                left -= got


def _version_of(info: os.stat_result) -> tuple[int, int, int, int]:
    """What a write to the file changes: its size, modification and status-change times (and its inode)."""
    return info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns


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
    """Reads ``handle`` on from where it is into two buffers in turn; each buffer read is written to the
    stage (if any) in this thread while the file hash and the weights hash take it in two others, each in
    its own thread (so each sees its buffers in order); a buffer is read into again once both are done."""

    def __init__(self, path: str, handle: io.FileIO, stage: StagedWriter | None) -> None:
        self.path, self.handle, self.stage = path, handle, stage
        self.buffers = [memoryview(bytearray(_CHUNK)) for _ in range(2)]
        self.pending: list[list[Future[None]]] = [[], []]
        self.turn = 0
        self.pools = [ThreadPoolExecutor(1, thread_name_prefix=f"ml8s-hash{n}") for n in range(2)]

    def __enter__(self) -> _Feeder:
        return self

    def __exit__(self, error: type[BaseException] | None, *rest: object) -> None:
        for pool in self.pools:  # waits for the hashes still queued: the buffers outlive them
            pool.shutdown()
        if error is None:  # a check in a hash thread that failed on the last buffers (a NaN weight) is raised here
            for pending in self.pending:
                for future in pending:
                    future.result()

    def also(self, weights: Callable[[bytes], None], data: bytes) -> None:
        """``data`` into the weights hash, in order with the buffers queued for it."""
        self.pools[1].submit(weights, data)

    def __call__(self, count: int, whole: _Update, weights: _Update | None) -> None:
        while count > 0:
            for future in self.pending[self.turn]:
                future.result()
            buffer = self.buffers[self.turn]
            got = self.handle.readinto(buffer[: min(count, len(buffer))])
            if not got:
                raise ConfigError(f"--payload {self.path}: the file shrank while it was read; expected it unchanged")
            chunk = buffer[:got]
            pending = [self.pools[0].submit(whole, chunk)]
            if weights is not None:
                pending.append(self.pools[1].submit(weights, chunk))
            self.pending[self.turn] = pending
            if self.stage is not None:
                self.stage.write(chunk)
            self.turn ^= 1
            count -= got
