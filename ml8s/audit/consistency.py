"""training_metadata.json against the run's other files: it records no checksum of itself, so whatever
in it can be recomputed from the config and from checksummed files is recomputed here.

Checked: the model spec against the canonical config; the architecture string and the parameter count
(recomputed from the spec, and counted from the safetensors header of the native weights); feature
names, classes and row counts against feature_schema.json; row counts and the final loss against
metrics.json; one loss per epoch; the export's settings and its difference within tolerance; the
determinism flags; which library versions are recorded. Not checkable from the run alone: the version
strings themselves, the epoch losses before the last, the export's exact difference (docs/audits.md).
"""

from __future__ import annotations

import itertools
import json
import math

from ml8s.contract.records import ConfigSnapshot, TrainingMetadata

# Constants of the pipeline, repeated here so that verifying needs no torch (the pipeline modules that
# define them import it); tests/test_verify.py pins them to ml8s.pipeline.export and ml8s.modeling.determinism.
EXPORT_TOLERANCE = 1e-4
ONNX_OPSET = 17
OPTIMIZER = "adam"
VERSIONED = ("numpy", "onnx", "onnxruntime", "pyarrow", "python", "safetensors", "torch")


def expected_determinism(device: str) -> dict[str, object]:
    """What ``ml8s.modeling.determinism.flags(device)`` records."""
    return {
        "cublas_workspace_config": ":4096:8",
        "cudnn_benchmark": False,
        "cudnn_deterministic": True,
        "device": device,
        "torch_num_threads": 1 if device == "cpu" else None,
        "use_deterministic_algorithms": True,
    }


def safetensors_shapes(head: bytes) -> list[list[int]] | None:
    """Tensor shapes from the start of a safetensors file (8-byte little-endian length, JSON header)."""
    if len(head) < 8:
        return None
    size = int.from_bytes(head[:8], "little")
    try:
        header = json.loads(head[8 : 8 + size])
        return [[int(d) for d in v["shape"]] for k, v in header.items() if k != "__metadata__"]
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


def header_length(head: bytes) -> int:
    """Bytes to read for the whole safetensors header (from its first 8 bytes)."""
    return 8 + int.from_bytes(head[:8], "little") if len(head) >= 8 else 8


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
    hidden = [spec.hidden_units] * spec.hidden_layers if spec.model_type == "mlp" else []
    widths = [spec.n_features, *hidden, spec.n_classes]
    arch = f"{spec.model_type}:" + "-".join(str(w) for w in widths)
    count = sum(a * b + b for a, b in itertools.pairwise(widths))  # weights and biases of each linear layer
    if model.architecture != arch:
        problems.append(f"model.architecture is {model.architecture!r}; its spec gives {arch!r}")
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
        if counted != model.parameter_count:
            problems.append(f"model.parameter_count is {model.parameter_count}; the native weights hold {counted}")
    if len(training.epoch_losses) != training.epochs or training.optimizer != OPTIMIZER:
        problems.append(
            f"training records {len(training.epoch_losses)} losses for {training.epochs} epochs "
            f"with optimizer {training.optimizer!r}; expected one per epoch, {OPTIMIZER!r}"
        )
    opset = ONNX_OPSET if export.format == "onnx" else None
    if (export.held_out_rows, export.tolerance, export.onnx_opset) != (training.test_rows, EXPORT_TOLERANCE, opset):
        problems.append(
            f"export records {export.held_out_rows} held-out rows, tolerance {export.tolerance}, opset "
            f"{export.onnx_opset}; expected {training.test_rows}, {EXPORT_TOLERANCE}, {opset}"
        )
    if not 0 <= export.max_abs_diff <= export.tolerance:
        problems.append(f"export.max_abs_diff {export.max_abs_diff} is not within its tolerance {export.tolerance}")
    if sorted(metadata.versions) != sorted(VERSIONED):
        problems.append(f"versions records {sorted(metadata.versions)}; expected the versions of {list(VERSIONED)}")
    device = config.get("train_device")
    if metadata.determinism.model_dump() != expected_determinism(device if isinstance(device, str) else ""):
        problems.append(f"determinism differs from the flags ml8s sets for TRAIN_DEVICE={device!r}")
    return problems + _against_schema(metadata, schema) + _against_metrics(metadata, metrics)


def _against_schema(metadata: TrainingMetadata, schema: bytes | None) -> list[str]:
    if schema is None:
        return []
    try:
        data = json.loads(schema)
        names = [f["name"] for f in data["features"]]
        classes, rows = data["target"]["classes"], data["rows"]
        counts = (rows["train"], rows["test"])
    except (ValueError, KeyError, TypeError):
        return []  # its integrity is the artifacts check's business
    problems = []
    if metadata.model.feature_names != names:
        problems.append("model.feature_names differ from feature_schema.json's features")
    if metadata.model.classes != classes:
        problems.append("model.classes differ from feature_schema.json's target classes")
    if (metadata.training.train_rows, metadata.training.test_rows) != counts:
        problems.append("training.train_rows/test_rows differ from feature_schema.json's rows")
    return problems


def _against_metrics(metadata: TrainingMetadata, metrics: bytes | None) -> list[str]:
    if metrics is None:
        return []
    try:
        data = json.loads(metrics)
        recorded = (data["train_rows"], data["test_rows"], data["final_train_loss"])
    except (ValueError, KeyError, TypeError):
        return []  # its integrity is the artifacts check's business
    training = metadata.training
    last = training.epoch_losses[-1] if training.epoch_losses else None
    if (training.train_rows, training.test_rows, last) != recorded:
        return ["training rows or last epoch loss differ from metrics.json's train_rows/test_rows/final_train_loss"]
    return []
