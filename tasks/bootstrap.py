"""Step 0 as a task: resolve the configuration, fingerprint the data, compute RUN_ID."""

from __future__ import annotations

import os
from typing import NamedTuple

from flytekit import task

from ml8s import log
from ml8s.pipeline.bootstrap import bootstrap


class BootstrapOutput(NamedTuple):
    context: str
    spec: str
    use_gpu: bool


# Never cached: bootstrap fingerprints DATA_ROOT, outside state that the inputs do not capture.
@task(cache=False)
def bootstrap_run(
    data_root: str,
    target_column: str,
    model_format: str,
    model_type: str,
    test_size: str,
    random_seed: str,
    sample_rows: str,
    max_features: str,
    exclude_columns: str,
    standardize: str,
    hidden_units: str,
    hidden_layers: str,
    epochs: str,
    batch_size: str,
    learning_rate: str,
    train_device: str,
    pipeline_root_uri: str,
    force_rerun: str,
) -> BootstrapOutput:
    """Build the run context; an empty input means "take it from the environment".

    Returns:
        The run context as JSON (the input of the tasks that read or write the store), the RunSpec as
        JSON (the input, and cache key, of the compute tasks) and whether training needs a GPU.
    """
    log.configure()
    overrides = {
        "data_root": data_root,
        "target_column": target_column,
        "model_format": model_format,
        "model_type": model_type,
        "test_size": test_size,
        "random_seed": random_seed,
        "sample_rows": sample_rows,
        "max_features": max_features,
        "exclude_columns": exclude_columns,
        "standardize": standardize,
        "hidden_units": hidden_units,
        "hidden_layers": hidden_layers,
        "epochs": epochs,
        "batch_size": batch_size,
        "learning_rate": learning_rate,
        "train_device": train_device,
        "pipeline_root_uri": pipeline_root_uri,
        "force_rerun": force_rerun,
    }
    ctx = bootstrap(os.environ, overrides)
    return BootstrapOutput(
        context=ctx.to_json(), spec=ctx.spec.model_dump_json(), use_gpu=ctx.params.train_device == "cuda"
    )
