"""Flyte tasks: thin wrappers around the pipeline steps of ``ml8s.pipeline`` (SPEC §4).

Tasks exchange JSON strings (run context, run spec, gate decision, train summary, MLflow ref) and
directories of files; they call into ``ml8s`` once each and Flyte execution ids never reach it.

Caching (SPEC §4: only where the inputs fully determine the output). The heavy steps are split in
two. The compute tasks (``compute_features``, ``train_cpu``/``train_gpu``, ``export_model``) are pure:
they take the RunSpec (the run context without the platform settings: no pipeline root, FORCE_RERUN
or MLflow) and the directories of the compute tasks before them, return a directory, write nothing
to the store, and are cached with ``Cache(version=IMAGE_VERSION)``. Everything that reads or writes
outside state is uncached: bootstrap (fingerprints DATA_ROOT), the gate (reads the marker, deletes
under FORCE_RERUN), snapshot and the publish tasks (write into ARTIFACT_ROOT: a cache hit would skip
a write that may be missing, e.g. after FORCE_RERUN or under another pipeline root), registration
(MLflow), finalization, and the ``train_model`` dynamic that picks the CPU or GPU training task.
Idempotence itself comes from the run contract's gate (``success.marker``), not from the cache.

The feature, training, export, registration and finalization tasks import their ``ml8s`` step
inside the task body: the early-exit path (bootstrap, gate, reuse) must load neither torch nor
mlflow.
"""
