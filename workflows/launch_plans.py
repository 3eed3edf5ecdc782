"""Launch plans of the training pipeline. Locally the schedule is ignored.

Both take their configuration from the workflow's defaults (unset: the environment of the task pods),
so they are valid with no inputs; the force-rerun plan pins ``force_rerun`` and the continuous plan
``warm_start="head"``: every day it trains the next version of its lineage from the chain's head on all the
data generations under DATA_ROOT (the head is resolved at bootstrap, so the run's identity names the
parent it trained from; the first run on an empty chain is the lineage's cold start; docs/continuous.md).

The force-rerun plan needs no ``overwrite_cache``: a forced run's spec carries a fresh recompute token
(``RunSpec.recompute_token``), so the compute tasks' cache key matches nothing cached and Steps 2-7 run
again, on a cluster and locally alike. Locally, call a plan from Python (``training_force_rerun_lp()``)
or pass ``--force_rerun true`` to the workflow: flytekit 1.16's local ``pyflyte run launch_plans.py
training_force_rerun_lp`` fills every input from the workflow's defaults, over the plan's fixed input.
"""

from __future__ import annotations

from flytekit import CronSchedule, LaunchPlan

from workflows.training import training_pipeline

training_nightly_lp = LaunchPlan.get_or_create(
    workflow=training_pipeline,
    name="training_nightly_lp",
    schedule=CronSchedule(schedule="0 2 * * *"),
)

training_force_rerun_lp = LaunchPlan.get_or_create(
    workflow=training_pipeline,
    name="training_force_rerun_lp",
    fixed_inputs={"force_rerun": True},
)

training_continuous_lp = LaunchPlan.get_or_create(
    workflow=training_pipeline,
    name="training_continuous_lp",
    schedule=CronSchedule(schedule="0 3 * * *"),
    fixed_inputs={"warm_start": "head"},
)
