"""Operator maintenance as tasks: removal of stale ``.tmp/`` entries (SPEC §3)."""

from __future__ import annotations

import os

from flytekit import task

from ml8s import log


# Never cached: it deletes from the store, and its answer depends on the time.
@task(cache=False)
def cleanup_tmp_task(
    pipeline_root_uri: str, older_than_days: int, dry_run: bool, allow_short_grace: bool = False
) -> str:
    """Remove ``.tmp/`` entries older than ``older_than_days`` (< 0: TMP_RETENTION_DAYS) under every run, and abort
    the S3 multipart uploads to them initiated that long ago.

    ``allow_short_grace``: the CLI's ``--allow-short-grace``. Unset, an entry under an hour old is kept whatever
    ``older_than_days`` says (it may be a write in flight: ``min_age_days`` in the report is the age applied);
    set, ``older_than_days`` 0 removes every entry, so only when no write can run.

    Returns:
        The cleanup report as JSON (what was removed and aborted, how many younger entries and uploads were kept).
    """
    log.configure()
    from ml8s.identity.settings import PlatformSettings
    from ml8s.ops.tmp_cleanup import cleanup_tmp
    from ml8s.store import open_store

    settings = PlatformSettings.load(os.environ, {"pipeline_root_uri": pipeline_root_uri})
    days = float(settings.tmp_retention_days if older_than_days < 0 else older_than_days)
    store = open_store(settings.pipeline_root_uri)
    report = cleanup_tmp(store, days, dry_run=dry_run, allow_short_grace=allow_short_grace)
    if report.min_age_days != days:  # said as the CLI says it, naming where the short age came from
        given = f"TMP_RETENTION_DAYS={days:g}" if older_than_days < 0 else f"older_than_days {days:g}"
        log.step_info(
            "tmp_cleanup",
            f"{given} raised to 1 hour: a younger .tmp/ entry may be a write in flight; "
            "allow_short_grace=True removes it too (no write may run)",
        )
    if not report.complete:  # the task fails as the CLI exits 1, naming what stayed
        from ml8s.errors import StoreError

        first = f"remove {report.failed[0]}" if report.failed else report.failed_uploads[0]
        raise StoreError(
            f"tmp-cleanup removed {len(report.removed)} entries and aborted {len(report.aborted_uploads)} multipart "
            f"uploads but could not do {len(report.failed) + len(report.failed_uploads)} more, first: could not "
            f"{first}; expected every stale entry removable and every stale upload abortable"
        )
    return report.model_dump_json(indent=2)
