"""Raw-row inference: a run's feature rules and exported model, applied to rows as they come.

``ml8s predict``, the MLflow pyfunc model (:mod:`ml8s.inference.pyfunc`, imported on its own: it needs MLflow)
and feature engineering itself share these rules, so training and serving cannot disagree.
"""

from __future__ import annotations

from ml8s.inference.model_files import ModelFiles, read_chain_files, read_model_dir, read_run_files
from ml8s.inference.onnx_metadata import label_onnx, onnx_metadata, read_onnx_metadata
from ml8s.inference.predictor import Predictions, Predictor, predict_rows, probabilities
from ml8s.inference.rules import MAX_CATEGORIES, MISSING, OTHER, FeatureRule, encode_columns
from ml8s.inference.transform import InputColumn, RawTransform

__all__ = [
    "MAX_CATEGORIES",
    "MISSING",
    "OTHER",
    "FeatureRule",
    "InputColumn",
    "ModelFiles",
    "Predictions",
    "Predictor",
    "RawTransform",
    "encode_columns",
    "label_onnx",
    "onnx_metadata",
    "predict_rows",
    "probabilities",
    "read_chain_files",
    "read_model_dir",
    "read_onnx_metadata",
    "read_run_files",
]
