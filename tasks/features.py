"""Step 3 as tasks: feature engineering (cached, in the feature-engineering image), then publishing."""

from __future__ import annotations

from flytekit import task
from flytekit.types.directory import FlyteDirectory

from ml8s import log
from ml8s.context import publish
from ml8s.context.run import RunContext, RunSpec
from tasks._util import COMPUTE_CACHE, output_dir


@task(container_image="{{.image.fe}}", cache=COMPUTE_CACHE)
def compute_features(spec: RunSpec) -> FlyteDirectory:
    """Engineer the features of the run described by ``spec``; writes nothing to the store.

    Returns:
        A directory with feature_matrix.parquet and feature_schema.json.
    """
    log.configure()
    # Imported here, not at module level: the early-exit path must not load pyarrow-heavy step code.
    from ml8s.pipeline import features

    out = output_dir("features")
    features.compute_features(spec, out)
    return FlyteDirectory(path=out)


# Never cached: it writes into ARTIFACT_ROOT, which a cache hit would skip.
@task(cache=False)
def publish_features(run: RunContext, features: FlyteDirectory) -> None:
    """Write features/feature_matrix.parquet and features/feature_schema.json, each atomically."""
    log.configure()
    publish.publish(run, run.open_store(), publish.local_files(features.download(), publish.FEATURES))
