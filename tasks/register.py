"""Step 6 as a task: register the run and its model in MLflow."""

from __future__ import annotations

from flytekit import task

from ml8s import log
from ml8s.context import RunContext


@task
def register_model(context: str) -> str:
    """Log the run to MLflow and register the model, idempotently.

    Returns:
        The MLflow reference (experiment, run, model version) as JSON.
    """
    log.configure()
    # Imported here, not at module level: importing mlflow would slow the early-exit path.
    from ml8s import registry

    return registry.register(RunContext.from_json(context)).model_dump_json()
