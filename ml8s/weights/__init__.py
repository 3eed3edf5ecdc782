"""Weights payloads on the chain (docs/serving.md): FULL anchors and sparse DELTAs committed on the parent's
weights, rebuilt hop by hop and checked against the weights hash every block records.

Separate from ``ml8s.chain`` because it needs torch: the chain, the verifier and a re-run's gate path stay
torch-free, and ``verify_chain(weights=weights_problems)`` adds the rebuild checks where torch is at hand.
"""

from __future__ import annotations

from ml8s.chain import WEIGHTS_DELTA, WEIGHTS_FULL
from ml8s.weights.check import weights_problems
from ml8s.weights.commit import WeightsMode, checkpoint_builder, commit_weights
from ml8s.weights.nan import first_nan
from ml8s.weights.rebuild import (
    VersionWeights,
    apply_hop,
    is_float_weights,
    load_full,
    load_tensors,
    rebuild_weights,
    weights_file,
)

__all__ = [
    "WEIGHTS_DELTA",
    "WEIGHTS_FULL",
    "VersionWeights",
    "WeightsMode",
    "apply_hop",
    "checkpoint_builder",
    "commit_weights",
    "first_nan",
    "is_float_weights",
    "load_full",
    "load_tensors",
    "rebuild_weights",
    "weights_file",
    "weights_problems",
]
