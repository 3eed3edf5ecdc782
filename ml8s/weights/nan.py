"""NaN weights: a model with one predicts NaN for every row, so a producer's tensors holding one are refused
before they are committed (as ``ml8s chain commit --payload`` refuses such a file, whether it goes as a FULL or
a DELTA), and a follower refuses to serve a version whose rebuilt weights hold one (a chain written by an
older ml8s, or by hand). Infinities pass, as at ``chain commit``: a mask buffer holds -inf by design.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from ml8s.weights.rebuild import FLOAT_DTYPES

NAN_CHECKED = (*FLOAT_DTYPES, torch.float64)  # the dtypes chain commit checks in a file (F32, F16, BF16, F64)
_CHUNK = 1 << 22  # elements per mask: a bounded bool buffer whatever a tensor's size


def first_nan(tensors: Mapping[str, torch.Tensor]) -> tuple[str, int] | None:
    """The first NaN weight in name order, as (tensor name, flat element index); None when there is none."""
    for name in sorted(tensors):
        tensor = tensors[name]
        if tensor.dtype not in NAN_CHECKED:
            continue
        flat = tensor.reshape(-1)
        for start in range(0, flat.numel(), _CHUNK):
            mask = torch.isnan(flat[start : start + _CHUNK])
            if bool(mask.any()):
                return name, start + int(torch.argmax(mask.to(torch.uint8)))
    return None
