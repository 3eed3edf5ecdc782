"""Flyte tasks: one thin wrapper per pipeline step of ``ml8s.pipeline`` (SPEC §4).

Tasks exchange JSON strings (run context, gate decision, train summary, MLflow ref) and call into
``ml8s`` exactly once; Flyte execution ids never reach ``ml8s``.

No Flyte caching here, on purpose: every task writes to the artifact store, an external side effect
that its inputs do not determine, so a cache hit would skip a write that may be missing. Idempotence
comes from the run contract's own gate (``success.marker``) instead.

The feature, training, export, registration and finalization tasks import their ``ml8s`` step
inside the task body: the early-exit path (bootstrap, gate, reuse) must load neither torch nor
mlflow.
"""
