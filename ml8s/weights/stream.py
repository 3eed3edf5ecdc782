"""A DELTA of a checkpoint file encoded one tensor at a time: memory bounded by a tensor pair, not the model.

``ml8s chain commit --payload`` hands a DELTA to ``checkpoint_builder`` (``ml8s.weights.commit``). The
child's tensors are read from the checkpoint file one at a time, when the encoder asks for them (at the
offsets of its checked safetensors header, ``check_safetensors``). A parent that is a FULL is downloaded
to a scratch file, checked against the size and sha256 its block records, and read the same way; the
encoder (``encode_delta_by_tensor``) hashes both sides as it goes, and the base's hash must be the one the
parent's block records. A parent that is itself a DELTA is rebuilt whole (``rebuild_weights``: every hop
checked), so there memory holds the parent's weights, the child's still one tensor at a time.

The checkpoint's weights hash was computed from the file before the commit (``hash_checkpoint``); the
encoder's result hash must equal it, else the file changed meanwhile and nothing is committed from it.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Mapping

import torch

from ml8s.chain import (
    WEIGHTS_DELTA,
    WEIGHTS_FULL,
    ChainVersion,
    ChainVersions,
    LocalFile,
    PayloadKind,
    PayloadSource,
    WeightsFields,
    check_safetensors,
    delta_due,
)
from ml8s.deltas import encode_delta_by_tensor
from ml8s.errors import ChecksumError, ConfigError, DeltaShapeError, NotFoundError, WeightsMismatchError
from ml8s.tempdirs import owned_tempdir
from ml8s.weights.rebuild import rebuild_weights, weights_file

Load = Callable[[str], torch.Tensor]


def delta_fields(parent: ChainVersion, weights_hash: str) -> WeightsFields:
    """The header fields of a DELTA on ``parent`` whose rebuilt weights hash to ``weights_hash``."""
    return WeightsFields(
        payload_kind=PayloadKind.DELTA,
        weights_hash=weights_hash,
        weights_full_counter=parent.header.weights_full_counter,
        delta_base_counter=parent.counter,
        delta_base_block_hash=parent.block_hash,
    )


class StreamingCheckpointBuilder:
    """The interval rule's payload builder for a checkpoint file (module docstring)."""

    def __init__(self, chain: ChainVersions, path: str, source: LocalFile, weights_hash: str, interval: int) -> None:
        self.chain, self.path, self.source = chain, path, source
        self.weights_hash, self.interval = weights_hash, interval

    def __call__(self, parent: ChainVersion) -> tuple[Mapping[str, PayloadSource], WeightsFields]:
        if self.weights_hash and delta_due(parent, self.interval):
            try:
                delta = self._delta(parent)
            except DeltaShapeError:
                pass  # another tensor set, dtype or shape: the interval rule makes it a FULL
            else:
                return {WEIGHTS_DELTA: delta}, delta_fields(parent, self.weights_hash)
        counter = parent.counter + 1 if self.weights_hash else 0
        return {WEIGHTS_FULL: self.source}, WeightsFields(weights_hash=self.weights_hash, weights_full_counter=counter)

    def _delta(self, parent: ChainVersion) -> bytes:
        with _tensors(self.path, f"--payload {self.path}") as (child_names, child):
            with self._parent_tensors(parent) as (names, base, recorded):
                if names != child_names:
                    added, removed = sorted(set(child_names) - set(names)), sorted(set(names) - set(child_names))
                    raise DeltaShapeError(f"tensor set changed (added {added}, removed {removed}): send a FULL payload")
                encoded = encode_delta_by_tensor(names, lambda name: (base(name), child(name)), base_hash=recorded)
        where = f"chain {self.chain.name!r} version {parent.counter} ({parent.version_dir})"
        if encoded.base_hash != parent.header.weights_hash:
            raise WeightsMismatchError(
                f"{where}: its tensors hash to {encoded.base_hash}, the block records {parent.header.weights_hash}"
            )
        if encoded.result_hash != self.weights_hash:
            raise ConfigError(
                f"--payload {self.path}: its tensors now hash to {encoded.result_hash}, {self.weights_hash} when "
                "it was first read; expected the file unchanged while it is committed"
            )
        return encoded.payload

    @contextlib.contextmanager
    def _parent_tensors(self, parent: ChainVersion) -> Iterator[tuple[list[str], Load, str | None]]:
        """(sorted names, a tensor loader, the base hash already verified or None) of the parent's weights."""
        if parent.header.payload_kind is PayloadKind.DELTA or weights_file(parent) != WEIGHTS_FULL:
            rebuilt = rebuild_weights(self.chain, parent)  # every hop checked, the weights hash included
            yield sorted(rebuilt.tensors), rebuilt.tensors.__getitem__, rebuilt.weights_hash
            return
        entry = next(f for f in parent.header.files if f.name == WEIGHTS_FULL)
        key = self.chain.version_key(parent.version_dir, "payload", WEIGHTS_FULL)  # as load_full
        where = self.chain.store.uri(key)
        with owned_tempdir("ml8s-delta-base-") as scratch:
            local = os.path.join(scratch, WEIGHTS_FULL)
            try:
                got = self.chain.store.download(key, local)
            except NotFoundError as exc:
                raise ChecksumError(f"{where} is missing", check="payload_missing") from exc
            if (got.size, got.sha256) != (entry.size, entry.sha256):
                raise ChecksumError(
                    f"{where}: {got.size} bytes sha256 {got.sha256}, the block records {entry.size} bytes sha256 "
                    f"{entry.sha256}",
                    check="payload_hash",
                )
            with _tensors(local, where) as (names, load):
                yield names, load, None  # hashed by the encoder, checked against the block after


@contextlib.contextmanager
def _tensors(path: str, where: str) -> Iterator[tuple[list[str], Load]]:
    """The sorted tensor names of a safetensors file and a loader reading one tensor from it when called.

    Plain reads, not a memory map: pages of a mapped file count in the process's resident set for as long
    as they stay mapped, so mapping a 1 GiB file and reading it through would hold 1 GiB of RSS.
    """
    summary = check_safetensors(path)
    spans = {span.name: span for span in summary.spans}
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as exc:
        raise ConfigError(f"{where}: {exc.strerror or exc}; expected a readable .safetensors file") from exc

    def load(name: str) -> torch.Tensor:
        span = spans[name]
        dtype = _TORCH_DTYPES.get(span.dtype)
        if dtype is None:
            raise DeltaShapeError(f"tensor {name!r} has dtype {span.dtype}: only a FULL payload carries it")
        buffer = bytearray(span.end - span.begin)
        view, done = memoryview(buffer), 0
        while done < len(buffer):
            try:
                got = os.preadv(fd, [view[done:]], span.begin + done)
            except OSError as exc:
                raise ConfigError(f"{where}: cannot read tensor {name!r}: {exc.strerror or exc}") from exc
            if not got:
                raise ConfigError(f"{where}: tensor {name!r} ends past the end of the file; expected it unchanged")
            done += got
        if not buffer:
            return torch.empty(span.shape, dtype=dtype)
        return torch.frombuffer(buffer, dtype=dtype).reshape(span.shape)

    try:
        yield sorted(spans), load
    finally:
        os.close(fd)


_TORCH_DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}
