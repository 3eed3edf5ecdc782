"""The training pipeline of SPEC §4: bootstrap → gate → (reuse | snapshot … finalize).

Every input mirrors a user-level variable (lower-case name) or a platform setting; "" means "take
it from the environment", so a run configured by inputs and one configured by the environment
have the same RUN_ID.
"""

from __future__ import annotations

from flytekit import conditional, workflow

from tasks.bootstrap import bootstrap_run
from tasks.export import export_model
from tasks.features import build_features
from tasks.finalize import finalize_run
from tasks.gate import check_gate, reuse_manifest
from tasks.register import register_model
from tasks.snapshot import snapshot_data
from tasks.train import train_model


@workflow
def train_and_register_wf(context: str, decision: str) -> str:
    """Steps 2-7 for a run that has not completed: snapshot, features, train, export, register, finalize."""
    snapshotted = snapshot_data(context=context)
    featured = build_features(context=context)
    summary = train_model(context=context)
    exported = export_model(context=context, summary=summary)
    mlflow = register_model(context=context)
    snapshotted >> featured >> summary
    exported >> mlflow
    return finalize_run(context=context, mlflow=mlflow, decision=decision)


@workflow
def training_pipeline(
    data_root: str = "",
    target_column: str = "",
    model_format: str = "",
    model_type: str = "",
    test_size: str = "",
    random_seed: str = "",
    sample_rows: str = "",
    max_features: str = "",
    exclude_columns: str = "",
    standardize: str = "",
    hidden_units: str = "",
    hidden_layers: str = "",
    epochs: str = "",
    batch_size: str = "",
    learning_rate: str = "",
    train_device: str = "",
    pipeline_root_uri: str = "",
    force_rerun: str = "",
) -> str:
    """Train one model idempotently and return its manifest (the first run's, if it already ran)."""
    context = bootstrap_run(
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
        pipeline_root_uri=pipeline_root_uri,
        force_rerun=force_rerun,
    )
    gate = check_gate(context=context)
    return (
        conditional("idempotence_gate")
        .if_(gate.completed.is_true())
        .then(reuse_manifest(decision=gate.decision))
        .else_()
        .then(train_and_register_wf(context=context, decision=gate.decision))
    )
