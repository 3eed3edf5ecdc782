"""Continuous training: WARM_START resolved into a parent and data generations, and the lineage's
disk-native record history (docs/continuous.md). Torch-free: training itself is ``ml8s.training``'s."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from ml8s.lineage.parent import ParentRef, parent_version
from ml8s.lineage.plan import (
    CONTINUED,
    LineagePlan,
    check_commit_root,
    check_drift_policy,
    check_not_stale,
    history_prefix,
    plan_summary,
    resolve_warm_start,
)
from ml8s.lineage.rerun import check_same_split, parent_split
from ml8s.lineage.state import read_training_state

if TYPE_CHECKING:
    from ml8s.lineage.history import (
        EncodedGeneration,
        check_history_schema,
        encode_generation,
        record_schema,
        sync_history,
    )

# The record history (pyarrow, the record store) is imported on first use: every run's context imports
# this package for LineagePlan, and a cold start or a gate hit never touches the history.
_HISTORY = frozenset(
    {"EncodedGeneration", "check_history_schema", "encode_generation", "record_schema", "sync_history"}
)


def __getattr__(name: str) -> object:
    if name in _HISTORY:
        return getattr(importlib.import_module("ml8s.lineage.history"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "CONTINUED",
    "EncodedGeneration",
    "LineagePlan",
    "ParentRef",
    "check_commit_root",
    "check_drift_policy",
    "check_history_schema",
    "check_not_stale",
    "check_same_split",
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
