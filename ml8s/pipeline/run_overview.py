"""A one-page overview of a training run, as HTML: what the training workflow shows in its Flyte Deck.

:func:`collect_overview` reads what a completed run recorded (its manifest, ``metrics.json`` and
``features/feature_schema.json``) and where it sits in its chain; :func:`render_overview_html` turns that
into a page with every value escaped. Nothing here writes, and the page holds no time: the same run,
gate answer and chain position give the same bytes.
"""

from __future__ import annotations

import html
from collections import Counter

from pydantic import BaseModel, ConfigDict

from ml8s.context.run import RunContext
from ml8s.contract import FeatureSchema, Manifest, Metrics, layout, load
from ml8s.contract.epochs import EpochRecord, read_epochs
from ml8s.errors import ObjectTooLargeError
from ml8s.identity.variables import JsonValue
from ml8s.pipeline.chain_commit import ChainCommit
from ml8s.pipeline.curves import curves_svg
from ml8s.pipeline.gate import GateDecision
from ml8s.store import Store

_SHOWN_FEATURES = 50  # a page, not a dump: the schema file has them all


class FeatureSummary(BaseModel):
    """The feature schema in brief."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    count: int
    kinds: dict[str, int]
    names: tuple[str, ...]
    target_column: str
    classes: tuple[str, ...]
    rows_read: int
    rows_train: int
    rows_test: int
    missing_target_dropped: int
    dropped_columns: dict[str, str]


class RunOverview(BaseModel):
    """Everything the page shows."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    run_id: str
    full_config_hash: str
    data_fingerprint: str
    artifact_root: str
    canonical_config: dict[str, str]
    gate: str
    forced: str
    metrics: dict[str, float | int]
    features: FeatureSummary
    chain: ChainCommit
    mlflow: dict[str, str]
    drift: tuple[str, ...] | None = None  # a warm start's drift report, one line a finding (None: a cold start)
    epochs: tuple[EpochRecord, ...] = ()  # logs/epochs.json: the curves (its times are not shown)


def collect_overview(ctx: RunContext, store: Store, decision: GateDecision, commit: ChainCommit) -> RunOverview:
    """Read the completed run's records from ``store`` (its manifest, metrics and feature schema)."""
    manifest = load(ctx.uri(layout.MANIFEST), ctx.read_record(store, layout.MANIFEST), Manifest)
    metrics = load(ctx.uri(layout.METRICS), ctx.read_record(store, layout.METRICS), Metrics)
    schema_bytes = ctx.read_record(store, layout.FEATURE_SCHEMA, max_bytes=layout.SCHEMA_MAX_BYTES)
    schema = load(ctx.uri(layout.FEATURE_SCHEMA), schema_bytes, FeatureSchema)
    drift = ctx.spec.lineage.drift if ctx.spec.lineage is not None else None  # measured at bootstrap
    audit = manifest.force_rerun
    forced = ""
    if audit is not None:  # this execution's, or an earlier one's that the gate returned
        outcome = "every artifact reproduced" if audit.reproduced else f"changed: {', '.join(audit.changed) or '-'}"
        when = "this execution" if decision.force_rerun else "an earlier execution"
        forced = f"{when} recomputed {', '.join(audit.recomputed) or '-'}; {outcome}"
    return RunOverview(
        run_id=ctx.run_id,
        full_config_hash=ctx.identity.full_config_hash,
        data_fingerprint=ctx.identity.data_fingerprint,
        artifact_root=ctx.artifact_root,
        canonical_config={k: _text(v) for k, v in sorted(ctx.identity.canonical_config.items())},
        gate="hit: the run had completed, its manifest was returned" if decision.completed else "miss: Steps 2-7 ran",
        forced=forced,
        metrics=dict(sorted(metrics.scalars().items())),
        features=FeatureSummary(
            count=len(schema.features),
            kinds=dict(sorted(Counter(f.kind for f in schema.features).items())),
            names=tuple(f.name for f in schema.features),
            target_column=schema.target.column,
            classes=tuple(schema.target.classes),
            rows_read=schema.rows.read,
            rows_train=schema.rows.train,
            rows_test=schema.rows.test,
            missing_target_dropped=schema.rows.missing_target_dropped,
            dropped_columns=dict(sorted(schema.dropped_columns.items())),
        ),
        chain=commit,
        mlflow=dict(sorted(manifest.mlflow.items())),
        drift=(tuple(drift.lines()) if drift.drifted else ("none found",)) if drift is not None else None,
        epochs=_epochs(ctx, store),
    )


