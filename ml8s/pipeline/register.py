"""Step 6, registration: the step the run and the Flyte task call; MLflow itself lives in ``ml8s.registry``.

``ml8s.registry`` imports mlflow only inside its functions, so importing the step costs nothing on the early-exit path.
"""

from __future__ import annotations

from ml8s import log
from ml8s.context.run import RunContext
from ml8s.identity.uri import public_tracking_uri
from ml8s.registry import registration
from ml8s.registry.registration import MlflowRef
from ml8s.store import Store


@log.timed("register")
def register(ctx: RunContext, store: Store) -> MlflowRef:
    """Log the run to MLflow and register its model exactly once (``ml8s.registry.registration.register``)."""
    with log.heartbeat("register", f"MLflow at {public_tracking_uri(ctx.settings.mlflow_tracking_uri)}"):
        return registration.register(ctx, store)
