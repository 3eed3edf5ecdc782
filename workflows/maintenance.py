"""Maintenance of the pipeline root: the stale ``.tmp/`` cleanup, and its daily launch plan.

Locally the schedule is ignored; on a cluster, activate ``tmp_cleanup_lp`` once (deploy/register.sh
activates the launch plans it registers). ``older_than_days`` -1 = TMP_RETENTION_DAYS (default 7).
``allow_short_grace`` as ``ml8s tmp-cleanup --allow-short-grace``: unset, an entry under an hour old is kept
(it may be a write in flight); the daily launch plan never sets it.
"""

from __future__ import annotations

from flytekit import CronSchedule, LaunchPlan, workflow

from tasks.maintenance import cleanup_tmp_task


@workflow
def tmp_cleanup_wf(
    pipeline_root_uri: str = "", older_than_days: int = -1, dry_run: bool = False, allow_short_grace: bool = False
) -> str:
    """Remove the stale ``.tmp/`` entries under every run; returns the cleanup report as JSON."""
    return cleanup_tmp_task(
        pipeline_root_uri=pipeline_root_uri,
        older_than_days=older_than_days,
        dry_run=dry_run,
        allow_short_grace=allow_short_grace,
    )


tmp_cleanup_lp = LaunchPlan.get_or_create(
    workflow=tmp_cleanup_wf,
    name="tmp_cleanup_lp",
    schedule=CronSchedule(schedule="30 3 * * *"),
)
