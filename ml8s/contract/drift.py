"""A warm start's drift report: how its new generations differ from what the lineage's frozen features
were fitted on (docs/continuous.md, "Drift"). Recorded in ``training_metadata.json`` (``drift``, a warm
start's only) and so on the chain; deterministic: counts and rounded shares of the data bytes only.
"""

from __future__ import annotations

from typing import Literal

from ml8s.contract._base import ContractModel


class ColumnDrift(ContractModel):
    """A column whose missing share or value range moved beyond the documented bound."""

    column: str
    what: Literal["missing_share", "mean"]
    fitted: float  # what the lineage's features were fitted on (a share, or the training mean)
    now: float  # the new generations' (a share, or their mean; NaN never: an all-missing column has no mean)
    bound: float  # the documented bound the move exceeded (a share, or training standard deviations)
    message: str


class DriftReport(ContractModel):
    """The new generations' drift; ``drifted`` is whether any check found something."""

    generations: list[int]
    rows: int
    new_categories: dict[str, dict[str, int]]  # column -> unseen value -> rows holding it
    rows_with_unknown: int  # rows with at least one unseen category (their one-hot features all zero)
    columns: list[ColumnDrift]
    drifted: bool

    def lines(self) -> list[str]:
        """One line per finding, for logs, the run summary, the Deck and ``ml8s chain log``."""
        found = [
            f"column {column!r}: {sum(values.values())} row(s) hold {len(values)} unseen value(s) "
            + ", ".join(f"{value!r} ({count})" for value, count in sorted(values.items())[:5])
            + (" ..." if len(values) > 5 else "")
            for column, values in sorted(self.new_categories.items())
        ]
        if self.rows_with_unknown:
            found.append(f"{self.rows_with_unknown} of {self.rows} row(s) map to an unknown category")
        return found + [column.message for column in self.columns]
