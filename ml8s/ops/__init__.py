"""Operator tools: stale tmp cleanup, collision resolution after audit, the list of runs."""

from __future__ import annotations

from ml8s.ops.collision import resolve_collision
from ml8s.ops.runs import list_runs
from ml8s.ops.tmp_cleanup import cleanup_tmp

__all__ = ["cleanup_tmp", "list_runs", "resolve_collision"]
