"""Held-out classification metrics in numpy float64, so they are a pure function of the predictions."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

Probabilities = npt.NDArray[np.float64]
Labels = npt.NDArray[np.int64]


def classification_metrics(probs: Probabilities, labels: Labels, n_classes: int) -> dict[str, float]:
    """accuracy, macro-F1, log-loss, majority-class baseline and (binary only) ROC-AUC."""
    predicted = probs.argmax(axis=1)
    f1s = []
    for c in range(n_classes):
        tp = float(((predicted == c) & (labels == c)).sum())
        fp = float(((predicted == c) & (labels != c)).sum())
        fn = float(((predicted != c) & (labels == c)).sum())
        f1s.append(0.0 if tp == 0 else 2 * tp / (2 * tp + fp + fn))
    accuracy = float((predicted == labels).mean())
    # One held-out-sized array at a time beside ``probs`` (8 bytes a row each: 32 MiB at 4M held-out rows); the
    # label's probability clipped and logged in place.
    del predicted
    picked = np.take_along_axis(probs, labels[:, None], axis=1)[:, 0]
    log_loss = float(-np.log(np.clip(picked, 1e-15, 1.0, out=picked), out=picked).mean())
    del picked
    counts = np.bincount(labels, minlength=n_classes)
    metrics = {
        "accuracy": accuracy,
        "macro_f1": float(np.mean(f1s)),
        "log_loss": log_loss,
        "majority_class_accuracy": float(counts.max() / len(labels)),
    }
    if n_classes == 2:
        metrics["roc_auc"] = roc_auc(probs[:, 1], labels)
    return metrics


def roc_auc(scores: npt.NDArray[np.float64], labels: Labels) -> float:
    """Mann-Whitney U with average ranks for ties; 0.5 when one class is absent from the held-out rows."""
    positives = int((labels == 1).sum())
    negatives = len(labels) - positives
    if positives == 0 or negatives == 0:
        return 0.5
    order = np.argsort(scores, kind="stable")
    sorted_scores = scores[order]
    ranks = np.empty(len(scores), dtype=np.float64)
    start = 0
    while start < len(scores):
        end = start
        while end + 1 < len(scores) and sorted_scores[end + 1] == sorted_scores[start]:
            end += 1
        ranks[order[start : end + 1]] = (start + end) / 2.0 + 1.0
        start = end + 1
    rank_sum = float(ranks[labels == 1].sum())
    return (rank_sum - positives * (positives + 1) / 2.0) / (positives * negatives)
