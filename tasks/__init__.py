"""Flyte tasks: thin wrappers around the pipeline steps of ``ml8s.pipeline`` (SPEC §4).

Tasks exchange typed values and directories of files; they call into ``ml8s`` once each, open the
pipeline root's store once each and pass it down, and Flyte execution ids never reach ``ml8s``.

Typed interfaces. The run (``RunContext``), its spec (``RunSpec``), the gate's decision, the train
summary and the MLflow reference are pydantic models: flytekit 1.16 sends a model as MessagePack of its
JSON dump, keys in field order, so one value gives the same literal bytes in every process, hence one
cache key (proved across processes, with different hash seeds, in tests/test_flyte_interfaces.py), and
the Flyte console shows its fields. Two values stay strings: the manifest, because it is the exact text
of ``manifest.json`` that an early exit returns byte for byte (a model would re-serialize it), and
the verify and cleanup reports, which are rendered for people (JSON text and a Deck). The workflow
inputs are typed too (``tasks.inputs`` says how an unset input is spelled).

Caching (SPEC §4: only where the inputs fully determine the output). The heavy steps are split in
two. The compute tasks (``compute_features``, ``train_cpu``/``train_gpu``, the ``train_*_ranks_N`` PyTorch
tasks, ``export_model``) are pure: they take the RunSpec (the run without the platform settings: no pipeline
root or MLflow) and the directories of the compute tasks before them, return a directory, write nothing to
the store, and are cached with ``Cache(version=IMAGE_VERSION)``. A forced run's RunSpec carries a fresh recompute token,
so its key matches no cached result: FORCE_RERUN recomputes on every path, with no cache setting.
Everything that reads or writes outside state is uncached: bootstrap (fingerprints DATA_ROOT), the
gate (reads the marker, deletes under FORCE_RERUN), snapshot and the publish tasks (write into
ARTIFACT_ROOT: a cache hit would skip a write that may be missing, e.g. after FORCE_RERUN or under
another pipeline root), registration (MLflow), finalization, and the ``train_model`` dynamic that
picks the CPU or GPU training task.
Idempotence itself comes from the run contract's gate (``success.marker``), not from the cache.

The feature, training, export, registration and finalization tasks import their ``ml8s`` step
inside the task body: the early-exit path (bootstrap, gate, reuse) must load neither torch nor
mlflow.
"""

import logging

from flytekit.core.type_engine import TypeEngine, TypeTransformer
from flytekit.extras.pydantic_transformer.transformer import PydanticTransformer
from flytekit.models.types import LiteralType
from pydantic import BaseModel


class _TupleFieldNotice(logging.Filter):
    """Drops flytekit's warning that a tuple field of a pydantic model has no literal type.

    flytekit describes every field of a model for attribute access in the Flyte propeller and warns, at
    each import, for each tuple field (``RunParams.exclude_columns``, the fingerprint's entries, ...). The
    model itself is sent whole, as MessagePack, which the warning does not concern; nothing here reads a
    field of a promise, so the notice is noise (28 lines on every ``pyflyte run``).
    """

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not ("cannot be converted to a literal type" in message and "tuple" in message)


logging.getLogger("flytekit").addFilter(_TupleFieldNotice())


class _SchemaOnce(PydanticTransformer):
    """flytekit's pydantic transformer, describing each model class once per process.

    Its ``get_literal_type`` builds the model's whole JSON schema, then describes every field through the
    type engine, so a nested model's schema is built again inside each model that holds it; and it runs
    for every task input and output that uses the model. The run, its spec and the gate's decision appear
    in most task interfaces of the training workflow: importing it built the same schemas some forty times
    (a third of a gate-hit ``pyflyte run``). A class's description depends on the class alone, so the
    first one is kept.
    """

    def __init__(self) -> None:
        super().__init__()
        self._described: dict[type[BaseModel], LiteralType] = {}

    def get_literal_type(self, t: type[BaseModel]) -> LiteralType:
        if t not in self._described:
            self._described[t] = super().get_literal_type(t)
        return self._described[t]


_registered: TypeTransformer[BaseModel] = TypeEngine.get_transformer(BaseModel)
if type(_registered) is PydanticTransformer:  # flytekit's own, registered by the import above
    TypeEngine.register_additional_type(_SchemaOnce(), BaseModel, override=True)
