"""The export's validation compares every logit, a NaN in the export included."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ml8s.errors import ExportValidationError
from ml8s.pipeline.export import pass_difference

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
