"""A warm start's drift report (``ml8s.contract.drift``): its new generations against the lineage's frozen
features, computed at bootstrap from the data bytes, before anything is written.

The bounds (docs/continuous.md, "Drift"):

- a categorical value the features never saw is reported with its row count; a row holding one (in a column
  with no ``__other__`` feature) maps to all-zero one-hots: it counts as mapped to unknown;
- a column's missing share moved by more than ``MISSING_SHARE_BOUND`` (absolute) from the share the features
  were fitted on (0 for a column with no missing-value feature; else read from that feature's recorded
  training variance p(1 - p), the root <= 0.5);
- a numeric or boolean column's mean (over its present values) moved by more than ``MEAN_BOUND_SIGMAS``
  training standard deviations (the square root of its recorded training variance) from the training mean
  its missing values are imputed with.
"""

from __future__ import annotations

import math

import numpy as np

from ml8s.chain import ChainVersion, ChainVersions
from ml8s.contract import TrainingMetadata, layout, parse
from ml8s.contract._parse import Invalid
from ml8s.contract.drift import ColumnDrift, DriftReport
from ml8s.contract.training_state import Generation
from ml8s.data.dataset import Column
from ml8s.data.fingerprint import Fingerprint
from ml8s.errors import LineageDataError, LineageDriftError, PredictionInputError
from ml8s.inference import MISSING, OTHER, FeatureRule, RawTransform
from ml8s.inference.transform import InputColumn
from ml8s.lineage.columns import has_label, typed_columns

MISSING_SHARE_BOUND = 0.2
MEAN_BOUND_SIGMAS = 1.0
ADOPT = (
    "to adopt the new data's schema, start a new lineage: a cold start (WARM_START='') on every generation "
    "fits new features (categories, statistics, columns) from all of them (docs/continuous.md, 'Adopting a "
    "changed schema')"
)


def drift_report(generations: list[Generation], fingerprint: Fingerprint, transform: RawTransform) -> DriftReport:
    """The report of ``generations`` (the new ones of a warm start) against ``transform``'s fitted features.

    Raises:
        LineageDataError: a cell does not fit its column's kind (as encoding would).
    """
    tokens = {token for generation in generations for token in generation.files}
    try:  # column by column, as the rows with a label would be read
        columns, rows = typed_columns(fingerprint, tokens, transform, has_label(transform.target_column))
    except PredictionInputError as exc:
        raise LineageDataError(f"generations {[g.index for g in generations]}: {exc.message}") from exc
    by_source: dict[str, list[FeatureRule]] = {}
    for rule in transform.rules:
        by_source.setdefault(rule.source, []).append(rule)
    new_categories: dict[str, dict[str, int]] = {}
    unknown = np.zeros(rows, dtype=bool)
    drifts: list[ColumnDrift] = []
    for column in sorted(transform.inputs, key=lambda c: c.name):
        typed, rules = columns[column.name], by_source.get(column.name, [])
        if column.kind == "categorical":
            unseen, hits = _unseen(column, typed, rules)
            if unseen:
                new_categories[column.name] = unseen
                unknown |= hits
        drifts += _moved(column, typed, rules)
    return DriftReport(
        generations=sorted(g.index for g in generations),
        rows=rows,
        new_categories=new_categories,
        rows_with_unknown=int(unknown.sum()),
        columns=drifts,
        drifted=bool(new_categories or drifts),
    )


def check_drift(report: DriftReport | None, policy: str, where: str) -> None:
    """DRIFT_POLICY=fail: LineageDriftError naming every finding and how to adopt a changed schema."""
    if report is None or not report.drifted or policy != "fail":
        return
    raise LineageDriftError(
        f"DRIFT_POLICY=fail: the new generation(s) {report.generations} of the warm start from {where} drifted "
        f"from the lineage's features: {'; '.join(report.lines())}. Expected data the features were fitted on "
        f"(or DRIFT_POLICY=warn to train anyway and record the report); {ADOPT}"
    )


