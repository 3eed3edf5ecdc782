"""The trained model's held-out logits are checked while training, before any model file is written."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from ml8s.contract import ModelSpec
from ml8s.errors import TrainingError
from ml8s.identity.model_code import parse_model_type
from ml8s.modeling.plugins import code_identity
from ml8s.modeling.registry import family_for
from ml8s.training.epochs import EpochRecorder
from ml8s.training.fit import predict_proba


class _Fixed(torch.nn.Module):
    """Logits ``out`` for every row (a plug-in's module with a bug, or weights blown up by the last step)."""

    def __init__(self, out: list[float]) -> None:
        super().__init__()
        self.out = torch.tensor([out], dtype=torch.float32)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out.expand(len(x), -1)


def _held_out() -> tuple[torch.Tensor, torch.Tensor, np.ndarray[tuple[int], np.dtype[np.int64]]]:
    x = torch.zeros((6, 3), dtype=torch.float32)
    return x, torch.tensor([1, 3, 5]), np.array([0, 1, 0], dtype=np.int64)


def test_a_model_of_the_wrong_output_width_is_refused_after_its_first_epoch() -> None:
    # five logits for two classes: cross-entropy trains it, and the served model failed only once registered
    recorder = EpochRecorder(_held_out(), classes=2)
    with pytest.raises(TrainingError, match=r"gives 5 logit\(s\) per row; expected 2, one per class"):
        recorder.end_epoch(_Fixed([0.1, 0.2, 0.3, 0.4, 0.5]), 0.7)
    x, rows, _ = _held_out()
    with pytest.raises(TrainingError, match="expected 2"):
        predict_proba(_Fixed([0.1, 0.2, 0.3]), x, rows, 2)


@pytest.mark.parametrize("logit", [float("nan"), float("inf")])
def test_nan_or_infinite_held_out_logits_are_a_training_error(logit: float) -> None:
    # before: the held-out log-loss was NaN and writing it an INTERNAL_ERROR (JSON holds no NaN)
    with pytest.raises(TrainingError, match=r"hold 3 NaN or \+inf value\(s\); expected finite logits"):
        EpochRecorder(_held_out(), classes=2).end_epoch(_Fixed([0.0, logit]), 0.7)
    x, rows, _ = _held_out()
    with pytest.raises(TrainingError, match="NaN or"):
        predict_proba(_Fixed([logit, 0.0]), x, rows, 2)


def test_a_minus_infinite_logit_is_a_probability_of_zero_and_kept() -> None:
    x, rows, labels = _held_out()
    record = EpochRecorder((x, rows, labels), classes=2).end_epoch(_Fixed([0.0, float("-inf")]), 0.7)
    assert record.held_out_accuracy == pytest.approx(2 / 3)
    np.testing.assert_array_equal(predict_proba(_Fixed([0.0, float("-inf")]), x, rows, 2), [[1.0, 0.0]] * 3)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16])
def test_logits_that_are_not_float32_are_a_training_error(dtype: torch.dtype) -> None:
    # float64 logits trained, then the registered ONNX model (tensor(double)) was refused when loaded
    x, rows, labels = _held_out()
    model = _Fixed([0.1, 0.2])
    model.out = model.out.to(dtype)
    with pytest.raises(TrainingError, match=rf"returns a {dtype} tensor of shape \[3, 2\]; expected a torch.float32"):
        EpochRecorder((x, rows, labels), classes=2).end_epoch(model, 0.7)


def test_a_plugin_module_without_parameters_is_a_training_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the optimizer refused it with a raw ValueError: an INTERNAL_ERROR
    (tmp_path / "ml8s_no_weights.py").write_text("import torch\n\ndef build(spec):\n    return torch.nn.Identity()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    model_type = "plugin:ml8s_no_weights:build"
    plugin = parse_model_type(model_type)
    assert plugin is not None
    family = family_for(model_type, code_identity(plugin))
    spec = ModelSpec(model_type=model_type, n_features=3, n_classes=2, hidden_units=4, hidden_layers=1)
    with pytest.raises(TrainingError, match="built a Identity without parameters; expected a module with weights"):
        family.build(spec)
