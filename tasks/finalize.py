"""Step 7 as a task: write the manifest, then success.marker, last."""

from __future__ import annotations

from flytekit import task

from ml8s import log
from ml8s.context.run import RunContext
from ml8s.pipeline.gate import GateDecision
from ml8s.registry.registration import MlflowRef


# Never cached: it verifies the stored artifacts and writes the manifest and the marker.
@task(cache=False)
def finalize_run(run: RunContext, mlflow: MlflowRef, decision: GateDecision) -> str:
    """Verify every final artifact, write manifest.json and then success.marker.

    Returns:
        The manifest JSON, the workflow's output.
    """
    log.configure()
    # Imported here, not at module level: the step's helpers are not needed on the early-exit path.
    from ml8s.pipeline import finalize

    return finalize.finalize(run, run.open_store(), mlflow, decision)
