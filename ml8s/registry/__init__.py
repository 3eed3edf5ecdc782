"""The MLflow registry: exactly one logged run and model version per FULL_CONFIG_HASH (SPEC §3, Step 6).

- ``registration``: ``register`` (the claim protocol, the sqlite lock, reuse of what exists) and
  :class:`MlflowRef`.
- ``mlflow_run`` / ``mlflow_model``: what a run logs (params, metrics, tags, artifacts) and the pyfunc model.
- ``claim``: the crash-surviving registration claim in the pipeline root.
- ``query``: lookups by full config hash, the tracking URI users see.
- ``schema``: the sqlite registry's schema, created whole or named when broken.

mlflow itself is imported inside the functions that talk to it, so importing this package is cheap.
"""

from ml8s.registry.registration import MlflowRef, register

__all__ = ["MlflowRef", "register"]
