"""Step 4, training: deterministic torch training on the feature matrix, held-out metrics.

Reads the feature files from a local directory and writes ``model/model_native.safetensors`` (the state
dict, no metadata: safetensors writes its metadata dict in hash order), ``model/training_state.safetensors``
(what a warm start continues from) and ``metrics.json`` into another; returns the summary export needs.
A warm start (``spec.lineage``) continues its parent instead (:mod:`ml8s.training.warm`).
Pure: ``publish`` copies the files into ARTIFACT_ROOT.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import numpy.typing as npt
import safetensors.torch
import torch

from ml8s.context.publish import local_path
from ml8s.context.run import RunSpec
from ml8s.contract import FeatureSchema, Metrics, ModelSpec, layout, load
from ml8s.contract.epochs import EpochRecord
from ml8s.contract.training_state import STATE_VERSION, Generation, RngStates, TrainingState
from ml8s.errors import RankError, TrainingError
from ml8s.features.matrix_deferred import raise_if_failed
from ml8s.features.matrix_mapped import MappedMatrix, map_matrix32
from ml8s.identity.model_code import MODEL_CODE_KEY
from ml8s.identity.versions import records_training_state
from ml8s.modeling.determinism import seed_everything
from ml8s.modeling.families import architecture
from ml8s.modeling.family import ModelFamily
from ml8s.modeling.networks import parameter_count
from ml8s.modeling.registry import cross_entropy_step, family_for
from ml8s.training.epochs import EpochRecorder, HeldOut, eval_logits, write_epoch_log
from ml8s.training.loop import epoch_stepper
from ml8s.training.metrics import classification_metrics
from ml8s.training.optim import adam
from ml8s.training.state import began_rng, capture_rng, state_bytes
from ml8s.training.summary import TrainSummary as TrainSummary  # re-exported: export names it here
from ml8s.training.tensorboard import write_training_events


@dataclass(frozen=True)
class TrainingData:
    """The feature matrix as training reads it: tensors on the device, the split and the model's numbers.

    A dataclass, not a pydantic model: it carries live tensors and arrays, and never leaves the process.
    """

    x: torch.Tensor
    y: torch.Tensor  # int8 or int32 (narrower than int64): the steps take a batch's labels as int64 (labels_of)
    target: npt.NDArray[np.integer]
    split: npt.NDArray[np.int8]
    names: tuple[str, ...]
    classes: tuple[str, ...]
    model_spec: ModelSpec
    pages: MappedMatrix | None = None  # the mapping under ``x`` (on the CPU), rows grouped by split

    @contextlib.contextmanager
    def evaluating(self) -> Iterator[None]:
        """Keep only the held-out rows of ``x`` resident while the block evaluates, then only the training rows:
        the other split's pages are dropped from the process each time (they come back from the page cache when
        touched again), so the matrix is never resident whole. At 2M rows: 195 of its 244 MiB while training,
        49 while evaluating."""
        if self.pages is not None:
            self.pages.release(0)
        try:
            yield
        finally:
            if self.pages is not None:
                self.pages.release(1)

    def train_index(self) -> torch.Tensor:
        """The training rows' indices (int32: half the memory of int64, the same rows gathered), on the tensors'
        device."""
        return torch.from_numpy(_indices(self.split == 0)).to(self.x.device)

    @cached_property
    def held_out(self) -> HeldOut:
        """All rows, the held-out rows' indices (on the device) and their labels: no copy of their features. Made
        once: the per-epoch figures and the final metrics share them (48 MiB at 4M held-out rows)."""
        test = _indices(self.split == 1)
        return self.x, torch.from_numpy(test).to(self.x.device), self.target[test].astype(np.int64)


def _indices(mask: npt.NDArray[np.bool_]) -> npt.NDArray[np.int32] | npt.NDArray[np.int64]:
    """The positions where ``mask`` holds, as int32 when they fit (a matrix of under 2**31 rows)."""
    found = np.flatnonzero(mask)
    return found.astype(np.int32) if len(mask) < 2**31 else found


def train(spec: RunSpec, features_dir: str, out_dir: str) -> TrainSummary:
    """Train MODEL_TYPE on the training split of ``features_dir``; evaluate on the held-out split.

    Writes ``model_native.safetensors``, ``metrics.json`` and the TensorBoard events into ``out_dir``.
    One process: TRAIN_WORLD_SIZE > 1 trains in that many processes instead, started by
    :func:`ml8s.training.launch.launch_ranks` or the Flyte PyTorch task, each running ``ml8s.training.ranks``.
    """
    if spec.params.train_world_size > 1:
        raise RankError(
            f"train() trains in one process; TRAIN_WORLD_SIZE={spec.params.train_world_size} trains through "
            "ml8s.training.launch.launch_ranks (ml8s run) or the Flyte PyTorch task"
        )
    params = spec.params
    family = model_family(spec)  # before seeding: a plug-in's import-time code must not move the seeded RNGs
    device = seed_everything(params.random_seed, params.train_device)
    began = began_rng(params.random_seed)
    data = read_training_data(spec, features_dir, device)
    model = family.build(data.model_spec).to(device)
    plan = spec.lineage
    recorder = EpochRecorder(data.held_out, classes=len(data.classes))
    if plan is None:
        # capturable (the step count on the device) lets the CUDA loop replay its step as a graph (training.loop)
        optimizer: torch.optim.Optimizer = adam(
            model.parameters(), params.learning_rate, capturable=device.type == "cuda"
        )
        losses, steps = _fit(spec, family, model, optimizer, data, recorder)
        state = cold_state(model, steps, device, began)
    else:
        from ml8s.training.warm import warm_fit

        optimizer, losses, state = warm_fit(spec, plan, family, model, device, features_dir)
    return write_trained(spec, data, model, optimizer, state, losses, out_dir, recorder)


def read_training_data(spec: RunSpec, features_dir: str, device: torch.device) -> TrainingData:
    """The feature matrix and schema of ``features_dir``, ready to train ``spec``'s network on ``device``."""
    mapped = map_matrix32(local_path(features_dir, layout.FEATURE_MATRIX))
    features, target, split, names = mapped.features, mapped.target, mapped.split, mapped.names
    schema_path = local_path(features_dir, layout.FEATURE_SCHEMA)
    with open(schema_path, "rb") as handle:
        classes = tuple(load(schema_path, handle.read(), FeatureSchema).target.classes)
    if len(classes) <= 128:  # class indices 0..127 fit int8: at 20M rows, 60 MiB less than the file's int32
        target = target.astype(np.int8)
    params = spec.params
    model_spec = ModelSpec(
        model_type=params.model_type,
        n_features=features.shape[1],
        n_classes=len(classes),
        hidden_units=params.hidden_units,
        hidden_layers=params.hidden_layers,
    )
    return TrainingData(
        x=torch.from_numpy(features).to(device),  # over the mapping on the CPU; copied to a GPU once
        y=torch.from_numpy(target).to(device),
        target=target,
        split=split,
        names=tuple(names),
        classes=classes,
        model_spec=model_spec,
        # The rows stay mapped on the CPU only; a GPU holds its own copy and the mapping goes with this frame.
        pages=mapped if device.type == "cpu" else None,
    )


