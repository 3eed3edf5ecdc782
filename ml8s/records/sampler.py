"""Recency-weighted batch sampling over every generation of a history: old data is down-weighted, never dropped.

The distribution (the same as the seed's per-sample sampler, drawn a whole batch at a time):

- a draw first picks generation ``g`` (0 = oldest) with probability ``(g + 1) ** alpha / Σ_h (h + 1) ** alpha``,
  *whatever its row count*: ``alpha`` 0 is uniform over generations, 1 linear, 2 quadratic;
- then a row of that generation uniformly, so one row of generation ``g`` has probability
  ``P(g) / rows_g``. A small recent generation is therefore drawn as often as a large one of the same age
  weight: the weighting is over generations (training rounds), not over rows.

Draws are with replacement. Within a batch the pairs are sorted by (generation, row) so the reads walk each
record file forward; this changes only the order *inside* a batch (which rows a batch holds, and which
batch comes next, do not depend on it), and a batch's mean loss and gradient do not depend on row order.

Deterministic from the seed (numpy ``Generator(PCG64(seed))``) and resumable exactly: :meth:`RecencySampler.state`
is everything needed for :meth:`RecencySampler.resume` to continue with the identical next batch.
"""

from __future__ import annotations

import dataclasses
import math
import operator
from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray
from pydantic import BaseModel, ConfigDict, Field, PositiveInt

from ml8s.errors import RecordsFormatError
from ml8s.records.models import parse_model


class SamplerConfig(BaseModel):
    """How to draw: recency exponent, rows per batch, and the seed every batch follows from."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    alpha: float = Field(default=1.0, ge=0.0, allow_inf_nan=False)
    batch_size: int = Field(ge=1)
    seed: int = Field(ge=0)


class BitGeneratorState(BaseModel):
    """numpy's PCG64 state as plain (arbitrary-precision) integers: JSON-safe, no numpy objects."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    state: int = Field(ge=0, lt=2**128)
    inc: int = Field(ge=0, lt=2**128)
    has_uint32: int = Field(ge=0, le=1)
    uinteger: int = Field(ge=0, lt=2**32)


class SamplerState(BaseModel):
    """Everything needed to continue a sampler exactly: its config, the history it draws from, its position."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    config: SamplerConfig
    generation_rows: tuple[PositiveInt, ...] = Field(min_length=1)
    batches_drawn: int = Field(ge=0)
    bit_generator: BitGeneratorState


def load_sampler_state(data: bytes, where: str = "sampler state") -> SamplerState:
    """A :class:`SamplerState` from its JSON (``state().model_dump_json()``); anything else a RecordsFormatError."""
    return parse_model(SamplerState, data, where)


@dataclasses.dataclass(frozen=True)
class Batch:
    """One batch of draws: ``generations[i]`` and ``rows[i]`` locate draw ``i``, sorted by (generation, row).

    A dataclass rather than a pydantic model: it carries numpy arrays between two calls in one process and
    is never serialized.
    """

    generations: NDArray[np.int64]
    rows: NDArray[np.int64]


class RecencySampler:
    """Draws :class:`Batch` es over generations of ``generation_rows`` rows each (oldest first)."""

    def __init__(self, generation_rows: Sequence[int], config: SamplerConfig) -> None:
        try:
            counts = tuple(operator.index(n) for n in generation_rows)
        except TypeError:
            counts = ()
        if not counts or min(counts) < 1:
            raise RecordsFormatError(
                f"generation row counts {list(generation_rows)[:8]}: expected at least one generation, each ≥ 1 row"
            )
        self.config = config
        self.generation_rows = counts
        self._rows = np.asarray(self.generation_rows, dtype=np.int64)
        self._offsets = np.concatenate(([0], np.cumsum(self._rows)[:-1])).astype(np.int64)
        self._probabilities = generation_probabilities(len(self.generation_rows), config.alpha)
        self._cdf = np.cumsum(self._probabilities)
        self._cdf[-1] = 1.0  # rounding must not leave a sliver above the last generation
        self._rng = np.random.Generator(np.random.PCG64(config.seed))
        self.batches_drawn = 0

    @classmethod
    def resume(cls, state: SamplerState) -> RecencySampler:
        """The sampler that ``state`` was taken from, at the same position: its next batch is the same."""
        sampler = cls(state.generation_rows, state.config)
        bits = state.bit_generator
        sampler._rng.bit_generator.state = {
            "bit_generator": "PCG64",
            "state": {"state": bits.state, "inc": bits.inc},
            "has_uint32": bits.has_uint32,
            "uinteger": bits.uinteger,
        }
        sampler.batches_drawn = state.batches_drawn
        return sampler

    @classmethod
    def continued(cls, state: SamplerState, generation_rows: Sequence[int], config: SamplerConfig) -> RecencySampler:
        """A sampler over a history grown since ``state`` (new generations appended), continuing its random
        stream and batch count: what a warm start draws with. Unlike :meth:`resume`, it draws from every
        generation given, with ``config``'s weights.

        Raises:
            RecordsFormatError: ``generation_rows`` does not begin with the generations ``state`` drew from.
        """
        started = state.generation_rows
        if tuple(generation_rows[: len(started)]) != started:
            raise RecordsFormatError(
                f"sampler state drew from generations of {list(started)[:8]} rows; the history's first generations "
                f"have {list(generation_rows[: len(started)])[:8]}: not a history grown from it"
            )
        sampler = cls.resume(state.model_copy(update={"config": config, "generation_rows": tuple(generation_rows)}))
        return sampler

    @property
    def probabilities(self) -> NDArray[np.float64]:
        """Probability that one draw comes from each generation (oldest first)."""
        return self._probabilities.copy()

    def sample(self) -> Batch:
        """The next batch: ``batch_size`` draws, all at once, sorted by (generation, row)."""
        size = self.config.batch_size
        chosen = np.searchsorted(self._cdf, self._rng.random(size), side="right").astype(np.int64)
        rows = self._rng.integers(0, self._rows[chosen], dtype=np.int64)
        # one sort of global positions orders by generation then row, and maps back by the offsets
        position = np.sort(self._offsets[chosen] + rows)
        generations = (np.searchsorted(self._offsets, position, side="right") - 1).astype(np.int64)
        self.batches_drawn += 1
        return Batch(generations=generations, rows=position - self._offsets[generations])

    def state(self) -> SamplerState:
        """Where this sampler stands, for :meth:`resume` (in this process or another)."""
        raw = self._rng.bit_generator.state
        return SamplerState(
            config=self.config,
            generation_rows=self.generation_rows,
            batches_drawn=self.batches_drawn,
            bit_generator=BitGeneratorState(
                state=int(raw["state"]["state"]),
                inc=int(raw["state"]["inc"]),
                has_uint32=int(raw["has_uint32"]),
                uinteger=int(raw["uinteger"]),
            ),
        )


def generation_probabilities(generations: int, alpha: float) -> NDArray[np.float64]:
    """``(g + 1) ** alpha`` normalised over ``generations`` generations.

    Computed in log space, so large histories with a large ``alpha`` neither overflow nor lose the old
    generations' (small, non-zero) weights to rounding before normalisation.
    """
    if generations < 1 or not math.isfinite(alpha) or alpha < 0:
        raise RecordsFormatError(f"{generations} generations, alpha {alpha}: expected ≥ 1 and a finite alpha ≥ 0")
    log_weights = alpha * np.log(np.arange(1, generations + 1, dtype=np.float64))
    weights = np.exp(log_weights - log_weights[-1])
    probabilities: NDArray[np.float64] = weights / weights.sum()
    return probabilities
