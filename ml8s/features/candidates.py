"""Which features a column makes: every one-hot category of a categorical column (its kept categories, the
rest ``__other__``), or a numeric or boolean column's values and, where some are missing, its indicator.

Preparing the rows names them (their names must not collide) and fitting makes them: both ask here.
"""

from __future__ import annotations

from ml8s.data.dataset import Column
from ml8s.inference.rules import MAX_CATEGORIES, category_counts, present_labels

__all__ = ["feature_names", "kept_categories"]


def feature_names(column: Column) -> list[tuple[str, str, str]]:
    """``(feature name, source column, how it is made)`` of every feature fitting makes of ``column``
    (:func:`~ml8s.features.rules.fit_rules`, before MAX_FEATURES)."""
    if column.kind == "categorical":
        categories = present_labels(column, kept_categories(column))
        return [(f"{column.name}={c}", column.name, f"one-hot of its value {c!r}") for c in categories]
    made = [(column.name, column.name, "its values")]
    if column.missing().any():
        made.append((f"{column.name}__missing", column.name, "missing-value indicator"))
    return made


def kept_categories(column: Column) -> list[str]:
    """The MAX_CATEGORIES most frequent values (ties by text), sorted: the rest share ``__other__``."""
    counts = category_counts(column)
    return sorted(sorted(counts, key=lambda c: (-counts[c], c))[:MAX_CATEGORIES])