def _unseen(column: InputColumn, typed: Column, rules: list[FeatureRule]) -> tuple[dict[str, int], np.ndarray]:
    known = set(column.categories)
    bucketed = any(rule.category == OTHER for rule in rules)  # an unseen value lands in __other__, not nowhere
    names = typed.category_list()  # the cells are codes into these (-1: missing)
    codes = np.asarray(typed.values, dtype=np.int64)
    unseen = [i for i, name in enumerate(names) if name not in known]
    hits = np.isin(codes, unseen) if unseen else np.zeros(len(codes), dtype=bool)
    per_code = np.bincount(codes[hits], minlength=len(names)) if unseen else np.zeros(len(names), dtype=np.int64)
    counts = {names[i]: int(per_code[i]) for i in unseen if per_code[i]}
    return dict(sorted(counts.items())), (hits if not bucketed else np.zeros(len(codes), dtype=bool))


def _moved(column: InputColumn, typed: Column, rules: list[FeatureRule]) -> list[ColumnDrift]:
    found: list[ColumnDrift] = []
    missing = typed.missing()
    now = float(missing.mean()) if len(missing) else 0.0
    fitted = _fitted_missing_share(rules)
    if abs(now - fitted) > MISSING_SHARE_BOUND:
        found.append(
            ColumnDrift(
                column=column.name,
                what="missing_share",
                fitted=round(fitted, 6),
                now=round(now, 6),
                bound=MISSING_SHARE_BOUND,
                message=f"column {column.name!r}: {now:.1%} of its values are missing (fitted on {fitted:.1%}; "
                f"bound +-{MISSING_SHARE_BOUND:.0%})"
                + ("; its rows get the training mean and no missing-value feature" if fitted == 0 else ""),
            )
        )
    value_rule = next((r for r in rules if r.kind in ("numeric", "boolean") and r.impute is not None), None)
    present = typed.values.astype(np.float64)[~missing] if column.kind in ("numeric", "boolean") else None
    if value_rule is None or present is None or not len(present) or value_rule.impute is None:
        return found
    with np.errstate(over="ignore"):  # values near float64's limit sum to inf: reported as a mean of inf, no warning
        mean = float(present.mean())
    std = math.sqrt(max(value_rule.train_variance or 0.0, 0.0))
    if abs(mean - value_rule.impute) > MEAN_BOUND_SIGMAS * std:
        found.append(
            ColumnDrift(
                column=column.name,
                what="mean",
                fitted=round(value_rule.impute, 6),
                now=round(mean, 6),
                bound=MEAN_BOUND_SIGMAS,
                message=f"column {column.name!r}: mean {mean:.6g}, fitted on {value_rule.impute:.6g} (standard "
                f"deviation {std:.6g}; bound {MEAN_BOUND_SIGMAS:g})",
            )
        )
    return found


def _fitted_missing_share(rules: list[FeatureRule]) -> float:
    """The training share of missing values, from the variance p(1 - p) of the feature that marks them."""
    marker = next((r for r in rules if r.kind == "indicator" or (r.kind == "onehot" and r.category == MISSING)), None)
    if marker is None or marker.train_variance is None:
        return 0.0
    return (1 - math.sqrt(max(0.0, 1 - 4 * marker.train_variance))) / 2


def drift_lines(chain: ChainVersions, version: ChainVersion) -> list[str] | None:
    """What ``ml8s chain log`` shows of a version's drift: its report's findings (``[]`` when none), None for
    a version whose training metadata records no report (a cold start, an external commit)."""
    if layout.PAYLOAD_TRAINING_METADATA not in {f.name for f in version.header.files}:
        return None
    try:
        data = chain.fetch_payload(version, layout.PAYLOAD_TRAINING_METADATA)
        drift = parse(layout.TRAINING_METADATA, data, TrainingMetadata).drift
    except Invalid as exc:
        return [f"unreadable training metadata: {exc}"]
    return None if drift is None else drift.lines()
