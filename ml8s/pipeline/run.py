"""The whole run contract in one process, without Flyte: what ``ml8s run`` and the tests call.

``workflows/training.py`` composes exactly these steps as Flyte tasks.
"""

from __future__ import annotations

from collections.abc import Mapping

from ml8s.pipeline.bootstrap import bootstrap
from ml8s.pipeline.gate import gate


def run_pipeline(env: Mapping[str, str], overrides: Mapping[str, str] | None = None) -> str:
    """Steps 0-7; returns the manifest JSON. A completed run returns early, importing no torch or MLflow."""
    ctx = bootstrap(env, overrides)
    decision = gate(ctx)
    if decision.completed:
        return decision.manifest
    from ml8s.pipeline.export import export  # heavy imports only on the path that trains
    from ml8s.pipeline.features import build_features
    from ml8s.pipeline.finalize import finalize
    from ml8s.pipeline.snapshot import snapshot
    from ml8s.pipeline.train import train
    from ml8s.registry import register

    snapshot(ctx)
    build_features(ctx)
    summary = train(ctx)
    export(ctx, summary)
    return finalize(ctx, register(ctx), decision)
