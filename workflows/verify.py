"""The verification (audit) workflow of SPEC §6: one run's report, with a Flyte Deck of it.

``pipeline_root_uri`` "" = PIPELINE_ROOT_URI of the task's environment (MLFLOW_TRACKING_URI too).
The workflow succeeds whatever the verdict: read ``status`` (PASS/FAIL) in its output or its Deck.
"""

from __future__ import annotations

from flytekit import workflow

from tasks.verify import verify_run_task


@workflow
def verify_run(run_id: str, pipeline_root_uri: str = "", recheck_data: bool = False) -> str:
    """Verify run ``run_id``; returns the report as JSON."""
    return verify_run_task(run_id=run_id, pipeline_root_uri=pipeline_root_uri, recheck_data=recheck_data)