def write_trained(
    spec: RunSpec,
    data: TrainingData,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    state: TrainingState,
    losses: list[float],
    out_dir: str,
    recorder: EpochRecorder | None = None,
) -> TrainSummary:
    """Evaluate the trained ``model`` on the held-out rows and write its files into ``out_dir``.

    ``recorder`` holds the per-epoch record where the loop made one; else the record has the losses alone.
    """
    _, rows, labels = data.held_out
    with data.evaluating():
        probs = predict_proba(model, data.x, rows, len(data.classes))
    held_out = classification_metrics(probs, labels, len(data.classes))
    del probs
    test_rows = len(labels)
    metrics = Metrics(
        accuracy=held_out["accuracy"],
        final_train_loss=losses[-1],
        log_loss=held_out["log_loss"],
        macro_f1=held_out["macro_f1"],
        majority_class_accuracy=held_out["majority_class_accuracy"],
        roc_auc=held_out.get("roc_auc"),
        test_rows=test_rows,
        train_rows=len(data.split) - test_rows,
    )
    os.makedirs(out_dir, exist_ok=True)
    with open(local_path(out_dir, layout.MODEL_NATIVE), "wb") as handle:
        handle.write(native_bytes(model))
    if records_training_state(spec.identity.canonicalization_version):
        with open(local_path(out_dir, layout.MODEL_TRAINING_STATE), "wb") as handle:
            handle.write(state_bytes(model, optimizer, state))
    with open(local_path(out_dir, layout.METRICS), "wb") as handle:
        handle.write(metrics.to_bytes())
    if recorder is None or len(recorder.records) != len(losses):
        recorder = EpochRecorder(None)
        recorder.started_ms = None
        recorder.records = [EpochRecord(epoch=n, train_loss=loss) for n, loss in enumerate(losses, start=1)]
    write_epoch_log(out_dir, recorder)
    write_training_events(local_path(out_dir, layout.TENSORBOARD_EVENTS), recorder.records, metrics.scalars())
    model_spec = data.model_spec
    spec.log(
        "train",
        f"{architecture(model_spec)} held-out accuracy {metrics.accuracy:.4f} log-loss {metrics.log_loss:.4f}",
    )
    return TrainSummary(
        spec=model_spec,
        architecture=architecture(model_spec),
        parameter_count=parameter_count(model),
        classes=data.classes,
        feature_names=data.names,
        epoch_losses=tuple(losses),
        train_rows=len(data.split) - test_rows,
        test_rows=test_rows,
    )


