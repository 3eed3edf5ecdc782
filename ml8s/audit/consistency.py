"""training_metadata.json against the run's other files: it records no checksum of itself, so whatever
in it can be recomputed from the config and from checksummed files is recomputed here.

Checked: the model spec against the canonical config; the architecture string and the parameter count
(recomputed from the spec, and counted from the safetensors header of the native weights); feature
names, classes and row counts against feature_schema.json; row counts and the final loss against
metrics.json; one loss per epoch; the export's settings and its difference within tolerance; the
determinism flags; which library versions are recorded. Not checkable from the run alone: the version
strings themselves, the epoch losses before the last, the export's exact difference (docs/audits.md).
Every expected value comes from ``ml8s.modeling.families``, the definitions training and export use
(importable without torch), and each file is read through its model in ``ml8s.contract``.
"""

from __future__ import annotations

import math

from ml8s.contract import ConfigSnapshot, FeatureSchema, Invalid, Metrics, TrainingMetadata, layout, parse
from ml8s.identity.hashing import json_loads
from ml8s.identity.model_code import is_plugin
from ml8s.identity.params import MAX_HIDDEN_LAYERS
from ml8s.modeling import families


def safetensors_shapes(head: bytes) -> list[list[int]] | None:
    """Tensor shapes from the start of a safetensors file (8-byte little-endian length, JSON header)."""
    if len(head) < 8:
        return None
    size = int.from_bytes(head[:8], "little")
    try:
        header = json_loads(head[8 : 8 + size])
        if not isinstance(header, dict):
            return None
        return [[int(d) for d in v["shape"]] for k, v in header.items() if k != "__metadata__"]
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


# The safetensors library refuses a header longer than this; a length field beyond it (a damaged or planted file
# over 16 MiB, so streamed) made the verifier read 2**64 bytes: OverflowError or MemoryError, no report at all.
SAFETENSORS_HEADER_MAX = 100_000_000


def header_length(head: bytes) -> int:
    """Bytes to read for the whole safetensors header (from its first 8 bytes), at most the library's bound: a
    longer one is read only that far, and does not parse (:func:`safetensors_shapes` gives None)."""
    length = int.from_bytes(head[:8], "little") if len(head) >= 8 else 0
    return 8 + min(length, SAFETENSORS_HEADER_MAX)


