"""Step 5, export and validation; writes ``training_metadata.json`` with every artifact's sha256.

The export is validated against the torch model on the held-out rows (max abs logit difference,
fail above ``TOLERANCE``). Checksums are computed by reading the final objects back from the store,
so they certify what is stored, not what was meant to be stored.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import platform
import tempfile

import numpy as np
import onnx
import onnxruntime
import safetensors.torch
import torch

from ml8s import layout
from ml8s.context import RunContext
from ml8s.determinism import flags
from ml8s.errors import ExportValidationError
from ml8s.identity import canonical_bytes
from ml8s.model import build_model
from ml8s.pipeline.features import fetch_matrix
from ml8s.pipeline.train import TrainSummary

TOLERANCE = 1e-4
ONNX_OPSET = 17
_VERSIONED = ("numpy", "onnx", "onnxruntime", "pyarrow", "safetensors", "torch")


def export(ctx: RunContext, summary: TrainSummary) -> None:
    """Write ``model/model.<MODEL_FORMAT>``, validate it, then write ``training_metadata.json``."""
    store = ctx.store()
    model = build_model(summary.spec)
    model.load_state_dict(safetensors.torch.load(store.get(ctx.key(layout.MODEL_NATIVE))))
    model.eval()
    fmt = ctx.params.model_format
    with tempfile.TemporaryDirectory(prefix="ml8s-export-") as tmp:
        features, _target, split, _names = fetch_matrix(ctx, tmp)
        held_out = torch.from_numpy(features[split == 1].astype(np.float32))
        with torch.no_grad():
            expected = model(held_out).numpy()
        path = os.path.join(tmp, f"model.{fmt}")
        if fmt == "onnx":
            _export_onnx(model, summary.spec.n_features, path)
            actual = _run_onnx(path, held_out.numpy())
        else:
            with open(path, "wb") as handle:
                handle.write(store.get(ctx.key(layout.MODEL_NATIVE)))
            reloaded = build_model(summary.spec)
            reloaded.load_state_dict(safetensors.torch.load_file(path))
            reloaded.eval()
            with torch.no_grad():
                actual = reloaded(held_out).numpy()
        diff = float(np.abs(actual.astype(np.float64) - expected.astype(np.float64)).max())
        if not diff <= TOLERANCE:
            raise ExportValidationError(
                f"model/model.{fmt} disagrees with the torch model on {len(held_out)} held-out rows: "
                f"max abs logit difference {diff:.3e}, expected <= {TOLERANCE:.0e}"
            )
        ctx.writer(store).write_file(layout.model_export(fmt), path, "model_export")
    validation: dict[str, object] = {
        "format": fmt,
        "held_out_rows": len(held_out),
        "max_abs_diff": diff,
        "tolerance": TOLERANCE,
    }
    ctx.log("export", f"model.{fmt} validated on {len(held_out)} held-out rows, max abs diff {diff:.3e}")
    metadata = training_metadata(ctx, summary, validation)
    ctx.writer(store).write_bytes(layout.TRAINING_METADATA, canonical_bytes(metadata), "training_metadata")


def training_metadata(ctx: RunContext, summary: TrainSummary, validation: dict[str, object]) -> dict[str, object]:
    """Everything an auditor needs to tie the model to its inputs. No timestamps, hosts or paths of
    this machine: the file must be byte-identical for identical inputs."""
    store = ctx.store()
    artifacts: dict[str, dict[str, object]] = {}
    for rel in layout.checksummed_artifacts(ctx.params.model_format):
        data = store.get(ctx.key(rel))
        artifacts[rel] = {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
    return {
        "artifacts": artifacts,
        "canonicalization_version": ctx.identity.canonicalization_version,
        "data_fingerprint": ctx.identity.data_fingerprint,
        "determinism": flags(ctx.params.train_device),
        "export": {**validation, "onnx_opset": ONNX_OPSET if ctx.params.model_format == "onnx" else None},
        "full_config_hash": ctx.identity.full_config_hash,
        "model": {
            "architecture": summary.architecture,
            "classes": list(summary.classes),
            "feature_names": list(summary.feature_names),
            "parameter_count": summary.parameter_count,
            "spec": summary.spec.model_dump(),
        },
        "run_id": ctx.run_id,
        "training": {
            "batch_size": ctx.params.batch_size,
            "epoch_losses": list(summary.epoch_losses),
            "epochs": ctx.params.epochs,
            "learning_rate": ctx.params.learning_rate,
            "optimizer": "adam",
            "random_seed": ctx.params.random_seed,
            "test_rows": summary.test_rows,
            "train_rows": summary.train_rows,
        },
        "versions": {"python": platform.python_version(), **{p: importlib.metadata.version(p) for p in _VERSIONED}},
    }


def _export_onnx(model: torch.nn.Module, n_features: int, path: str) -> None:
    example = torch.zeros(1, n_features, dtype=torch.float32)
    torch.onnx.export(
        model,
        (example,),
        path,
        dynamo=False,
        opset_version=ONNX_OPSET,
        input_names=["features"],
        output_names=["logits"],
        dynamic_axes={"features": {0: "batch"}, "logits": {0: "batch"}},
    )
    onnx.checker.check_model(onnx.load(path))


def _run_onnx(
    path: str, rows: np.ndarray[tuple[int, int], np.dtype[np.float32]]
) -> np.ndarray[tuple[int, int], np.dtype[np.float32]]:
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    session = onnxruntime.InferenceSession(path, sess_options=options, providers=["CPUExecutionProvider"])
    (logits,) = session.run(["logits"], {"features": rows})
    return np.asarray(logits, dtype=np.float32)
