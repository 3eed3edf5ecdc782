"""Launch plans of the training pipeline. Locally the schedule is ignored.

Both take their configuration from the workflow's defaults ("" = the environment of the task pods),
so they are valid with no inputs; only the force-rerun plan pins an input.

Locally, call a plan from Python (``training_force_rerun_lp()``) or pass ``--force_rerun true`` to the
workflow: flytekit 1.16's local ``pyflyte run launch_plans.py training_force_rerun_lp`` fills every
input from the workflow's defaults, and the default "" overrides the fixed "true". A local call also
ignores the plan's ``overwrite_cache``: add ``--overwrite-cache`` to ``pyflyte run`` (or set
``FLYTE_LOCAL_CACHE_OVERWRITE=true``) so the compute tasks run again.
"""

from __future__ import annotations

from flytekit import CronSchedule, LaunchPlan

from workflows.training import training_pipeline

training_nightly_lp = LaunchPlan.get_or_create(
    workflow=training_pipeline,
    name="training_nightly_lp",
    schedule=CronSchedule(schedule="0 2 * * *"),
)

# overwrite_cache: the compute tasks run again and replace their cache entries, so a forced rerun
# really regenerates every artifact (and its "reproduced" audit means something). Local executions
# ignore a launch plan's overwrite_cache: use `pyflyte run --overwrite-cache` there.
training_force_rerun_lp = LaunchPlan.get_or_create(
    workflow=training_pipeline,
    name="training_force_rerun_lp",
    fixed_inputs={"force_rerun": True},
    overwrite_cache=True,
)
