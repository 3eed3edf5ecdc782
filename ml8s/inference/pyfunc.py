"""The MLflow model of a run: a ``python_function`` (pyfunc) model that predicts on raw rows.

``mlflow.pyfunc.load_model("models:/NAME/VERSION").predict(frame)`` takes a DataFrame of raw columns and
returns ``predicted_class`` and ``probability_{class}`` per row, through :class:`~ml8s.inference.Predictor`:
the run's own feature rules and exported model, so it predicts exactly what ``ml8s predict`` does.

The model directory :func:`save_model_dir` writes holds MLflow's files (``MLmodel``, which carries a creation
time, the requirements, the input example) and, under ``artifacts/``, byte-identical copies of the run's
``feature_schema.json``, ``training_metadata.json`` and ``model.<fmt>``, checked against the recorded
sha256 when the model loads. ``code/ml8s`` is this package's source, so an environment built from the
model's requirements (``mlflow models serve``) imports it without installing ml8s. The model is logged
from code (``ml8s/inference/pyfunc_model.py``, MLflow's "models from code"): nothing is pickled.

Its signature names the outputs, not the inputs: MLflow's schema enforcement would refuse what training
reads (``NA`` or ``?`` in a number column is a missing value, ``true``/``false`` text a boolean), and a
``text/csv`` request can only be parsed against a schema of plain types, whose boolean columns turn a
missing value into False. Without an input schema, MLflow hands the rows as sent (JSON) or as pandas
reads them (CSV) to the model, whose transform reads every cell by the training rules and refuses a bad
one with a named error. The input columns and their kinds are in the model's metadata
(``ml8s_input_columns``) and in its input example.

Imported on its own (not from :mod:`ml8s.inference`): it imports MLflow and pandas.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import os
import shutil
from collections.abc import Iterator, Mapping
from pathlib import Path
from unittest import mock

import mlflow.pyfunc
import mlflow.utils.environment
import pandas as pd
from mlflow.models import Model, ModelSignature
from mlflow.pyfunc.model import PythonModel, PythonModelContext
from mlflow.types import ColSpec, Schema

import ml8s
from ml8s.errors import InferenceError
from ml8s.inference.model_files import ModelFiles, ModelFormat, read_model_dir
from ml8s.inference.predictor import PREDICTED, PROBABILITY_PREFIX, Predictor
from ml8s.inference.rules import MISSING
from ml8s.inference.transform import InputColumn, RawTransform
from ml8s.tempdirs import owned_tempdir

# What serving imports (ml8s's own dependencies, onnxruntime, MLflow), pinned to the versions that saved the model.
SERVING_DISTRIBUTIONS = (
    "boto3",
    "cloudpickle",
    "mlflow",
    "numpy",
    "onnxruntime",
    "pandas",
    "protobuf",
    "pyarrow",
    "pydantic",
    "pydantic-settings",
    "zstandard",
)
TORCH_DISTRIBUTIONS = ("safetensors", "torch")
MODEL_CODE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "pyfunc_model.py")


class RawRowModel(PythonModel):
    """Raw rows in, predicted class and class probabilities out (a run's model as an MLflow pyfunc)."""

    def __init__(self, model_format: ModelFormat | None = None) -> None:
        self.model_format: ModelFormat | None = model_format  # None: the artifact's own (model.onnx or …)
        self._predictor: Predictor | None = None

    def load_context(self, context: PythonModelContext) -> None:
        """Load and check the run's files from the model's ``artifacts/``."""
        model = context.artifacts["model"]
        fmt: ModelFormat = self.model_format or ("safetensors" if model.endswith(".safetensors") else "onnx")
        self._predictor = Predictor(read_model_dir(os.path.dirname(model), fmt))

    def predict(
        self, context: PythonModelContext, model_input: pd.DataFrame, params: Mapping[str, object] | None = None
    ) -> pd.DataFrame:
        """Predict each row of ``model_input`` (NaN or None = missing); columns the model does not use are ignored.

        Raises:
            PredictionInputError: a needed column is absent or a value is not of its column's kind.
        """
        if self._predictor is None:
            raise InferenceError("the ml8s pyfunc model was not loaded; expected mlflow.pyfunc.load_model first")
        frame = pd.DataFrame(model_input)
        cells = frame.astype(object).where(frame.notna(), None)
        # by column, a later column of a repeated name replacing an earlier one (as in a row's dict): no dict per row
        values = {str(name): cells.iloc[:, i].tolist() for i, name in enumerate(cells.columns)}
        predictions = self._predictor.predict_values(values, len(cells))
        columns = predictions.columns()
        out = {columns[0]: list(predictions.labels)}
        for i, name in enumerate(columns[1:]):
            out[name] = predictions.probabilities[:, i].tolist()
        return pd.DataFrame(out, columns=columns)


def signature(transform: RawTransform) -> ModelSignature:
    """``predicted_class`` and one probability per class out; no input schema (see the module docstring)."""
    probabilities = [ColSpec("double", f"{PROBABILITY_PREFIX}{c}") for c in transform.classes]
    return ModelSignature(outputs=Schema([ColSpec("string", PREDICTED), *probabilities]))


def input_columns(transform: RawTransform) -> list[dict[str, str]]:
    """The raw columns the model reads, with their kinds (numeric, boolean, categorical, any), in schema order."""
    return [{"name": c.name, "kind": c.kind} for c in transform.inputs]


def input_example(transform: RawTransform) -> pd.DataFrame:
    """Two rows: typical values (imputed means, the first known category), then missing values where allowed."""
    typical: dict[str, object] = {}
    missing: dict[str, object] = {}
    impute = {rule.source: rule.impute for rule in transform.rules if rule.impute is not None}
    for column in transform.inputs:
        typical[column.name] = _typical(column, impute.get(column.name))
        can_miss = column.kind != "categorical" or column.complete or MISSING in column.categories
        missing[column.name] = None if can_miss else typical[column.name]
    return pd.DataFrame([typical, missing], columns=[c.name for c in transform.inputs])


def requirements(model_format: ModelFormat) -> list[str]:
    """``name==version`` of every distribution serving imports, as installed here."""
    names = SERVING_DISTRIBUTIONS + (TORCH_DISTRIBUTIONS if model_format == "safetensors" else ())
    return sorted(f"{name}=={importlib.metadata.version(name)}" for name in names)


def save_model_dir(path: str, files: ModelFiles, mlflow_model: Model | None = None) -> None:
    """Write the MLflow model of ``files`` into the new directory ``path``.

    Args:
        path: where the model directory goes (must not exist, or be empty).
        files: the run's serving files, checked here against their recorded sha256.
        mlflow_model: MLflow's model record to fill in (the logged model's id, run and location), if any.
    """
    model_format = files.metadata().export.format
    transform = Predictor(files).transform
    with owned_tempdir("ml8s-pyfunc-") as tmp:
        artifacts: dict[str, str] = {}
        keys = ("feature_schema", "training_metadata", "model")
        for key, (name, data) in zip(keys, files.by_name(model_format).items(), strict=True):
            artifacts[key] = os.path.join(tmp, name)
            Path(artifacts[key]).write_bytes(data)
        with _requirements_known():
            mlflow.pyfunc.save_model(
                path,
                python_model=MODEL_CODE,
                artifacts=artifacts,
                signature=signature(transform),
                input_example=input_example(transform),
                pip_requirements=requirements(model_format),
                code_paths=[os.path.dirname(os.path.abspath(ml8s.__file__))],
                mlflow_model=mlflow_model,
                metadata={"ml8s_input_columns": input_columns(transform)},
            )
    for cache in sorted(Path(path).rglob("__pycache__"), reverse=True):
        shutil.rmtree(cache, ignore_errors=True)


@contextlib.contextmanager
def _requirements_known() -> Iterator[None]:
    """Skip MLflow's check that this environment satisfies the model's pip requirements while saving it.

    ``requirements`` reads them from this very environment (installed versions), so the check can find no
    mismatch; it only warns, and it maps every installed distribution to its modules first (a scan of all
    of site-packages, about a second on every registration). MLflow has no switch for it.
    """
    with mock.patch.object(mlflow.utils.environment, "warn_dependency_requirement_mismatches", _no_mismatch):
        yield


def _no_mismatch(model_requirements: list[str]) -> None:
    del model_requirements


def _typical(column: InputColumn, impute: float | None) -> object:
    if column.kind == "numeric":
        return impute
    if column.kind == "boolean":
        return impute is not None and impute >= 0.5
    known = [c for c in column.categories if c != MISSING]
    return known[0] if known else None
