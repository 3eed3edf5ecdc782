"""Operator maintenance as tasks: removal of stale ``.tmp/`` entries (SPEC §3)."""

from __future__ import annotations

import os

from flytekit import task

from ml8s import log


# Never cached: it deletes from the store, and its answer depends on the time.
@task(cache=False)
def cleanup_tmp_task(pipeline_root_uri: str, older_than_days: int, dry_run: bool) -> str:
    """Remove ``.tmp/`` entries older than ``older_than_days`` (< 0: TMP_RETENTION_DAYS) under every run.

    Returns:
        The cleanup report as JSON (what was removed, how many younger entries were kept).
    """
    log.configure()
    from ml8s.identity.settings import DEFAULT_PIPELINE_ROOT
    from ml8s.identity.variables import normalize_uri
    from ml8s.ops.tmp_cleanup import cleanup_tmp, retention_days
    from ml8s.store import open_store

    root = normalize_uri(pipeline_root_uri or os.environ.get("PIPELINE_ROOT_URI", "") or DEFAULT_PIPELINE_ROOT)
    days = retention_days(os.environ) if older_than_days < 0 else float(older_than_days)
    return cleanup_tmp(open_store(root), days, dry_run=dry_run).model_dump_json(indent=2)
