"""Predicting on raw rows: the run's transform, its exported model, and the class order.

:class:`Predictor` checks the files once (:meth:`ModelFiles.metadata`), then each :meth:`Predictor.predict`
encodes the rows with the training rules, scores the matrix with the exported model (onnxruntime for
``model.onnx``, torch for ``model.safetensors``) and turns the logits into probabilities (softmax in float64)
and the predicted class (the most probable; the first in class order on a tie).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict, ValidationError

from ml8s.data.columns import Column
from ml8s.errors import ConfigError, InferenceError, PredictionInputError
from ml8s.inference.cells import Cells, Rows
from ml8s.inference.model_files import ModelFiles, ServingMetadata
from ml8s.inference.onnx_metadata import onnxruntime_error
from ml8s.inference.transform import Float32Array, RawTransform

ONNX_INPUT = "features"
ONNX_OUTPUT = "logits"
PREDICTED = "predicted_class"
PROBABILITY_PREFIX = "probability_"

Scorer = Callable[[Float32Array], Float32Array]


class Predictions(BaseModel):
    """One predicted class and one probability per class (in class order) for each row."""

    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True)

    classes: tuple[str, ...]
    labels: tuple[str, ...]
    probabilities: npt.NDArray[np.float64]

    def columns(self) -> list[str]:
        """``predicted_class`` then ``probability_{class}`` for each class, in class order."""
        return [PREDICTED, *(f"{PROBABILITY_PREFIX}{c}" for c in self.classes)]

    def to_csv(self) -> str:
        """CSV with a header; probabilities written with ``repr`` (they read back exactly)."""
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(self.columns())
        for label, row in zip(self.labels, self.probabilities.tolist(), strict=True):
            writer.writerow([label, *(repr(float(p)) for p in row)])
        return out.getvalue()


class Predictor:
    """A run's model, ready to predict on raw rows (the files are checked once, here)."""

    def __init__(self, files: ModelFiles) -> None:
        """Raises InferenceError or IntegrityError when the files are not a consistent, unaltered set."""
        metadata = files.metadata()
        self.transform = RawTransform.from_schema(files.feature_schema, f"{files.source}/feature_schema.json")
        recorded = (metadata.model.classes, metadata.model.feature_names)
        if recorded != (self.transform.classes, self.transform.feature_names):
            raise InferenceError(
                f"{files.source}: training_metadata.json records classes {list(recorded[0])} and features "
                f"{list(recorded[1])}; expected those of feature_schema.json"
            )
        self.model_format = metadata.export.format
        if self.model_format == "onnx":
            self._score = _onnx_scorer(files, len(self.transform.feature_names), len(self.classes))
        else:
            self._score = _torch_scorer(files, metadata)

    @property
    def classes(self) -> tuple[str, ...]:
        return self.transform.classes

    def predict(self, rows: Rows) -> Predictions:
        """Predict every row; see :meth:`RawTransform.encode` for what a row may hold.

        Raises:
            PredictionInputError: a row lacks a needed column or holds a value of the wrong kind.
        """
        return self._predicted(self.transform.encode(rows))

    def predict_cells(
        self, cells: Cells, rows: int, failed: Mapping[str, PredictionInputError] | None = None
    ) -> Predictions:
        """Predict ``rows`` rows given as text columns (:meth:`RawTransform.encode_cells`): no Python object per
        cell, for files of millions of rows.

        Raises:
            PredictionInputError: a needed column is absent or holds a value of the wrong kind.
        """
        return self._predicted(self.transform.encode_cells(cells, rows, failed))

    def predict_values(self, values: Mapping[str, Sequence[object]], rows: int) -> Predictions:
        """Predict ``rows`` rows given by column (:meth:`RawTransform.encode_values`: a DataFrame's columns).

        Raises:
            PredictionInputError: a needed column is absent or holds a value of the wrong kind.
        """
        return self._predicted(self.transform.encode_values(values, rows))

    def predict_typed(self, columns: Mapping[str, Column], rows: int) -> Predictions:
        """Predict ``rows`` rows given as typed input columns (:meth:`RawTransform.typed_cells`'s), as another
        model with the same inputs typed them: a promotion types the held-out rows once for both models.

        Raises:
            PredictionInputError: a feature's value is too large for float32, or a category cannot be placed.
        """
        return self._predicted(self.transform.encode_typed(columns, rows))

    def _predicted(self, matrix: Float32Array) -> Predictions:
        rows, n_classes = len(matrix), len(self.classes)
        if rows == 0:
            return Predictions(classes=self.classes, labels=(), probabilities=np.zeros((0, n_classes)))
        logits = self._score(matrix)
        if logits.shape != (rows, n_classes):
            raise InferenceError(f"the model returned logits of shape {logits.shape}; expected {(rows, n_classes)}")
        probs = probabilities(logits)
        labels = tuple(np.asarray(self.classes, dtype=object)[probs.argmax(axis=1)].tolist())
        return Predictions(classes=self.classes, labels=labels, probabilities=probs)