def model_family(spec: RunSpec) -> ModelFamily:
    """The family that trains and exports the run: built-in, or a plug-in whose code is the code it recorded."""
    return family_for(spec.params.model_type, spec.identity.canonical_config.get(MODEL_CODE_KEY))


def native_bytes(model: torch.nn.Module) -> bytes:
    """The state dict as safetensors bytes (CPU, contiguous, no metadata)."""
    tensors = {name: t.detach().to("cpu").contiguous() for name, t in sorted(model.state_dict().items())}
    return safetensors.torch.save(tensors)


def predict_proba(
    model: torch.nn.Module, x: torch.Tensor, rows: torch.Tensor, classes: int | None = None
) -> np.ndarray[tuple[int, int], np.dtype[np.float64]]:
    """Softmax of ``x[rows]`` in float64 on the CPU, so metrics do not depend on the device's float32 softmax."""
    probs = eval_logits(model, x, rows, classes)
    model.eval()  # as it always left the model: export and the shards take it from here
    # In place, the same operations as new arrays would take: at 4M held-out rows each copy is 64 MiB more.
    probs -= probs.max(axis=1, keepdims=True)
    np.exp(probs, out=probs)
    probs /= probs.sum(axis=1, keepdims=True)
    return probs


def cold_state(model: torch.nn.Module, steps: int, device: torch.device, began: RngStates) -> TrainingState:
    """A cold start's state: the first of its lineage (which its FULL_CONFIG_HASH names), generation 0 being
    every file of its DATA_ROOT (listed by its data fingerprint, not here)."""
    return TrainingState(
        state_version=STATE_VERSION,
        lineage_id=None,
        parent_content_hash=None,
        generations=[Generation(index=0, partition="", files=[])],
        global_step=steps,
        trainings=1,
        parameter_names=[name for name, _ in model.named_parameters()],
        rng=capture_rng(device, began),
    )


def _fit(
    spec: RunSpec,
    family: ModelFamily,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    data: TrainingData,
    recorder: EpochRecorder,
) -> tuple[list[float], int]:
    """Epochs of seeded shuffles over the training rows; the loss per epoch and the optimizer steps taken.

    The loop never waits on the device: each step's loss is added on the device (in float64, in step order,
    so the epoch's mean is the float a host-side sum of ``loss.item()`` gave) and read once per epoch.
    """
    params = spec.params
    x, train_index = data.x, data.train_index
    stepper = epoch_stepper(family.train_step or cross_entropy_step, model, optimizer, x, data.y, params.batch_size)
    steps = 0
    generator = torch.Generator().manual_seed(params.random_seed)
    losses: list[float] = []
    rows = len(train_index())
    per_epoch = -(-rows // params.batch_size)
    spec.log(
        "train",
        f"training {rows} rows x {x.shape[1]} features on {x.device.type}: {params.epochs} epoch(s) of "
        f"{per_epoch} steps of {params.batch_size} rows",
    )
    model.train()
    for epoch in range(params.epochs):
        began = time.perf_counter()
        # The order alone is kept through the epoch (the indices are made again from the split for the next),
        # int32 where the rows allow: at 20M rows, 200 MiB less beside the training rows the epoch touches.
        # torch's CPU randperm draws the same permutation in either dtype.
        train_idx = train_index()
        perm = torch.randperm(rows, generator=generator, dtype=torch.int32 if rows < 2**31 else torch.int64)
        order = train_idx[perm.to(train_idx.device)]
        del train_idx, perm
        total, batches = stepper(order)
        del order  # the next epoch's order is made without this one beside it
        raise_if_failed()  # the matrix file written meanwhile (ml8s run): a full disk stops training now
        steps += batches
        mean = float(total.item()) / max(batches, 1)
        if not np.isfinite(mean):
            raise TrainingError(
                f"training loss is {mean} at epoch {epoch + 1}; expected a finite loss (lower LEARNING_RATE?)"
            )
        losses.append(mean)
        rate = batches / max(time.perf_counter() - began, 1e-9)
        with data.evaluating():
            end_epoch(spec, recorder, model, mean, f"{batches} steps, {rate:.0f} steps/s")
    return losses, steps


def end_epoch(spec: RunSpec, recorder: EpochRecorder, model: torch.nn.Module, train_loss: float, pace: str) -> None:
    """The loop's per-epoch hook: record the epoch (held-out figures, end time) and log one line."""
    record = recorder.end_epoch(model, train_loss)
    held_out = ""
    if record.held_out_log_loss is not None and record.held_out_accuracy is not None:
        held_out = f", held-out log-loss {record.held_out_log_loss:.4f} accuracy {record.held_out_accuracy:.4f}"
    spec.log("train", f"epoch {record.epoch}/{spec.params.epochs} loss {train_loss:.6f}{held_out} ({pace})")
