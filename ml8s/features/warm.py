"""Step 3 for a warm start: the lineage's generations, encoded by its frozen feature transform.

A continued model must see inputs encoded exactly as its parent did, so the feature schema is the
parent's, byte for byte (its categories, imputation and scaling statistics; docs/continuous.md says what
happens to unseen categories and new columns). Every generation is appended to the lineage's record
history (training memory-maps it); the feature matrix holds the new generations' rows with their split,
for the held-out metrics and the export check. The history append is the step's one write outside its
output directory: idempotent (a generation's bytes are fixed) and checked against what the parent recorded.
"""

from __future__ import annotations

import os

import numpy as np
from pydantic import TypeAdapter

from ml8s.context.publish import local_path
from ml8s.context.run import RunSpec
from ml8s.contract import layout
from ml8s.contract.training_state import Generation
from ml8s.features.matrix import write_matrix_arrays
from ml8s.inference import RawTransform
from ml8s.lineage import (
    EncodedGeneration,
    LineagePlan,
    check_history_schema,
    encode_generation,
    history_prefix,
    parent_split,
    parent_version,
    record_schema,
    sync_history,
)
from ml8s.records import RecordStore
from ml8s.store import open_store

# Not an artifact (publish never copies it): the generations, as recorded in the history, for training.
GENERATIONS_FILE = "lineage_generations.json"


_GENERATIONS: TypeAdapter[list[Generation]] = TypeAdapter(list[Generation])


def compute_warm_features(spec: RunSpec, plan: LineagePlan, out_dir: str) -> None:
    """Write the parent's feature schema, the new generations' matrix and the generations list into ``out_dir``."""
    chain, parent = parent_version(plan.parent)
    schema_bytes = chain.fetch_payload(parent, layout.PAYLOAD_FEATURE_SCHEMA)
    transform = RawTransform.from_schema(schema_bytes, f"chain {chain.name!r} v{parent.counter} feature schema")
    params = spec.params
    history = RecordStore(
        open_store(plan.parent.root_uri), history_prefix(plan, schema_bytes, params.random_seed, params.test_size)
    )
    schema = record_schema(transform)
    check_history_schema(history, schema)
    shown = plan.new_generations or plan.generations[-1:]
    lineage = list(plan.generations)
    if parent_split(chain, parent) != (params.random_seed, params.test_size):
        # the sha256s the parent recorded are of its split's records: this split's are encoded and recorded anew
        lineage = [g.model_copy(update={"records_sha256": None, "records": None}) for g in lineage]
    index = history.index()
    held = {info.generation for info in index.generations} if index is not None else set()
    # encoded: what the history lacks (a lost history is rebuilt from the data and checked against the
    # sha256 each parent recorded), what no parent recorded yet, and the generations the matrix shows
    wanted = {g.index for g in lineage if g.records_sha256 is None or g.index not in held}
    wanted |= {g.index for g in shown}
    encoded: dict[int, EncodedGeneration] = {}
    for generation in lineage:
        if generation.index in wanted:
            encoded[generation.index] = encode_generation(
                generation, spec.fingerprint, transform, params.random_seed, params.test_size
            )
            spec.log(
                "features",
                f"generation {generation.index} ({generation.partition or 'cold start data'}): "
                f"{len(encoded[generation.index].y)} rows encoded",
            )
    generations = sync_history(history, schema, encoded, lineage)
    os.makedirs(out_dir, exist_ok=True)
    parts = [encoded[g.index] for g in shown]
    matrix = np.concatenate([p.x for p in parts]).astype(np.float64)
    target = np.concatenate([p.y for p in parts])
    split = np.concatenate([p.split for p in parts])
    write_matrix_arrays(
        local_path(out_dir, layout.FEATURE_MATRIX), matrix, list(transform.feature_names), target, split
    )
    with open(local_path(out_dir, layout.FEATURE_SCHEMA), "wb") as handle:
        handle.write(schema_bytes)
    with open(os.path.join(out_dir, GENERATIONS_FILE), "wb") as handle:
        handle.write(_GENERATIONS.dump_json(generations))
    spec.log(
        "features",
        f"warm start from {plan.parent.chain_name} v{plan.parent.counter}: {len(generations)} generations in the "
        f"history ({plan.new} new), matrix of {len(target)} rows from generation(s) {[g.index for g in shown]}",
    )


def read_generations(features_dir: str) -> list[Generation]:
    with open(os.path.join(features_dir, GENERATIONS_FILE), "rb") as handle:
        return _GENERATIONS.validate_json(handle.read())


def history_for(spec: RunSpec, plan: LineagePlan, features_dir: str) -> RecordStore:
    """The lineage history the features step wrote (the schema read back from its output)."""
    with open(local_path(features_dir, layout.FEATURE_SCHEMA), "rb") as handle:
        schema_bytes = handle.read()
    prefix = history_prefix(plan, schema_bytes, spec.params.random_seed, spec.params.test_size)
    return RecordStore(open_store(plan.parent.root_uri), prefix)
