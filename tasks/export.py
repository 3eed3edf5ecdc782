"""Step 5 as tasks: export and validate the model (cached, in the training image), then publish."""

from __future__ import annotations

from flytekit import task
from flytekit.types.directory import FlyteDirectory

from ml8s import log
from ml8s.pipeline import publish
from ml8s.pipeline.context import RunContext, RunSpec
from tasks._util import COMPUTE_CACHE, output_dir


@task(container_image="{{.image.train}}", cache=COMPUTE_CACHE)
def export_model(spec: str, summary: str, features: FlyteDirectory, model: FlyteDirectory) -> FlyteDirectory:
    """Export model.<format>, validate it against torch and write training_metadata.json; nothing to the store.

    Returns:
        A directory with model.<format> and training_metadata.json.
    """
    log.configure()
    # Imported here, not at module level: importing torch would slow the early-exit path.
    from ml8s.pipeline import export, train

    out = output_dir("export")
    export.export(
        RunSpec.model_validate_json(spec),
        train.TrainSummary.model_validate_json(summary),
        features.download(),
        model.download(),
        out,
    )
    return FlyteDirectory(path=out)


# Never cached: it writes into ARTIFACT_ROOT, which a cache hit would skip.
@task(cache=False)
def publish_model(context: str, model: FlyteDirectory, exported: FlyteDirectory) -> None:
    """Write metrics.json, the model files and, last in key order, training_metadata.json, each atomically."""
    log.configure()
    ctx = RunContext.from_json(context)
    files = {
        **publish.local_files(model.download(), publish.TRAINED + publish.TRAINING_LOGS),
        **publish.local_files(exported.download(), publish.exported(ctx.params.model_format)),
    }
    publish.publish(ctx, ctx.open_store(), files)