def predict_rows(files: ModelFiles, rows: Rows) -> Predictions:
    """Predict raw ``rows`` with a run's model files (see :class:`Predictor`)."""
    return Predictor(files).predict(rows)


def probabilities(logits: Float32Array) -> npt.NDArray[np.float64]:
    """Softmax over classes, in float64 (as training's held-out metrics compute it)."""
    wide = logits.astype(np.float64)
    exp = np.exp(wide - wide.max(axis=1, keepdims=True))
    return np.asarray(exp / exp.sum(axis=1, keepdims=True), dtype=np.float64)


def _onnx_scorer(files: ModelFiles, features: int, classes: int) -> Scorer:
    """onnxruntime's session of ``model.onnx``, checked to take ``features`` columns and give ``classes`` logits
    (the checksums prove the files are the run's, not that they fit together)."""
    import onnxruntime  # here, not at the top: feature engineering imports this package without it

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1  # one thread: the same sums in the same order on every machine
    options.inter_op_num_threads = 1
    try:
        session = onnxruntime.InferenceSession(files.model, sess_options=options, providers=["CPUExecutionProvider"])
    except Exception as exc:
        if not onnxruntime_error(exc):
            raise
        raise InferenceError(f"{files.source}: model.onnx cannot be loaded by onnxruntime: {exc}") from exc
    names = ([i.name for i in session.get_inputs()], [o.name for o in session.get_outputs()])
    if names != ([ONNX_INPUT], [ONNX_OUTPUT]):
        raise InferenceError(
            f"{files.source}: model.onnx has inputs/outputs {names}; expected {ONNX_INPUT}/{ONNX_OUTPUT}"
        )
    for arg, width, what in (
        (session.get_inputs()[0], features, "features"),
        (session.get_outputs()[0], classes, "classes"),
    ):
        shape = list(arg.shape)
        if arg.type != "tensor(float)" or len(shape) != 2 or (isinstance(shape[1], int) and shape[1] != width):
            raise InferenceError(
                f"{files.source}: model.onnx's {arg.name} is {arg.type} {shape}; expected tensor(float) [rows, {width}]"
                f" (the {width} {what} of feature_schema.json)"
            )

    def score(matrix: Float32Array) -> Float32Array:
        try:
            (logits,) = session.run([ONNX_OUTPUT], {ONNX_INPUT: matrix})
        except Exception as exc:
            if not onnxruntime_error(exc):
                raise
            raise InferenceError(f"{files.source}: model.onnx failed to score {len(matrix)} rows: {exc}") from exc
        return np.asarray(logits, dtype=np.float32)

    return score


def _torch_scorer(files: ModelFiles, metadata: ServingMetadata) -> Scorer:
    import safetensors.torch
    import torch
    from safetensors import SafetensorError

    from ml8s.contract import ModelSpec
    from ml8s.modeling.networks import build_model

    try:
        model = build_model(ModelSpec.model_validate(metadata.model.spec))
        model.load_state_dict(safetensors.torch.load(files.model))
    except (ValidationError, RuntimeError, SafetensorError, ConfigError) as exc:  # SafetensorError: not a RuntimeError
        detail = exc.message if isinstance(exc, ConfigError) else str(exc)
        raise InferenceError(
            f"{files.source}: model.safetensors does not load into its recorded spec: {detail}"
        ) from exc
    model.eval()

    def score(matrix: Float32Array) -> Float32Array:
        with torch.no_grad():
            return np.asarray(model(torch.from_numpy(matrix)).numpy(), dtype=np.float32)

    return score
