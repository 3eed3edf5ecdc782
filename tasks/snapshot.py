"""Step 2 as a task: snapshot the configuration and the data fingerprint into ARTIFACT_ROOT."""

from __future__ import annotations

from flytekit import task

from ml8s import log
from ml8s.context.run import RunContext


# Never cached: it writes into ARTIFACT_ROOT, which a cache hit would skip.
@task(cache=False)
def snapshot_data(run: RunContext) -> None:
    """Write config_snapshot.json and data_fingerprint.json, once an http(s) MLflow server has answered."""
    log.configure()
    # Imported here, like every step after the gate: the early-exit path stays light.
    from ml8s.pipeline import snapshot
    from ml8s.pipeline.preflight import check_tracking_reachable

    # The first task of a run that trains, as in ml8s run: an absent or hung MLflow server is a named error now,
    # before any write, not at registration after the whole training.
    check_tracking_reachable(run.settings)
    snapshot.snapshot(run, run.open_store())
