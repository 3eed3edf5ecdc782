"""Step 3 as a task: feature engineering, in the feature-engineering image."""

from __future__ import annotations

from flytekit import task

from ml8s import log
from ml8s.context import RunContext


@task(container_image="{{.image.fe}}")
def build_features(context: str) -> None:
    """Write features/feature_matrix.parquet and features/feature_schema.json."""
    log.configure()
    # Imported here, not at module level: the early-exit path must not load pyarrow-heavy step code.
    from ml8s.pipeline import features

    features.build_features(RunContext.from_json(context))
