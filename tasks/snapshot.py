"""Step 2 as a task: snapshot the configuration and the data fingerprint into ARTIFACT_ROOT."""

from __future__ import annotations

from flytekit import task

from ml8s import log
from ml8s.context.run import RunContext


# Never cached: it writes into ARTIFACT_ROOT, which a cache hit would skip.
@task(cache=False)
def snapshot_data(run: RunContext) -> None:
    """Write config_snapshot.json and data_fingerprint.json."""
    log.configure()
    # Imported here, like every step after the gate: the early-exit path stays light.
    from ml8s.pipeline import snapshot

    snapshot.snapshot(run, run.open_store())
