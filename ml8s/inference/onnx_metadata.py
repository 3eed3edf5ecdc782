"""What ``model/model.onnx`` says about itself: its ``metadata_props``, so it can be served from the file alone.

Export writes these entries (keys sorted, values compact JSON or text, no timestamps), so the same run
always exports the same bytes:

- ``ml8s.classes``: the class names, index i of the ``logits`` output is class i;
- ``ml8s.feature_names``: the columns of the ``features`` input, in order;
- ``ml8s.feature_rules``: each feature's rule (source column, kind, impute value, scaling, category),
  the entries of ``features/feature_schema.json``;
- ``ml8s.categories``: only when MAX_FEATURES hid some kept categories of a column whose ``__other__``
  feature it kept (schema version 2): every kept category of such columns, ``{column: [...]}``;
- ``ml8s.target_column``: the column the model predicts;
- ``ml8s.input`` and ``ml8s.output``: what the graph's input and output hold.
"""

from __future__ import annotations

import json

from ml8s.errors import InferenceError
from ml8s.inference.transform import RawTransform, canonical_rules

CATEGORIES = "ml8s.categories"
CLASSES = "ml8s.classes"
FEATURE_NAMES = "ml8s.feature_names"
FEATURE_RULES = "ml8s.feature_rules"
TARGET_COLUMN = "ml8s.target_column"
INPUT = "ml8s.input"
OUTPUT = "ml8s.output"


def onnx_metadata(schema: bytes, where: str) -> dict[str, str]:
    """The metadata entries of the model trained on the features ``schema`` describes (sorted by key)."""
    transform = RawTransform.from_schema(schema, where)
    props = {
        CLASSES: json.dumps(list(transform.classes), separators=(",", ":"), ensure_ascii=False),
        FEATURE_NAMES: json.dumps(list(transform.feature_names), separators=(",", ":"), ensure_ascii=False),
        FEATURE_RULES: canonical_rules(transform),
        TARGET_COLUMN: transform.target_column,
        INPUT: f"features: float32[batch, {len(transform.rules)}], columns in the order of {FEATURE_NAMES}, "
        "made from raw rows by the rules of ml8s.feature_rules",
        OUTPUT: f"logits: float32[batch, {len(transform.classes)}]; softmax gives the probability of each class "
        f"in the order of {CLASSES}",
    }
    named = {(rule.source, rule.category) for rule in transform.rules if rule.kind == "onehot"}
    hidden = {
        i.name: list(i.categories)
        for i in transform.inputs
        if i.kind == "categorical" and any((i.name, c) not in named for c in i.categories)
    }
    if hidden:
        props[CATEGORIES] = json.dumps(hidden, separators=(",", ":"), sort_keys=True, ensure_ascii=False)
    return dict(sorted(props.items()))


def label_onnx(onnx_path: str, schema_path: str) -> None:
    """Write the metadata entries into the ONNX file at ``onnx_path`` (replacing any of ours), then check it."""
    import onnx

    with open(schema_path, "rb") as handle:
        props = onnx_metadata(handle.read(), schema_path)
    model = onnx.load(onnx_path)
    kept = [(p.key, p.value) for p in model.metadata_props if p.key not in props]
    del model.metadata_props[:]
    for key, value in sorted([*kept, *props.items()]):
        entry = model.metadata_props.add()
        entry.key, entry.value = key, value
    onnx.checker.check_model(model)
    onnx.save(model, onnx_path)


def read_onnx_metadata(model: bytes) -> dict[str, str]:
    """The ``metadata_props`` of an ONNX model, as onnxruntime reads them.

    Raises:
        InferenceError: the bytes are not an ONNX model onnxruntime can load.
    """
    import onnxruntime  # here, not at the top: feature engineering imports this package without it

    try:
        session = onnxruntime.InferenceSession(model, providers=["CPUExecutionProvider"])
    except Exception as exc:
        if not onnxruntime_error(exc):
            raise
        raise InferenceError(f"cannot read an ONNX model's metadata: {exc}") from exc
    meta: dict[str, str] = session.get_modelmeta().custom_metadata_map
    return dict(sorted(meta.items()))


def onnxruntime_error(exc: Exception) -> bool:
    """Whether ``exc`` is onnxruntime's own error. Its pybind11 classes (InvalidProtobuf, InvalidArgument, Fail,
    ...) derive from Exception directly, not from RuntimeError, and share no base to catch them by."""
    return isinstance(exc, RuntimeError) or type(exc).__module__.startswith("onnxruntime.")
