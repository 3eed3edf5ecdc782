"""The training pipeline of SPEC §4: bootstrap → gate → (reuse | snapshot … finalize) → chain commit.

The chain commit task, last on both branches, carries the workflow's Flyte Deck ("run"): the run's
identity, whether the gate hit, its held-out metrics and per-epoch curves, its feature schema in brief and its
chain position; its result (``tasks.result.TrainingResult``) is the workflow's output.

Every input mirrors a user-level variable (lower-case name) or a platform setting, typed (see
``tasks.inputs``); an input left at its default (None, or ``env`` for a choice) takes the environment, so a
run configured by inputs (flags or ``--inputs-file``) and one configured by the environment have the same
RUN_ID (tests/test_flyte_inputs.py).

Tasks exchange typed values: the run (``RunContext``), its spec (``RunSpec``), the gate's decision, the
train summary and the MLflow reference are pydantic models, which flytekit sends as MessagePack of their
JSON in field order (the same bytes in every process, so a stable cache key: tests/test_flyte_interfaces.py),
and the Flyte console shows their fields. Between tasks the manifest stays a string: it is the exact text of
``manifest.json``, which an early exit returns byte for byte; the workflow returns a typed result.

The compute tasks (features, train, export) are cached on the RunSpec; the publish tasks copy their
output into ARTIFACT_ROOT on every run. A run of the same configuration under another pipeline root
therefore reuses the computation and still writes every artifact. A forced run (``force_rerun`` or
FORCE_RERUN=true, or the force-rerun launch plan) has a fresh recompute token in its RunSpec: no cached
result matches it, so Steps 2-7 run again and the manifest's ``force_rerun`` audit compares real bytes.
"""

from __future__ import annotations

from flytekit import conditional, workflow

import tasks.pyflyte_cli  # noqa: F401  (pyflyte run: --inputs-file, typed inputs, one-line errors)
from ml8s.context.run import RunContext, RunSpec
from ml8s.pipeline.gate import GateDecision
from tasks.bootstrap import bootstrap_run
from tasks.chain import commit_to_chain
from tasks.export import export_model, publish_model
from tasks.features import compute_features, publish_features
from tasks.finalize import finalize_run
from tasks.gate import check_gate, reuse_manifest
from tasks.inputs import ModelFormat, TrainDevice
from tasks.register import register_model
from tasks.result import TrainingResult
from tasks.snapshot import snapshot_data
from tasks.train import train_model


@workflow
def train_and_register_wf(run: RunContext, spec: RunSpec, decision: GateDecision) -> str:
    """Steps 2-7 for a run that has not completed: snapshot, features, train, export, register, finalize."""
    snapshotted = snapshot_data(run=run)
    features = compute_features(spec=spec)
    features_published = publish_features(run=run, features=features)
    trained = train_model(spec=spec, features=features)
    exported = export_model(spec=spec, summary=trained.summary, features=features, model=trained.model)
    model_published = publish_model(run=run, model=trained.model, exported=exported)
    mlflow = register_model(run=run)
    snapshotted >> features
    features_published >> model_published >> mlflow
    return finalize_run(run=run, mlflow=mlflow, decision=decision)


@workflow
def training_pipeline(
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
) -> TrainingResult:
    """Train one model idempotently and return its result: run id, model version, metrics, the model file.

    A run that already completed returns the same result, from the first run's records.

    An input left unset (None; env for a choice) takes the environment variable named in its description, then
    its default.

    Args:
        data_root: the dataset: a local path, file:// or s3:// URI (unset: DATA_ROOT; required)
        target_column: the label column (unset: TARGET_COLUMN; required)
        model_format: the export format (unset: MODEL_FORMAT, else onnx)
        model_type: the model family: mlp, logreg or plugin:<module>:<attribute> (unset: MODEL_TYPE, else mlp)
        test_size: the held-out fraction, 0 < x < 1 (unset: TEST_SIZE, else 0.2)
        random_seed: an integer >= 0 (unset: RANDOM_SEED, else 42)
        sample_rows: rows kept, deterministically (unset: SAMPLE_ROWS, else all rows)
        max_features: the feature cap: top-N by variance, ties by name (unset: MAX_FEATURES, else all features)
        exclude_columns: a comma list of columns dropped before feature engineering (unset: EXCLUDE_COLUMNS, else none)
        standardize: scale numeric features to zero mean, unit variance (unset: STANDARDIZE, else true)
        hidden_units: the width of each hidden layer (unset: HIDDEN_UNITS, else 64)
        hidden_layers: the number of hidden layers (unset: HIDDEN_LAYERS, else 2)
        epochs: training epochs (unset: EPOCHS, else 10)
        batch_size: the minibatch size (unset: BATCH_SIZE, else 256)
        learning_rate: the Adam learning rate (unset: LEARNING_RATE, else 0.001)
        train_device: cpu or cuda; it changes the bits, so it is identity (unset: TRAIN_DEVICE, else cpu)
        warm_start: the version to continue: head, N or a block hash (unset: WARM_START, else a cold start)
        sampler_alpha: a warm start's recency exponent over data generations (unset: SAMPLER_ALPHA, else 1)
        train_world_size: ranks training together, 1..64; it changes the bits (unset: TRAIN_WORLD_SIZE, else 1)
        pipeline_root_uri: where runs are written (unset: PIPELINE_ROOT_URI, else ./pipeline_root)
        force_rerun: true: recompute Steps 2-7 with no cached result, audit the bytes (unset: FORCE_RERUN, else false)
    """
    run = bootstrap_run(
        data_root=data_root,
        target_column=target_column,
        model_format=model_format,
        model_type=model_type,
        test_size=test_size,
        random_seed=random_seed,
        sample_rows=sample_rows,
        max_features=max_features,
        exclude_columns=exclude_columns,
        standardize=standardize,
        hidden_units=hidden_units,
        hidden_layers=hidden_layers,
        epochs=epochs,
        batch_size=batch_size,
        learning_rate=learning_rate,
        train_device=train_device,
        warm_start=warm_start,
        sampler_alpha=sampler_alpha,
        train_world_size=train_world_size,
        pipeline_root_uri=pipeline_root_uri,
        force_rerun=force_rerun,
    )
    gate = check_gate(run=run.run)
    manifest = (
        conditional("idempotence_gate")
        .if_(gate.completed.is_true())
        .then(reuse_manifest(decision=gate.decision))
        .else_()
        .then(train_and_register_wf(run=run.run, spec=run.spec, decision=gate.decision))
    )
    return commit_to_chain(run=run.run, decision=gate.decision, manifest=manifest)
