"""Step 5, export and validation; writes ``training_metadata.json`` with every artifact's sha256.

The export is validated against the torch model on the held-out rows (max abs logit difference,
fail above ``families.EXPORT_TOLERANCE``). Pure, like features and training: it reads their local output directories
and writes ``model.<fmt>`` and ``training_metadata.json`` into its own. The checksums are computed from
exactly the bytes that ``publish`` will write (the local files; the snapshot files from the spec), and
finalization re-reads every stored object against them before the marker.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Iterable, Iterator

import numpy as np
import onnx
import onnxruntime
import safetensors.torch
import torch

from ml8s import log
from ml8s.context.publish import FEATURES, local_path, trained
from ml8s.context.run import RunSpec
from ml8s.contract import ArtifactDigest, ExportRecord, ModelRecord, TrainingMetadata, TrainingRecord, layout
from ml8s.errors import ExportValidationError, IntegrityError, TrainingError
from ml8s.features.matrix_read import read_split32
from ml8s.inference.onnx_metadata import label_onnx
from ml8s.modeling.families import (
    EXPORT_TOLERANCE,
    ONNX_OPSET,
    OPTIMIZER,
    determinism_flags,
    library_versions,
    onnx_opset,
)
from ml8s.training.epochs import EVAL_ROWS, passes
from ml8s.training.fit import TrainSummary, model_family

Float32Rows = np.ndarray[tuple[int, int], np.dtype[np.float32]]


@log.timed("export")
def export(spec: RunSpec, summary: TrainSummary, features_dir: str, model_dir: str, out_dir: str) -> None:
    """Write ``model.<MODEL_FORMAT>`` into ``out_dir``, validate it, then write ``training_metadata.json``."""
    native = local_path(model_dir, layout.MODEL_NATIVE)
    family = model_family(spec)
    model = family.build(summary.spec)
    model.load_state_dict(safetensors.torch.load_file(native))
    model.eval()
    fmt = spec.params.model_format
    held_out = read_split32(local_path(features_dir, layout.FEATURE_MATRIX), 1)
    os.makedirs(out_dir, exist_ok=True)
    path = local_path(out_dir, layout.model_export(fmt))
    if fmt == "onnx":
        _export_onnx(model, summary.spec.n_features, path)
        label_onnx(path, local_path(features_dir, layout.FEATURE_SCHEMA))  # classes, features, rules: servable alone
        session = _onnx_session(path)

        def exported(rows: Float32Rows) -> Float32Rows:
            (logits,) = session.run(["logits"], {"features": rows})
            return np.asarray(logits, dtype=np.float32)
    else:
        shutil.copyfile(native, path)
        reloaded = family.build(summary.spec)
        reloaded.load_state_dict(safetensors.torch.load_file(path))
        reloaded.eval()

        def exported(rows: Float32Rows) -> Float32Rows:
            with torch.no_grad():
                return np.asarray(reloaded(torch.from_numpy(rows)).numpy(), dtype=np.float32)

    def logits() -> Iterator[tuple[Float32Rows, Float32Rows]]:
        for first, _ in passes(len(held_out)):  # a pass at a time, as training evaluates (its activations)
            rows = held_out[first : first + EVAL_ROWS]
            with torch.no_grad():
                expected = model(torch.from_numpy(rows)).numpy()
            yield exported(rows), expected

    diff = compare_logits(logits(), fmt, len(held_out), summary.epoch_losses)
    validation = ExportRecord(
        format=fmt,
        held_out_rows=len(held_out),
        max_abs_diff=diff,
        onnx_opset=onnx_opset(fmt),
        tolerance=EXPORT_TOLERANCE,
    )
    spec.log("export", f"model.{fmt} validated on {len(held_out)} held-out rows, max abs diff {diff:.3e}")
    artifacts = artifact_checksums(spec, features_dir, model_dir, out_dir)
    metadata = training_metadata(spec, summary, validation, artifacts)
    with open(local_path(out_dir, layout.TRAINING_METADATA), "wb") as handle:
        handle.write(metadata.to_bytes())


# A logit's difference, as a share of the torch model's logit, up to which it is float32 rounding (about 80 ulps):
# above the absolute tolerance, it is the logit that is too large.
ROUNDING_SHARE = 1e-5


def compare_logits(
    pairs: Iterable[tuple[Float32Rows, Float32Rows]], fmt: str, rows: int, losses: tuple[float, ...]
) -> float:
    """The largest absolute difference of the exported logits from the torch model's (each pair: one pass of
    both), or the error of :func:`disagreement` when it is above the tolerance."""
    diff = peak = beyond = 0.0
    for actual, expected in pairs:
        diff = max(diff, pass_difference(actual, expected, fmt))
        peak = max(peak, float(np.abs(expected[np.isfinite(expected)]).max(initial=0.0)))
        beyond = max(beyond, beyond_rounding(actual, expected))
    if not diff <= EXPORT_TOLERANCE:
        raise disagreement(fmt, rows, diff, peak, losses, beyond)
    return diff


def beyond_rounding(actual: Float32Rows, expected: Float32Rows) -> float:
    """The largest difference of a logit larger than float32 rounding of its own size explains (0: none).

    Per logit, not against the largest logit: one row's logit of 1e6 made a difference of 5 on another row whose
    logit is 0.01 (an export that really disagrees) look like rounding, reported as a diverged training."""
    wide = expected.astype(np.float64)
    # an infinite logit explains no difference: a finite one against it is the export's, as before
    rounding = np.where(np.isfinite(wide), np.abs(wide) * ROUNDING_SHARE, 0.0)
    with np.errstate(invalid="ignore"):  # equal infinities subtract to NaN, which pass_difference judged
        gap = np.abs(actual.astype(np.float64) - wide)
        unexplained = gap[gap > rounding]
    return float(unexplained.max(initial=0.0))


def disagreement(
    fmt: str, rows: int, diff: float, peak: float, losses: tuple[float, ...], beyond: float
) -> TrainingError:
    """The error of an export whose logits differ from the torch model's by more than the tolerance. Where every
    logit's difference above the tolerance is float32 rounding of that logit (``beyond``, :func:`beyond_rounding`,
    within the tolerance: logits that large come of a training that diverged, unscaled features or too high a
    LEARNING_RATE), training is what failed; it was reported as an export that disagrees."""
    if peak > 0 and beyond <= EXPORT_TOLERANCE:
        trained = f"training loss {losses[0]:.6g} at epoch 1, {losses[-1]:.6g} at epoch {len(losses)}" if losses else ""
        return TrainingError(
            f"training diverged: the trained model's logits on the {rows} held-out rows reach {peak:.3g} ({trained}), "
            f"so large that float32 rounding alone exceeds the export's tolerance: model/model.{fmt} differs by "
            f"{diff:.3e} ({diff / peak:.1e} of the largest logit), expected <= {EXPORT_TOLERANCE:.0e}; expected a "
            "model that converged (a lower LEARNING_RATE, STANDARDIZE=true)"
        )
    return ExportValidationError(
        f"model/model.{fmt} disagrees with the torch model on {rows} held-out rows: "
        f"max abs logit difference {diff:.3e}, expected <= {EXPORT_TOLERANCE:.0e}"
    )


def pass_difference(actual: Float32Rows, expected: Float32Rows, fmt: str) -> float:
    """The largest absolute logit difference of one pass: NaN where both sides hold the same infinity, as always.

    A NaN in the export where the torch model gives another value is a disagreement: Python's ``max`` drops a NaN
    (``max(0.0, nan)`` is 0.0), so it passed validation, recorded as agreeing.
    """
    with np.errstate(invalid="ignore"):  # equal infinities subtract to NaN: numpy's warning would reach stderr
        gap = np.abs(actual.astype(np.float64) - expected.astype(np.float64))
    disagree = np.isnan(gap) & (actual != expected)
    if disagree.any():
        raise ExportValidationError(
            f"model/model.{fmt} gives NaN for {int(np.count_nonzero(disagree))} logit(s) where the torch model gives "
            f"a number; expected the same logits within {EXPORT_TOLERANCE:.0e}"
        )
    return float(gap.max())


def artifact_checksums(spec: RunSpec, features_dir: str, model_dir: str, export_dir: str) -> dict[str, ArtifactDigest]:
    """sha256 and size of every checksummed artifact, from the bytes that will be published."""
    fmt = spec.params.model_format
    sources: dict[str, str] = {
        **{rel: local_path(features_dir, rel) for rel in FEATURES},
        **{
            rel: local_path(model_dir, rel)
            for rel in trained(spec.identity.canonicalization_version, spec.params.train_world_size)
        },
        layout.model_export(fmt): local_path(export_dir, layout.model_export(fmt)),
    }
    expected = layout.checksummed_artifacts(fmt, spec.identity.canonicalization_version, spec.params.train_world_size)
    if sorted(sources) != sorted(expected):
        raise IntegrityError(f"export would checksum {sorted(sources)}; expected exactly {sorted(expected)}")
    artifacts: dict[str, ArtifactDigest] = {}
    for rel in expected:
        with open(sources[rel], "rb") as handle:
            data = handle.read()
        artifacts[rel] = ArtifactDigest(sha256=hashlib.sha256(data).hexdigest(), size=len(data))
    return artifacts


def training_metadata(
    spec: RunSpec, summary: TrainSummary, validation: ExportRecord, artifacts: dict[str, ArtifactDigest]
) -> TrainingMetadata:
    """How the model was made and what every artifact hashes to (see ``ml8s.contract.training_metadata``)."""
    params = spec.params
    return TrainingMetadata(
        artifacts=artifacts,
        canonicalization_version=spec.identity.canonicalization_version,
        determinism=determinism_flags(params.train_device),
        export=validation,
        model=ModelRecord(
            architecture=summary.architecture,
            classes=list(summary.classes),
            feature_names=list(summary.feature_names),
            parameter_count=summary.parameter_count,
            spec=summary.spec,
        ),
        training=TrainingRecord(
            batch_size=params.batch_size,
            epoch_losses=list(summary.epoch_losses),
            epochs=params.epochs,
            learning_rate=params.learning_rate,
            optimizer=OPTIMIZER,
            random_seed=params.random_seed,
            test_rows=summary.test_rows,
            train_rows=summary.train_rows,
        ),
        versions=library_versions(),
        drift=spec.lineage.drift if spec.lineage is not None else None,
    )


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


def _onnx_session(path: str) -> onnxruntime.InferenceSession:
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    return onnxruntime.InferenceSession(path, sess_options=options, providers=["CPUExecutionProvider"])
