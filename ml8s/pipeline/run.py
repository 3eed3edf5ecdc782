"""The whole run contract in one process, without Flyte: what ``ml8s run`` and the tests call.

``workflows/training.py`` composes exactly these steps as Flyte tasks: the compute steps (features,
train, export) write into local directories and each is published into ARTIFACT_ROOT right after it
ran, as the Flyte publish tasks do. Nothing here is cached: ``ml8s run --force-rerun`` always recomputes.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping

from ml8s.context.run import RunContext
from ml8s.errors import StaleParentError
from ml8s.pipeline.bootstrap import bootstrap
from ml8s.pipeline.chain_commit import chain_commit
from ml8s.pipeline.gate import gate
from ml8s.pipeline.preflight import check_tracking_reachable, check_writable_root
from ml8s.pipeline.promote import promote
from ml8s.store import Store
from ml8s.tempdirs import owned_tempdir

# A WARM_START=head run that lost its parent to a concurrent commit trains again from the new head, at most
# this many times (STALE_PARENT_POLICY=retrain); each attempt is a complete run of its own RUN_ID.
STALE_PARENT_ATTEMPTS = 3


def run_pipeline(env: Mapping[str, str], overrides: Mapping[str, str] | None = None) -> str:
    """Steps 0-8; returns the manifest JSON. A completed run returns early, importing no torch or MLflow.

    The pipeline root's store is opened once per attempt and passed to every step. A warm start from
    ``head`` whose parent stopped being the head before its commit is re-run from the new head under
    STALE_PARENT_POLICY=retrain (docs/continuous.md); any other stale parent is StaleParentError.
    """
    with _environment_kept():
        attempt = 1
        while True:
            ctx = bootstrap(env, overrides, writable=False, retrain=attempt > 1)
            try:
                return _run(ctx)
            except StaleParentError as exc:
                plan = ctx.spec.lineage
                retry = plan is not None and plan.request == "head" and ctx.settings.stale_parent_policy == "retrain"
                if not retry or attempt == STALE_PARENT_ATTEMPTS:
                    raise
                attempt += 1
                ctx.log("chain_commit", f"{exc.message}; training again from the new head (attempt {attempt})")


@contextlib.contextmanager
def _environment_kept() -> Iterator[None]:
    """``os.environ`` as it was, afterwards: ``ml8s run`` passes it as ``env``, and libraries set variables
    for their own use while training (torch's inductor cache, cuBLAS's workspace for determinism). MLflow's
    registration must not unset MLFLOW_TRACKING_URI even meanwhile (``registry_resolves_with``): a retry
    bootstraps from the same environment and must register where the first attempt did."""
    before = dict(os.environ)
    try:
        yield
    finally:
        for key in set(os.environ) - set(before):
            del os.environ[key]
        os.environ.update(before)


def _run(ctx: RunContext) -> str:
    store = ctx.open_store()
    if ctx.settings.force_rerun:
        check_writable_root(ctx.settings)  # the gate clears the run
    decision = gate(ctx, store)
    if decision.completed:
        promote(ctx, store, chain_commit(ctx, store))  # idempotent: heals a crash between the marker and the commit
        _converge_aliases(ctx, store)  # and one between the commit or decision and MLflow
        return decision.manifest
    check_writable_root(ctx.settings)  # before the first write; a completed run reads only (a read-only root)
    check_tracking_reachable(ctx.settings)  # an absent MLflow server fails now, not after training
    from ml8s.context import publish  # only on the path that trains; neither these nor the data steps need torch
    from ml8s.features.matrix_deferred import deferred_matrix
    from ml8s.pipeline.features import compute_features
    from ml8s.pipeline.snapshot import snapshot
    from ml8s.pipeline.training_ahead import TrainingAhead, loads_ahead

    spec = ctx.spec
    if spec.params.train_device == "cuda":  # this machine will train: no GPU must fail before any write
        from ml8s.modeling.determinism import seed_everything

        seed_everything(spec.params.random_seed, "cuda")
    # A large run loads torch while its data steps run (both cores are busy, but not all the time)
    ahead = TrainingAhead(loads_ahead(spec.fingerprint, spec.params.train_world_size))
    if ahead.enabled:
        ctx.log("run", "loading torch beside the data steps (large data: training starts once the features are made)")
    snapshot(ctx, store)
    with owned_tempdir(f"ml8s-{ctx.run_id}-") as tmp:
        features, model, exported = (os.path.join(tmp, name) for name in ("features", "model", "export"))
        # A large matrix's file is written from the rows handed over while training runs (matrix_deferred): the
        # features are published once training ends, when the file is whole.
        with deferred_matrix():
            compute_features(spec, features, hand_over=spec.params.train_world_size == 1)  # ranks are processes
            # Torch is loaded once the typed columns are gone (but for large data, above), and MLflow and onnx once
            # the model is trained: the data steps' memory and time do not include them.
            ahead.wait()
            ctx.log("run", "loading torch")
            from ml8s.pipeline.train import train_all_ranks

            summary = train_all_ranks(spec, features, model)  # TRAIN_WORLD_SIZE processes
        publish.publish(ctx, store, publish.local_files(features, publish.FEATURES))
        publish.publish(
            ctx,
            store,
            publish.local_files(
                model,
                publish.trained(spec.identity.canonicalization_version, spec.params.train_world_size)
                + publish.TRAINING_LOGS,
            ),
        )
        ctx.log("run", "loading onnx and MLflow")
        from ml8s.pipeline.export import export
        from ml8s.pipeline.finalize import finalize
        from ml8s.pipeline.register import register

        export(spec, summary, features, model, exported)
        publish.publish(ctx, store, publish.local_files(exported, publish.exported(spec.params.model_format)))
    manifest = finalize(ctx, store, register(ctx, store), decision)
    promote(ctx, store, chain_commit(ctx, store))
    _converge_aliases(ctx, store)
    return manifest


def _converge_aliases(ctx: RunContext, store: Store) -> None:
    from ml8s.registry.alias import converge_aliases  # imports MLflow only for a write or a non-sqlite registry

    converge_aliases(ctx, store)
