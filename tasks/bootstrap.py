"""Step 0 as a task: resolve the configuration, fingerprint the data, compute RUN_ID.

Its inputs are the training workflow's, typed (see ``tasks.inputs``); it turns each into the text a user
would have put in the environment and lets ``ml8s`` resolve and validate them in one place.
"""

from __future__ import annotations

import os
from typing import NamedTuple

import click
from flytekit import task

from ml8s import log
from ml8s.context.run import RunContext, RunSpec
from ml8s.errors import ConfigError, DataError, LineageError
from ml8s.pipeline.bootstrap import bootstrap
from tasks.inputs import InputValue, ModelFormat, TrainDevice, check_flyte_world_size, input_text


class BootstrapOutput(NamedTuple):
    run: RunContext
    spec: RunSpec


class InvalidInputError(click.ClickException):
    """A configuration or data error found at bootstrap, before anything is written.

    A click exception because that is what ``pyflyte run`` prints as one line (any other exception is
    printed with a traceback); on a cluster it is an ordinary task failure whose message is the ml8s error.
    """


# Never cached: bootstrap fingerprints DATA_ROOT, outside state that the inputs do not capture.
@task(cache=False)
def bootstrap_run(
    data_root: str | None = None,
    target_column: str | None = None,
    model_format: ModelFormat = ModelFormat.ENV,
    model_type: str | None = None,
    test_size: float | None = None,
    random_seed: int | None = None,
    sample_rows: int | None = None,
    max_features: int | None = None,
    exclude_columns: str | None = None,
    standardize: bool | None = None,
    hidden_units: int | None = None,
    hidden_layers: int | None = None,
    epochs: int | None = None,
    batch_size: int | None = None,
    learning_rate: float | None = None,
    train_device: TrainDevice = TrainDevice.ENV,
    warm_start: str | None = None,
    sampler_alpha: float | None = None,
    train_world_size: int | None = None,
    pipeline_root_uri: str | None = None,
    force_rerun: bool | None = None,
) -> BootstrapOutput:
    """Build the run; an unset input (None, or ``env`` for a choice) means "take it from the environment".

    Returns:
        The run (the input of the tasks that read or write the store) and its spec (the input, and cache
        key, of the compute tasks).
    """
    log.configure()
    given: dict[str, InputValue | None] = {
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
        "warm_start": warm_start,
        "sampler_alpha": sampler_alpha,
        "train_world_size": train_world_size,
        "pipeline_root_uri": pipeline_root_uri,
        "force_rerun": force_rerun,
    }
    try:
        run = bootstrap(os.environ, {name: input_text(value) for name, value in given.items()})
    except (ConfigError, DataError, LineageError) as exc:
        raise InvalidInputError(str(exc)) from exc
    try:  # the workflow has a training task for a few world sizes only (tasks.train): refuse others now
        check_flyte_world_size(run.params.train_world_size)
    except ValueError as exc:
        raise InvalidInputError(f"CONFIG_ERROR: {exc}") from exc
    return BootstrapOutput(run=run, spec=run.spec)
