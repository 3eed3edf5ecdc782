"""Disk-native training history (SPEC §10): fixed-size float32 records, one file per data generation.

Generations are appended, never rewritten or dropped; training memory-maps them all and draws batches with
a recency-weighted, seeded, resumable sampler. See docs/records.md.
"""

from ml8s.records.mapped import MappedHistory, gather, map_generation
from ml8s.records.models import GenerationInfo, HistoryIndex, manifest_name, record_file_name
from ml8s.records.rows import Rows, SpooledRecords, spool_rows
from ml8s.records.sampler import (
    Batch,
    BitGeneratorState,
    RecencySampler,
    SamplerConfig,
    SamplerState,
    generation_probabilities,
    load_sampler_state,
)
from ml8s.records.schema import RECORD_DTYPE, RecordSchema
from ml8s.records.store import RecordStore

__all__ = [
    "RECORD_DTYPE",
    "Batch",
    "BitGeneratorState",
    "GenerationInfo",
    "HistoryIndex",
    "MappedHistory",
    "RecencySampler",
    "RecordSchema",
    "RecordStore",
    "Rows",
    "SamplerConfig",
    "SamplerState",
    "SpooledRecords",
    "gather",
    "generation_probabilities",
    "load_sampler_state",
    "manifest_name",
    "map_generation",
    "record_file_name",
    "spool_rows",
]
