"""Multi-rank checkpoints (SPEC §9): each rank writes its own shard file, rank 0 the metadata last.

``{prefix}_shard_{rank}.shard`` holds a rank's tensor pieces behind a self-describing, checksummed header
(:mod:`ml8s.shards.format` documents it byte by byte); ``{prefix}.metadata.json`` lists the shards and maps
every tensor's rows to them. A deterministic plan (:mod:`ml8s.shards.plan`) says which rank holds what, so a
checkpoint written by N ranks loads whole, rank by rank, or resharded for any other world size.
"""

from ml8s.shards.format import FORMAT_VERSION, MAGIC, ShardHeader, TensorEntry
from ml8s.shards.layout import checkpoint_id_for, metadata_key, shard_key, split_prefix
from ml8s.shards.loader import load_resharded, load_shard, load_state_dict, read_metadata
from ml8s.shards.metadata import CheckpointMetadata, PieceLocation, ShardFileInfo, ShardReceipt, TensorRecord
from ml8s.shards.plan import (
    PlanConfig,
    PlannedSlice,
    ShardPlan,
    TensorPiece,
    TensorSpec,
    pieces_for_rank,
    plan_shards,
    split_state_dict,
)
from ml8s.shards.verify import ShardFinding, ShardVerifyReport, collect_receipts, verify_checkpoint
from ml8s.shards.writer import WriterConfig, save_state_dict, write_metadata, write_shard

__all__ = [
    "FORMAT_VERSION",
    "MAGIC",
    "CheckpointMetadata",
    "PieceLocation",
    "PlanConfig",
    "PlannedSlice",
    "ShardFileInfo",
    "ShardFinding",
    "ShardHeader",
    "ShardPlan",
    "ShardReceipt",
    "ShardVerifyReport",
    "TensorEntry",
    "TensorPiece",
    "TensorRecord",
    "TensorSpec",
    "WriterConfig",
    "checkpoint_id_for",
    "collect_receipts",
    "load_resharded",
    "load_shard",
    "load_state_dict",
    "metadata_key",
    "pieces_for_rank",
    "plan_shards",
    "read_metadata",
    "save_state_dict",
    "shard_key",
    "split_prefix",
    "split_state_dict",
    "verify_checkpoint",
    "write_metadata",
    "write_shard",
]
