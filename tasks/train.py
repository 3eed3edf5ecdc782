"""Step 4 as a task: deterministic training, in the training image."""

from __future__ import annotations

from flytekit import task

from ml8s import log
from ml8s.context import RunContext


@task(container_image="{{.image.train}}")
def train_model(context: str) -> str:
    """Train the model and write model/model_native.safetensors and metrics.json.

    Returns:
        The train summary as JSON, for the export step.
    """
    log.configure()
    # Imported here, not at module level: importing torch would slow the early-exit path.
    from ml8s.pipeline import train

    return train.train(RunContext.from_json(context)).model_dump_json()