def cross_problems(
    metadata: TrainingMetadata,
    snapshot: ConfigSnapshot,
    schema: bytes | None,
    metrics: bytes | None,
    weights_head: bytes | None,
) -> list[str]:
    """Problems found comparing training_metadata.json with the config and the checksummed files."""
    model, training, export, config = metadata.model, metadata.training, metadata.export, snapshot.canonical_config
    spec = model.spec
    problems = [
        f"model.spec.{name} is {getattr(spec, name)!r}; the config says {config.get(name)!r}"
        for name in ("model_type", "hidden_units", "hidden_layers")
        if getattr(spec, name) != config.get(name)
    ]
    if not 0 <= spec.hidden_layers <= MAX_HIDDEN_LAYERS:
        # The family's layers are built one per hidden layer: an edited 10**6 took 35 s, 10**9 never ended.
        problems.append(
            f"model.spec.hidden_layers is {spec.hidden_layers}; a run accepts 0 to {MAX_HIDDEN_LAYERS} "
            "(architecture and parameter count not recomputed)"
        )
    elif spec.model_type in families.FAMILIES or is_plugin(spec.model_type):
        arch = families.architecture(spec)
        if model.architecture != arch:
            problems.append(f"model.architecture is {model.architecture!r}; its spec gives {arch!r}")
    else:
        problems.append(
            f"model.spec.model_type {spec.model_type!r} is not a model family; "
            f"expected one of {list(families.MODEL_TYPES)} or a plug-in"
        )
    # A plug-in has no parameter formula: its count is checked against the native weights (below) only.
    recomputed = spec.model_type in families.FAMILIES and 0 <= spec.hidden_layers <= MAX_HIDDEN_LAYERS
    count = families.parameter_count(spec) if recomputed else model.parameter_count
    if model.parameter_count != count:
        problems.append(f"model.parameter_count is {model.parameter_count}; its spec gives {count}")
    if len(model.feature_names) != spec.n_features or len(model.classes) != spec.n_classes:
        problems.append(
            f"model lists {len(model.feature_names)} features and {len(model.classes)} classes; "
            f"its spec says {spec.n_features} and {spec.n_classes}"
        )
    if weights_head is not None:
        shapes = safetensors_shapes(weights_head)
        counted = None if shapes is None else sum(math.prod(s) for s in shapes)
        if counted is None:
            problems.append(
                f"the native weights' safetensors header cannot be read (its length field, or its JSON, is damaged); "
                f"expected the {model.parameter_count} parameters model.parameter_count records"
            )
        elif counted != model.parameter_count:
            problems.append(f"model.parameter_count is {model.parameter_count}; the native weights hold {counted}")
    if len(training.epoch_losses) != training.epochs or training.optimizer != families.OPTIMIZER:
        problems.append(
            f"training records {len(training.epoch_losses)} losses for {training.epochs} epochs "
            f"with optimizer {training.optimizer!r}; expected one per epoch, {families.OPTIMIZER!r}"
        )
    opset, tolerance = families.onnx_opset(export.format), families.EXPORT_TOLERANCE
    if (export.held_out_rows, export.tolerance, export.onnx_opset) != (training.test_rows, tolerance, opset):
        problems.append(
            f"export records {export.held_out_rows} held-out rows, tolerance {export.tolerance}, opset "
            f"{export.onnx_opset}; expected {training.test_rows}, {tolerance}, {opset}"
        )
    if not 0 <= export.max_abs_diff <= export.tolerance:
        problems.append(f"export.max_abs_diff {export.max_abs_diff} is not within its tolerance {export.tolerance}")
    if sorted(metadata.versions) != list(families.RECORDED_VERSIONS):
        problems.append(
            f"versions records {sorted(metadata.versions)}; expected the versions of {list(families.RECORDED_VERSIONS)}"
        )
    device = config.get("train_device")
    if metadata.determinism != families.determinism_flags(device if isinstance(device, str) else ""):
        problems.append(f"determinism differs from the flags ml8s sets for TRAIN_DEVICE={device!r}")
    warm = config.get("warm_start") is not None
    return problems + _against_schema(metadata, schema, warm) + _against_metrics(metadata, metrics)


def _against_schema(metadata: TrainingMetadata, data: bytes | None, warm: bool) -> list[str]:
    """A warm start's schema is its lineage's (its row counts are the cold start's data): rows not compared."""
    if data is None:
        return []
    try:
        schema = parse(layout.FEATURE_SCHEMA, data, FeatureSchema)
    except Invalid:
        return []  # its integrity is the artifacts check's business
    problems = []
    if metadata.model.feature_names != [f.name for f in schema.features]:
        problems.append("model.feature_names differ from feature_schema.json's features")
    if metadata.model.classes != schema.target.classes:
        problems.append("model.classes differ from feature_schema.json's target classes")
    rows = (metadata.training.train_rows, metadata.training.test_rows)
    if not warm and rows != (schema.rows.train, schema.rows.test):
        problems.append("training.train_rows/test_rows differ from feature_schema.json's rows")
    return problems


def _against_metrics(metadata: TrainingMetadata, data: bytes | None) -> list[str]:
    if data is None:
        return []
    try:
        metrics = parse(layout.METRICS, data, Metrics)
    except Invalid:
        return []  # its integrity is the artifacts check's business
    training = metadata.training
    last = training.epoch_losses[-1] if training.epoch_losses else None
    if (training.train_rows, training.test_rows, last) != (
        metrics.train_rows,
        metrics.test_rows,
        metrics.final_train_loss,
    ):
        return ["training rows or last epoch loss differ from metrics.json's train_rows/test_rows/final_train_loss"]
    return []
