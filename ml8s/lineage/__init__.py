"""Continuous training: WARM_START resolved into a parent and data generations, and the lineage's
disk-native record history (docs/continuous.md). Torch-free: training itself is ``ml8s.training``'s."""

from __future__ import annotations

from ml8s.lineage.history import EncodedGeneration, check_history_schema, encode_generation, record_schema, sync_history
from ml8s.lineage.plan import (
    CONTINUED,
    LineagePlan,
    ParentRef,
    check_not_stale,
    history_prefix,
    parent_version,
    plan_summary,
    resolve_warm_start,
)
from ml8s.lineage.rerun import parent_split
from ml8s.lineage.state import read_training_state

__all__ = [
    "CONTINUED",
    "EncodedGeneration",
    "LineagePlan",
    "ParentRef",
    "check_history_schema",
    "check_not_stale",
    "encode_generation",
    "history_prefix",
    "parent_split",
    "parent_version",
    "plan_summary",
    "read_training_state",
    "record_schema",
    "resolve_warm_start",
    "sync_history",
]
