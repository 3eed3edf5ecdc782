"""The export's validation compares every logit, a NaN in the export included."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ml8s.errors import ExportValidationError, TrainingError
from ml8s.pipeline.export import compare_logits, disagreement, pass_difference

NAN, INF = float("nan"), float("inf")


def _rows(*values: float) -> np.ndarray[tuple[int, int], np.dtype[np.float32]]:
    return np.array([values], dtype=np.float32)


def test_a_nan_in_the_export_where_torch_gives_a_number_is_a_disagreement() -> None:
    # max(0.0, nan) is 0.0: the NaN pass was dropped and the export recorded as agreeing (max abs diff 0)
    with pytest.raises(ExportValidationError, match=r"model/model.onnx gives NaN for 1 logit\(s\) where the torch"):
        pass_difference(_rows(NAN, 0.5), _rows(0.25, 0.5), "onnx")


def test_finite_and_equal_infinite_logits_are_compared_as_before() -> None:
    assert pass_difference(_rows(0.5, 1.0), _rows(0.5, 1.25), "onnx") == 0.25
    assert math.isnan(pass_difference(_rows(-INF, 1.0), _rows(-INF, 1.0), "onnx"))  # max() drops it, as always
    assert pass_difference(_rows(INF, 1.0), _rows(1.0, 1.0), "onnx") == INF  # over the tolerance: refused


def test_logits_too_large_for_the_tolerance_are_a_diverged_training_not_an_export_failure() -> None:
    # unscaled features (1e6) at LEARNING_RATE=1: logits of 3.48e6 whose float32 rounding (0.25, 2 ulps) was
    # reported as 'model/model.onnx disagrees with the torch model'
    error = disagreement("onnx", 80, 0.25, 3.48e6, (276077.65625, 99632.6640625, 158282.390625), 0.0)
    assert type(error) is TrainingError
    assert error.message == (
        "training diverged: the trained model's logits on the 80 held-out rows reach 3.48e+06 (training loss 276078 "
        "at epoch 1, 158282 at epoch 3), so large that float32 rounding alone exceeds the export's tolerance: "
        "model/model.onnx differs by 2.500e-01 (7.2e-08 of the largest logit), expected <= 1e-04; expected a model "
        "that converged (a lower LEARNING_RATE, STANDARDIZE=true)"
    )
    # a difference the size of the logits themselves is the export's
    error = disagreement("onnx", 80, 0.25, 1.25, (0.7, 0.6), 0.25)
    assert type(error) is ExportValidationError
    assert error.message == (
        "model/model.onnx disagrees with the torch model on 80 held-out rows: max abs logit difference 2.500e-01, "
        "expected <= 1e-04"
    )


def test_a_real_disagreement_beside_a_huge_logit_is_the_export_s_not_a_diverged_training() -> None:
    # one row's logit of 1e6 made every difference up to 10 look like float32 rounding: an export 5 off on a row
    # whose logit is 0.01 was reported as 'training diverged'
    huge = (_rows(1e6 + 0.25, 0.5), _rows(1e6, 0.5))  # 0.25 on 1e6: rounding of that logit
    wrong = (_rows(5.01, 0.5), _rows(0.01, 0.5))  # 5 on 0.01: the export's
    with pytest.raises(ExportValidationError, match=r"max abs logit difference 5\.000e\+00, expected <= 1e-04"):
        compare_logits([huge, wrong], "onnx", 2, (0.7, 0.6))
    with pytest.raises(ExportValidationError, match="max abs logit difference 5"):  # in one pass alike
        compare_logits([(_rows(1e6 + 0.25, 5.01), _rows(1e6, 0.01))], "onnx", 1, (0.7, 0.6))
    with pytest.raises(TrainingError, match=r"logits on the 2 held-out rows reach 1e\+06"):  # rounding alone
        compare_logits([huge, (_rows(0.01, 0.5), _rows(0.01, 0.5))], "onnx", 2, (0.7, 0.6))
    with pytest.raises(ExportValidationError):  # a finite logit against torch's infinity is the export's
        compare_logits([huge, (_rows(3e38, 0.5), _rows(INF, 0.5))], "onnx", 2, (0.7, 0.6))
    assert compare_logits([(_rows(1e6, 0.5), _rows(1e6, 0.5))], "onnx", 1, ()) == 0.0