def _epochs(ctx: RunContext, store: Store) -> tuple[EpochRecord, ...]:
    """The run's per-epoch log; none when it is missing or unreadable (a log: the page is an overview)."""
    key = ctx.key(layout.EPOCH_LOG)
    if not store.exists(key):
        return ()
    try:
        return tuple(read_epochs(ctx.read_record(store, layout.EPOCH_LOG))[1])
    except (ValueError, ObjectTooLargeError):
        return ()


def render_overview_html(overview: RunOverview) -> str:
    """The overview as one HTML fragment (sections: identity, gate, metrics, features, chain, MLflow)."""
    o, f, c = overview, overview.features, overview.chain
    more = f.count - _SHOWN_FEATURES
    shown = ", ".join(f.names[:_SHOWN_FEATURES]) + (f" … ({more} more)" if more > 0 else "")
    sections = [
        f"<h2>ml8s run {_e(o.run_id)}</h2><p><code>{_e(o.artifact_root)}</code></p>",
        _table(
            "Identity",
            {"RUN_ID": o.run_id, "FULL_CONFIG_HASH": o.full_config_hash, "DATA_FINGERPRINT": o.data_fingerprint},
        ),
        _table("Configuration (canonical)", o.canonical_config),
        _table("Idempotence gate", {"gate": o.gate, **({"FORCE_RERUN": o.forced} if o.forced else {})}),
        _table("Held-out metrics", {k: _number(v) for k, v in o.metrics.items()}),
        *([f"<h3>Training curves (per epoch)</h3>{curves_svg(o.epochs)}"] if o.epochs else []),
        _table(
            "Features",
            {
                "features": f"{f.count} ({', '.join(f'{n} {k}' for k, n in f.kinds.items())})",
                "names": shown,
                "target": f"{f.target_column}: {', '.join(f.classes)}",
                "rows": f"{f.rows_read} read, {f.missing_target_dropped} without a target dropped, "
                f"{f.rows_train} train, {f.rows_test} test",
                **{f"dropped {name}": why for name, why in f.dropped_columns.items()},
            },
        ),
        _table(
            "Model chain",
            {
                "chain": c.chain_name,
                "version": f"v{c.counter} ({c.semver})",
                "block": c.block_hash,
                "content": c.content_hash,
                "global step": str(c.global_step),
                "directory": c.version_dir,
            },
        ),
        _table("MLflow", o.mlflow),
    ]
    if o.drift is not None:
        sections.insert(
            6 if o.epochs else 5,
            _table("Drift of the new generations", {str(n + 1): line for n, line in enumerate(o.drift)}),
        )
    return "\n".join(sections)


def _table(title: str, rows: dict[str, str]) -> str:
    body = "".join(f"<tr><th align='left'>{_e(k)}</th><td><code>{_e(v)}</code></td></tr>" for k, v in rows.items())
    return f"<h3>{_e(title)}</h3><table border='1' cellpadding='4' style='border-collapse:collapse'>{body}</table>"


def _e(text: str) -> str:
    return html.escape(text, quote=True)


def _number(value: float | int) -> str:
    return str(value) if isinstance(value, int) else f"{value:.6f}"


def _text(value: JsonValue) -> str:
    """A canonical config value as a user would write it (lists comma-joined, booleans lower-case)."""
    if isinstance(value, list):
        return ",".join(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    return "" if value is None else str(value)
