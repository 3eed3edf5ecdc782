"""The per-epoch record of a training: train loss, held-out loss and accuracy, and when each epoch ended.

Training is a pure, cached step that never talks to MLflow. It records each epoch here instead and writes
the record to ``logs/epochs.json`` (a log, like the TensorBoard events: wall-clock times inside, never
checksummed nor hashed); registration replays it into the MLflow run with each point's step and recorded
time, and opens the MLflow run at the recorded start of training (docs/architecture.md).

The held-out evaluation after each epoch changes nothing training computes: the model runs in eval mode
under ``torch.no_grad`` (no gradient, no batch-norm statistic updated), no random number is drawn, and
training mode is restored. The weights' bytes are those of a training without it.
"""

from __future__ import annotations

import time

import numpy as np
import numpy.typing as npt
import torch

from ml8s.context.publish import local_path
from ml8s.contract.epochs import EpochRecord, epochs_bytes
from ml8s.contract.layout import EPOCH_LOG
from ml8s.errors import TrainingError
from ml8s.training.metrics import Labels

# Held-out rows evaluated per forward pass: the activations of a pass over every held-out row of a 20M-row
# matrix would be gigabytes. A held-out split of at most this many rows is evaluated in one pass, as it always was.
EVAL_ROWS = 1 << 15
HeldOut = tuple[torch.Tensor, torch.Tensor, Labels]
"""All rows, the held-out rows' indices (on the rows' device) and their labels: the rows are gathered a pass at
a time, never copied out whole."""


class EpochRecorder:
    """Collects :class:`EpochRecord` s; ``held_out`` is None where no held-out evaluation is made per epoch."""

    def __init__(self, held_out: HeldOut | None, classes: int | None = None) -> None:
        self.started_ms: int | None = int(time.time() * 1000)
        self.records: list[EpochRecord] = []
        self._held_out = held_out
        self._classes = classes

    def end_epoch(self, model: torch.nn.Module, train_loss: float) -> EpochRecord:
        """Record the epoch just trained (evaluating ``model`` on the held-out rows, see the module docstring)."""
        log_loss = accuracy = None
        if self._held_out is not None and len(self._held_out[2]):
            log_loss, accuracy = held_out_figures(model, *self._held_out, classes=self._classes)
        record = EpochRecord(
            epoch=len(self.records) + 1,
            train_loss=train_loss,
            held_out_log_loss=log_loss,
            held_out_accuracy=accuracy,
            time_ms=int(time.time() * 1000),
        )
        self.records.append(record)
        return record


def passes(rows: int) -> list[tuple[int, int]]:
    """(first row, rows of it already evaluated) of each pass over ``rows`` rows, :data:`EVAL_ROWS` at most.

    Every pass has the same number of rows, the last one too: it overlaps the one before. A short pass runs other
    kernels (one row: a matrix-vector product) whose floats can differ in the last bit, and metrics.json is hashed.
    """
    if rows <= EVAL_ROWS:
        return [(0, 0)]
    return [(min(start, rows - EVAL_ROWS), start - min(start, rows - EVAL_ROWS)) for start in range(0, rows, EVAL_ROWS)]


def eval_logits(
    model: torch.nn.Module, x: torch.Tensor, rows: torch.Tensor, classes: int | None = None
) -> npt.NDArray[np.float64]:
    """The eval-mode logits of ``x[rows]`` as float64 on the CPU, a pass of :func:`passes` at a time, checked by
    :func:`check_logits` (their width against ``classes`` where it is given)."""
    was_training = model.training
    model.eval()
    out: npt.NDArray[np.float64] | None = None  # filled a pass at a time: no list of parts to concatenate
    try:
        with torch.no_grad():
            for first, done in passes(len(rows)):
                logits = _checked_scores(model(x[rows[first : first + EVAL_ROWS]]))[done:].to("cpu").numpy()
                if out is None:
                    out = np.empty((len(rows), logits.shape[1]), dtype=np.float64)
                out[first + done : first + done + len(logits)] = logits
    finally:
        model.train(was_training)
    if out is None:
        return np.empty((0, 0), dtype=np.float64)
    check_logits(out, classes)
    return out


def _checked_scores(scored: object) -> torch.Tensor:
    """The module's output is served as ONNX's ``tensor(float) [rows, classes]``: one of float64 (or float16)
    trained, and every artifact and the registry claim were written before loading the model refused it."""
    if not isinstance(scored, torch.Tensor) or scored.dtype != torch.float32 or scored.ndim != 2:
        what = f"a {scored.dtype} tensor of shape {list(scored.shape)}" if isinstance(scored, torch.Tensor) else None
        raise TrainingError(
            f"the model returns {what or 'a ' + type(scored).__name__}; expected a torch.float32 tensor of "
            "[rows, n_classes] logits (the feature matrix is float32, and so is the served model's output)"
        )
    return scored


def check_logits(logits: npt.NDArray[np.float64], classes: int | None) -> None:
    """Refuse logits no metric or served model can use, while training, before the model's files are written.

    A plug-in's module of the wrong output width trained (cross-entropy accepts any width above the largest class)
    and failed only when the registered model was loaded, after every artifact and the registry claim were written.
    A NaN or +inf logit (the weights blown up by the last step, whose loss was still finite) made the held-out
    log-loss NaN, which no JSON record can hold: an internal error. A -inf logit gives the class probability 0,
    which the metrics clip, and is kept.
    """
    if classes is not None and logits.shape[1] != classes:
        raise TrainingError(
            f"the model gives {logits.shape[1]} logit(s) per row; expected {classes}, one per class of the target "
            "(a plug-in's module must return [rows, n_classes] logits: ModelSpec.n_classes)"
        )
    bad = np.isnan(logits) | np.isposinf(logits)
    if bad.any():
        raise TrainingError(
            f"the model's logits on the held-out rows hold {int(np.count_nonzero(bad))} NaN or +inf value(s); "
            "expected finite logits: training diverged (lower LEARNING_RATE, set STANDARDIZE=true) or the model "
            "computes a NaN"
        )


def held_out_figures(
    model: torch.nn.Module, x: torch.Tensor, rows: torch.Tensor, labels: Labels, classes: int | None = None
) -> tuple[float, float]:
    """(log-loss, accuracy) of ``model`` on ``x[rows]``, computed in float64 like the final held-out metrics."""
    logits = eval_logits(model, x, rows, classes)
    accuracy = float((logits.argmax(axis=1) == labels).mean())
    # The log-probabilities of the labels alone, the logits shifted and exponentiated in place (the label's
    # column taken first): the same floats as the whole log-softmax gave, without four copies of the logits
    # (64 MiB each at 4M held-out rows, at the end of every epoch).
    shifted = logits
    shifted -= shifted.max(axis=1, keepdims=True)
    at_label = np.take_along_axis(shifted, labels[:, None], axis=1)[:, 0]
    log_sum = np.log(np.exp(shifted, out=shifted).sum(axis=1))
    picked = np.maximum(at_label - log_sum, np.log(1e-15))
    return float(-picked.mean()), accuracy


def write_epoch_log(out_dir: str, recorder: EpochRecorder) -> None:
    """Write ``logs/epochs.json`` of ``recorder`` into the training's output directory."""
    path = local_path(out_dir, EPOCH_LOG)
    with open(path, "wb") as handle:
        handle.write(epochs_bytes(recorder.started_ms, recorder.records))
