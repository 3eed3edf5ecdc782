"""Step 5 as tasks: export and validate the model (cached, in the training image), then publish."""

from __future__ import annotations

from flytekit import task
from flytekit.types.directory import FlyteDirectory

from ml8s import log
from ml8s.context import publish
from ml8s.context.run import RunContext, RunSpec
from ml8s.training.summary import TrainSummary
from tasks._util import COMPUTE_CACHE, output_dir


@task(container_image="{{.image.train}}", cache=COMPUTE_CACHE)
def export_model(
    spec: RunSpec, summary: TrainSummary, features: FlyteDirectory, model: FlyteDirectory
) -> FlyteDirectory:
    """Export model.<format>, validate it against torch and write training_metadata.json; nothing to the store.

    Returns:
        A directory with model.<format> and training_metadata.json.
    """
    log.configure()
    # Imported here, not at module level: importing torch would slow the early-exit path.
    from ml8s.pipeline import export

    out = output_dir("export")
    export.export(spec, summary, features.download(), model.download(), out)
    return FlyteDirectory(path=out)


# Never cached: it writes into ARTIFACT_ROOT, which a cache hit would skip.
@task(cache=False)
def publish_model(run: RunContext, model: FlyteDirectory, exported: FlyteDirectory) -> None:
    """Write metrics.json, the model files and, last in key order, training_metadata.json, each atomically."""
    log.configure()
    files = {
        **publish.local_files(
            model.download(),
            publish.trained(run.identity.canonicalization_version, run.params.train_world_size) + publish.TRAINING_LOGS,
        ),
        **publish.local_files(exported.download(), publish.exported(run.params.model_format)),
    }
    publish.publish(run, run.open_store(), files)
