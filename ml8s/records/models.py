"""What a record history stores besides the records: one manifest per generation and the index listing them."""

from __future__ import annotations

from typing import TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ml8s.errors import RecordsFormatError
from ml8s.identity import canonical_bytes
from ml8s.records.schema import RecordSchema
from ml8s.text import first_problem

HISTORY_FORMAT = "ml8s-records/1"
INDEX_NAME = "history.json"
# Read whole from the store, so bounded: anyone who can write the store could otherwise plant a multi-GB
# object and exhaust a reader's memory. The index lists each generation (~350 bytes): 64 MiB is far over
# 100,000 generations; a generation's manifest is one such entry.
INDEX_MAX_BYTES = 64 * 1024 * 1024
MANIFEST_MAX_BYTES = 64 * 1024
_SHA256 = r"^[0-9a-f]{64}$"
_M = TypeVar("_M", bound=BaseModel)


def record_file_name(generation: int) -> str:
    """``gen-000042.f32``: raw records, no header, mappable as they are."""
    return f"gen-{generation:06d}.f32"


def manifest_name(generation: int) -> str:
    """``gen-000042.json``: the generation's :class:`GenerationInfo`, beside its records."""
    return f"gen-{generation:06d}.json"


class GenerationInfo(BaseModel):
    """One generation's record file: how many rows, how many bytes, their sha256, and the schema they follow."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    generation: int = Field(ge=0)
    file: str
    rows: int = Field(ge=1)
    size: int = Field(ge=1)
    sha256: str = Field(pattern=_SHA256)
    schema_hash: str = Field(pattern=_SHA256)

    @model_validator(mode="after")
    def _named(self) -> GenerationInfo:
        if self.file != record_file_name(self.generation):
            raise ValueError(f"file is {self.file!r}; expected {record_file_name(self.generation)!r}")
        return self

    def to_json(self) -> bytes:
        return canonical_bytes(self.model_dump(mode="json"))


class HistoryIndex(BaseModel):
    """``history.json``: the lineage's schema and every generation, oldest first (written last on each append).

    Schema consistency (``schema_hash`` is the schema's hash, every generation names it) is checked by the
    reader, so that a contradiction is reported as a schema mismatch rather than a parse failure.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    format: str = HISTORY_FORMAT
    record_schema: RecordSchema
    schema_hash: str = Field(pattern=_SHA256)
    generations: tuple[GenerationInfo, ...] = ()

    @model_validator(mode="after")
    def _consistent(self) -> HistoryIndex:
        if self.format != HISTORY_FORMAT:
            raise ValueError(f"format is {self.format!r}; expected {HISTORY_FORMAT!r}")
        for position, info in enumerate(self.generations):
            if info.generation != position:
                raise ValueError(f"entry {position} is generation {info.generation}; generations must be 0, 1, 2, …")
            if info.size != info.rows * self.record_schema.record_size:
                raise ValueError(f"generation {position}: size {info.size} is not rows × record_size")
        return self

    @property
    def rows(self) -> tuple[int, ...]:
        """Row count of each generation, oldest first."""
        return tuple(info.rows for info in self.generations)

    def to_json(self) -> bytes:
        return canonical_bytes(self.model_dump(mode="json"))


def parse_model(model: type[_M], data: bytes, where: str) -> _M:
    """``data`` as ``model``; anything else (not JSON, wrong fields, inconsistent values) a RecordsFormatError."""
    try:
        return model.model_validate_json(data)
    except ValidationError as exc:
        raise RecordsFormatError(f"{where}: not a valid {model.__name__} ({first_problem(exc)})") from exc
