"""Step 5 as a task: export and validate the model, in the training image."""

from __future__ import annotations

from flytekit import task

from ml8s import log
from ml8s.context import RunContext


@task(container_image="{{.image.train}}")
def export_model(context: str, summary: str) -> None:
    """Write model/model_native.safetensors and model/model.<format>, validated against torch."""
    log.configure()
    # Imported here, not at module level: importing torch would slow the early-exit path.
    from ml8s.pipeline import export, train

    export.export(RunContext.from_json(context), train.TrainSummary.model_validate_json(summary))
