"""A history's generations as read-only memory maps, and batch gathering from them.

Mapping costs address space, not memory: the pages a batch touches are read (and kept in the page cache,
shared and reclaimable), so a history far larger than RAM can be sampled.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

from ml8s.errors import RecordsFormatError
from ml8s.records.models import GenerationInfo, HistoryIndex
from ml8s.records.sampler import Batch, RecencySampler, SamplerConfig
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

    @property
    def schema(self) -> RecordSchema:
        return self.index.record_schema

    @property
    def generation_rows(self) -> tuple[int, ...]:
        return self.index.rows

    def sampler(self, config: SamplerConfig) -> RecencySampler:
        """A :class:`RecencySampler` over exactly these generations."""
        return RecencySampler(self.generation_rows, config)

    def gather(self, batch: Batch) -> tuple[NDArray[np.float32], NDArray[np.int64]]:
        """:func:`gather` over this history's maps."""
        return gather(self.maps, batch)


def map_generation(path: str, info: GenerationInfo, schema: RecordSchema) -> NDArray[np.float32]:
    """``path`` (already checked to be ``info.size`` bytes) as a read-only ``(rows, columns)`` array."""
    mapped: NDArray[np.float32] = np.memmap(path, dtype=RECORD_DTYPE, mode="r", shape=(info.rows, schema.columns))
    return mapped


def gather(maps: Sequence[NDArray[np.float32]], batch: Batch) -> tuple[NDArray[np.float32], NDArray[np.int64]]:
    """The features ``X`` (float32, ``[B, n_features]``) and class indices ``y`` (int64, ``[B]``) of a batch.

    Rows are read with one fancy-indexing call per generation present in the batch, in batch order. A batch
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
    features = np.empty((generations.size, columns - 1), dtype=np.float32)
    targets = np.empty(generations.size, dtype=np.int64)
    if generations.size == 0:
        return features, targets
    order = None if bool(np.all(generations[1:] >= generations[:-1])) else np.argsort(generations, kind="stable")
    if order is not None:
        generations, rows = generations[order], rows[order]
    starts = np.concatenate(([0], np.flatnonzero(np.diff(generations)) + 1, [generations.size]))
    for start, end in zip(starts[:-1].tolist(), starts[1:].tolist(), strict=True):
        generation, picked = int(generations[start]), rows[start:end]
        if not 0 <= generation < len(maps) or int(picked.min()) < 0 or int(picked.max()) >= maps[generation].shape[0]:
            bound = maps[generation].shape[0] if 0 <= generation < len(maps) else 0
            raise RecordsFormatError(
                f"batch draws generation {generation} rows {int(picked.min())}..{int(picked.max())}; expected a "
                f"generation 0..{len(maps) - 1} and rows 0..{bound - 1}"
            )
        block = maps[generation][picked]
        features[start:end] = block[:, : columns - 1]
        targets[start:end] = block[:, columns - 1]
    if order is None:
        return features, targets
    unsorted_features, unsorted_targets = np.empty_like(features), np.empty_like(targets)
    unsorted_features[order], unsorted_targets[order] = features, targets
    return unsorted_features, unsorted_targets
