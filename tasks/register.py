"""Step 6 as a task: register the run and its model in MLflow."""

from __future__ import annotations

from flytekit import task

from ml8s import log
from ml8s.context.run import RunContext
from ml8s.registry.registration import MlflowRef


# In the training image: the only one with MLflow. Never cached: it writes to MLflow, whose state is
# outside the inputs (and reads metrics.json from the store).
@task(container_image="{{.image.train}}", cache=False)
def register_model(run: RunContext) -> MlflowRef:
    """Log the run to MLflow and register the model, idempotently.

    Returns:
        The MLflow reference (experiment, run, model version).
    """
    log.configure()
    # Imported here, not at module level: importing mlflow would slow the early-exit path.
    from ml8s.pipeline import register

    return register.register(run, run.open_store())
