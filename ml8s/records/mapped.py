"""A history's generations as read-only memory maps, and batch gathering from them.

Mapping costs address space, not memory: the pages a batch touches are read into the page cache (shared
and reclaimable), so a history far larger than RAM can be sampled. Those pages do count in the process's
resident set while they stay mapped; :meth:`MappedHistory.release` drops them from it (not from the page
cache), which keeps the resident set independent of the history's size.
"""

from __future__ import annotations

import dataclasses
import mmap
from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

from ml8s.errors import RecordsFormatError
from ml8s.records.models import GenerationInfo, HistoryIndex
from ml8s.records.sampler import Batch, RecencySampler, SamplerConfig, SamplerState
from ml8s.records.schema import RECORD_DTYPE, RecordSchema


@dataclasses.dataclass(frozen=True)
class MappedHistory:
    """Every generation of a verified history, mapped read-only as a ``(rows, n_features + 1)`` float32 array.

    A dataclass rather than a pydantic model: it holds memory maps, which are process-local and never
    serialized; what describes it (``index``) is the pydantic model read from the store.
    """

    index: HistoryIndex
    paths: tuple[str, ...]
    maps: tuple[NDArray[np.float32], ...]
    regions: tuple[mmap.mmap, ...] = dataclasses.field(repr=False)

    @property
    def schema(self) -> RecordSchema:
        return self.index.record_schema

    @property
    def generation_rows(self) -> tuple[int, ...]:
        return self.index.rows

    def sampler(self, config: SamplerConfig) -> RecencySampler:
        """A :class:`RecencySampler` over exactly these generations."""
        return RecencySampler(self.generation_rows, config)

    def resume_sampler(self, state: SamplerState) -> RecencySampler:
        """The sampler ``state`` was taken from, checked to have been drawing from this history.

        The history may have grown since (generations are only ever appended): the sampler keeps drawing from
        the generations it started with, so its batches are exactly those it would have drawn uninterrupted.

        Raises:
            RecordsFormatError: ``state`` counts rows this history's first generations do not have.
        """
        started = state.generation_rows
        if self.generation_rows[: len(started)] != started:
            raise RecordsFormatError(
                f"sampler state drew from generations of {list(started)[:8]} rows; this history's first generations "
                f"have {list(self.generation_rows[: len(started)])[:8]}: not the history the sampler was drawing from"
            )
        return RecencySampler.resume(state)

    def gather(self, batch: Batch) -> tuple[NDArray[np.float32], NDArray[np.int64]]:
        """:func:`gather` over this history's maps."""
        return gather(self.maps, batch)

    def release(self) -> None:
        """Unmap from this process the record pages read so far; they stay cached and are re-mapped on use.

        The maps stay valid. Calling this every few hundred batches bounds the resident set by what those
        batches touched, whatever the size of the history; the cost is a (minor) page fault per page re-read.
        """
        for region in self.regions:
            region.madvise(mmap.MADV_DONTNEED)


def map_generation(path: str, info: GenerationInfo, schema: RecordSchema) -> tuple[NDArray[np.float32], mmap.mmap]:
    """``path`` (already checked to be ``info.size`` bytes) as a read-only ``(rows, columns)`` array.

    Returns the array and the mapping under it. The mapping is advised random access: batches jump across
    the file, so the kernel's read-ahead would mostly fetch records nobody asked for.
    """
    with open(path, "rb") as handle:
        region = mmap.mmap(handle.fileno(), info.size, access=mmap.ACCESS_READ)
    region.madvise(mmap.MADV_RANDOM)
    array: NDArray[np.float32] = np.frombuffer(region, dtype=RECORD_DTYPE).reshape(info.rows, schema.columns)
    return array, region


def gather(maps: Sequence[NDArray[np.float32]], batch: Batch) -> tuple[NDArray[np.float32], NDArray[np.int64]]:
    """The features ``X`` (float32, ``[B, n_features]``) and class indices ``y`` (int64, ``[B]``) of a batch.

    Rows are read with one vectorized ``take`` per generation present in the batch, in batch order. A batch
    not sorted by generation (e.g. built by hand) is grouped first and returned in its own order.

    Raises:
        RecordsFormatError: the batch names a generation or row the maps do not have.
    """
    generations, rows = np.asarray(batch.generations, dtype=np.int64), np.asarray(batch.rows, dtype=np.int64)
    if not maps or generations.shape != rows.shape or generations.ndim != 1:
        raise RecordsFormatError(
            f"batch of {generations.shape} generations and {rows.shape} rows over {len(maps)} maps: expected two "
            "equal 1-D arrays and at least one map"
        )
    columns = maps[0].shape[1]
    records = np.empty((generations.size, columns), dtype=np.float32)
    order = None if bool(np.all(generations[1:] >= generations[:-1])) else np.argsort(generations, kind="stable")
    if order is not None:
        generations, rows = generations[order], rows[order]
    starts = np.concatenate(([0], np.flatnonzero(np.diff(generations)) + 1, [generations.size]))
    for start, end in zip(starts[:-1].tolist(), starts[1:].tolist(), strict=True):
        generation, picked = int(generations[start]), rows[start:end]
        source = maps[generation] if 0 <= generation < len(maps) else None
        if source is None or int(picked.min()) < 0 or int(picked.max()) >= source.shape[0]:
            bound = 0 if source is None else source.shape[0]
            raise RecordsFormatError(
                f"batch draws generation {generation} rows {int(picked.min())}..{int(picked.max())}; expected a "
                f"generation 0..{len(maps) - 1} and rows 0..{bound - 1}"
            )
        if source.ndim != 2 or source.shape[1] != columns:
            raise RecordsFormatError(f"map {generation} has shape {source.shape}; expected (rows, {columns})")
        if source.dtype == records.dtype:
            # take() straight into the batch buffer: one copy, and faster than fancy indexing on a mapped
            # array; "clip" only skips numpy's own bounds buffering, the bounds were checked just above
            np.take(source, picked, axis=0, out=records[start:end], mode="clip")
        else:  # a big-endian host: the records stay little-endian on disk
            records[start:end] = source[picked]
    features: NDArray[np.float32] = np.ascontiguousarray(records[:, : columns - 1])
    targets: NDArray[np.int64] = records[:, columns - 1].astype(np.int64)
    if order is None:
        return features, targets
    unsorted_features, unsorted_targets = np.empty_like(features), np.empty_like(targets)
    unsorted_features[order], unsorted_targets[order] = features, targets
    return unsorted_features, unsorted_targets
