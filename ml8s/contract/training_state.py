"""``model/training_state.safetensors``: everything a warm start continues from (canonicalization 2.1.0 on).

The file holds the optimizer's tensors (Adam's two moments and step per parameter, named
``adam.{exp_avg,exp_avg_sq,step}.{parameter}``) and, as its one safetensors metadata entry
(``ml8s.training_state``, so the header's bytes do not depend on dict order), the :class:`TrainingState`
below as canonical JSON: the lineage the model belongs to and the data generations it has seen, its step
counters, every RNG state and the history sampler's position.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, StringConstraints

from ml8s.contract._base import ContractModel
from ml8s.records import SamplerState

Hex64 = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]
METADATA_KEY = "ml8s.training_state"
STATE_VERSION = 1


class Generation(ContractModel):
    """One data generation of the lineage: the DATA_ROOT partition it is (``partition``: a top-level file or
    folder name; ``""`` for a cold start's whole DATA_ROOT) and the files it holds, as fingerprint tokens.

    A cold start records its generation 0 with no files: they are those of the ``data_fingerprint.json`` beside
    it (in its run and its chain payload), so its training state does not depend on where the same bytes were
    read from (a disk or a bucket). A warm start lists every generation's files."""

    index: int = Field(ge=0)
    partition: str
    files: list[str]
    # The generation's record file in the lineage's history (its training rows, encoded by the lineage's
    # feature transform): None until a warm start first encoded it (a cold start trains from its matrix).
    records_sha256: Hex64 | None = None
    records: int | None = Field(default=None, ge=1)


class RngStates(ContractModel):
    """Every random generator training touches, as it stood after the last optimizer step."""

    torch_cpu: str  # base64 of torch.get_rng_state()
    torch_cuda: list[str]  # base64 of each device's state; empty on a CPU run
    numpy_keys: list[int] = Field(min_length=624, max_length=624)  # the legacy global MT19937 state
    numpy_pos: int
    numpy_has_gauss: int
    numpy_cached_gaussian: float
    python: list[int] = Field(min_length=625, max_length=625)  # random.getstate()'s internal state
    python_gauss: float | None


class TrainingState(ContractModel):
    """What continues training: lineage, counters, RNGs, the sampler (None until a warm start drew a batch)."""

    state_version: int
    # The FULL_CONFIG_HASH of the lineage's cold start; None in the cold start itself (it is its own, and the
    # state stays free of the run's identity, like generation 0's files).
    lineage_id: Hex64 | None
    parent_content_hash: Hex64 | None
    generations: list[Generation] = Field(min_length=1)
    global_step: int = Field(ge=0)  # optimizer steps since the cold start
    trainings: int = Field(ge=1)  # runs in the lineage up to this one, the cold start included
    parameter_names: list[str] = Field(min_length=1)
    rng: RngStates
    sampler: SamplerState | None = None
