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
    from ml8s.identity.settings import PlatformSettings
    from ml8s.ops.tmp_cleanup import cleanup_tmp
    from ml8s.store import open_store

    settings = PlatformSettings.load(os.environ, {"pipeline_root_uri": pipeline_root_uri})
    days = float(settings.tmp_retention_days if older_than_days < 0 else older_than_days)
    report = cleanup_tmp(open_store(settings.pipeline_root_uri), days, dry_run=dry_run)
    if report.failed:  # the task fails as the CLI exits 1, naming what stayed
        from ml8s.errors import StoreError

        raise StoreError(
            f"tmp-cleanup removed {len(report.removed)} entries but could not remove {len(report.failed)}: "
            f"{report.failed[0]}; expected every stale entry removable"
        )
    return report.model_dump_json(indent=2)
