"""The training pipeline of SPEC §4: bootstrap → gate → (reuse | snapshot … finalize) → chain commit.

Every input mirrors a user-level variable (lower-case name) or a platform setting; "" means "take
it from the environment", so a run configured by inputs and one configured by the environment
have the same RUN_ID.

The compute tasks (features, train, export) are cached on the RunSpec; the publish tasks copy their
output into ARTIFACT_ROOT on every run. A run of the same configuration under another pipeline root
therefore reuses the computation and still writes every artifact. ``force_rerun`` clears and rewrites
the run but, on its own, does not bypass the cache: the force-rerun launch plan sets
``overwrite_cache=True`` on the cluster; locally, use ``pyflyte run --overwrite-cache`` (or
``FLYTE_LOCAL_CACHE_OVERWRITE=true``), or ``ml8s run --force-rerun``, which never caches.
"""

from __future__ import annotations

from flytekit import conditional, workflow

from tasks.bootstrap import bootstrap_run
from tasks.chain import commit_to_chain
from tasks.export import export_model, publish_model
from tasks.features import compute_features, publish_features
from tasks.finalize import finalize_run
from tasks.gate import check_gate, reuse_manifest
from tasks.register import register_model
from tasks.snapshot import snapshot_data
from tasks.train import train_model


@workflow
def train_and_register_wf(context: str, spec: str, decision: str, use_gpu: bool) -> str:
    """Steps 2-7 for a run that has not completed: snapshot, features, train, export, register, finalize."""
    snapshotted = snapshot_data(context=context)
    features = compute_features(spec=spec)
    features_published = publish_features(context=context, features=features)
    trained = train_model(spec=spec, features=features, use_gpu=use_gpu)
    exported = export_model(spec=spec, summary=trained.summary, features=features, model=trained.model)
    model_published = publish_model(context=context, model=trained.model, exported=exported)
    mlflow = register_model(context=context)
    snapshotted >> features
    features_published >> model_published >> mlflow
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
        pipeline_root_uri=pipeline_root_uri,
        force_rerun=force_rerun,
    )
    gate = check_gate(context=run.context)
    manifest = (
        conditional("idempotence_gate")
        .if_(gate.completed.is_true())
        .then(reuse_manifest(decision=gate.decision))
        .else_()
        .then(train_and_register_wf(context=run.context, spec=run.spec, decision=gate.decision, use_gpu=run.use_gpu))
    )
    return commit_to_chain(context=run.context, manifest=manifest)
