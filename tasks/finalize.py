"""Step 7 as a task: write the manifest, then success.marker, last."""

from __future__ import annotations

from flytekit import task

from ml8s import log
from ml8s.pipeline.context import RunContext
from ml8s.pipeline.gate import GateDecision


# Never cached: it verifies the stored artifacts and writes the manifest and the marker.
@task(cache=False)
def finalize_run(context: str, mlflow: str, decision: str) -> str:
    """Verify every final artifact, write manifest.json and then success.marker.

    Returns:
        The manifest JSON, the workflow's output.
    """
    log.configure()
    # Imported here, not at module level: the step and the registry models pull in mlflow.
    from ml8s.pipeline import finalize, registry

    ctx = RunContext.from_json(context)
    return finalize.finalize(
        ctx,
        ctx.open_store(),
        registry.MlflowRef.model_validate_json(mlflow),
        GateDecision.model_validate_json(decision),
    )
