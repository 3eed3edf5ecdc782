"""The training run's overview page (the training workflow's Flyte Deck): what it reads, what it shows,
escaped, and the same bytes for the same run."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import make_context, write_small_churn

from ml8s.context.run import RunContext
from ml8s.contract import (
    ArtifactRef,
    FeatureSchema,
    IndicatorFeature,
    Manifest,
    Metrics,
    NumberFeature,
    OneHotFeature,
    RerunAudit,
    RowCounts,
    SplitRecord,
    TargetRecord,
    layout,
)
from ml8s.errors import IntegrityError, NotFoundError
from ml8s.pipeline.chain_commit import ChainCommit
from ml8s.pipeline.gate import GateDecision
from ml8s.pipeline.run_overview import collect_overview, render_overview_html

COMMIT = ChainCommit(
    chain_name="churn<model>",
    counter=3,
    semver="1.0.2",
    block_hash="b" * 64,
    content_hash="c" * 64,
    version_dir="versions/v0000000003_1.0.2_bbbbbbbbbbbb",
    global_step=12,
)


def _schema(extra_features: int = 0) -> FeatureSchema:
    features = [
        NumberFeature(kind="numeric", name="tenure", source="tenure", impute=30.5, train_variance=1.0),
        IndicatorFeature(kind="indicator", name="tenure__missing", source="tenure", train_variance=0.1),
        OneHotFeature(kind="onehot", name="plan=<b>pro</b>", source="plan", category="<b>pro</b>", train_variance=0.2),
        *(
            NumberFeature(kind="numeric", name=f"x{i:03d}", source=f"x{i:03d}", impute=0.0, train_variance=1.0)
            for i in range(extra_features)
        ),
    ]
    return FeatureSchema(
        schema_version=1,
        features=features,
        target=TargetRecord(column="churned", classes=["no", "yes"], encoded_as="__target__"),
        split=SplitRecord(column="__split__", train=0, test=1),
        dropped_columns={"customer_id": "identifier-like"},
        rows=RowCounts(read=600, missing_target_dropped=2, kept=598, train=478, test=120),
        rows_per_file={"part-000.csv": 300, "part-001.csv": 300},
    )


def _store_run(ctx: RunContext, *, forced: bool, extra_features: int = 0) -> None:
    """The three records the overview reads, as a completed run stores them."""
    store = ctx.open_store()
    metrics = Metrics(
        accuracy=0.875,
        final_train_loss=0.31,
        log_loss=0.42,
        macro_f1=0.8,
        majority_class_accuracy=0.7,
        roc_auc=0.9,
        test_rows=120,
        train_rows=478,
    )
    artifacts = {layout.METRICS: ArtifactRef(uri=ctx.uri(layout.METRICS), sha256="0" * 64, size=1)}
    audit = RerunAudit(
        reproduced=False,
        changed=(layout.MODEL_NATIVE,),
        previous_sha256={layout.MODEL_NATIVE: "1" * 64},
        recomputed=("snapshot", "features", "train", "export"),
    )
    manifest = Manifest(
        run_id=ctx.run_id,
        full_config_hash=ctx.identity.full_config_hash,
        data_fingerprint=ctx.identity.data_fingerprint,
        canonicalization_version=ctx.identity.canonicalization_version,
        artifact_root=ctx.artifact_root,
        artifacts=artifacts,
        mlflow={"model_name": "ml8s-model", "model_version": "4"},
        force_rerun=audit if forced else None,
    )
    writer = ctx.writer(store)
    writer.write_bytes(layout.METRICS, metrics.to_bytes(), "metrics")
    writer.write_bytes(layout.FEATURE_SCHEMA, _schema(extra_features).to_bytes(), "feature_schema")
    writer.write_bytes(layout.MANIFEST, manifest.to_bytes(), "manifest")


@pytest.fixture
def ctx(tmp_path: Path) -> RunContext:
    return make_context(write_small_churn(tmp_path / "data", rows=60), tmp_path / "root")


def test_the_page_shows_identity_gate_metrics_features_chain_and_mlflow(ctx: RunContext) -> None:
    _store_run(ctx, forced=False)
    page = render_overview_html(collect_overview(ctx, ctx.open_store(), GateDecision(completed=True), COMMIT))
    for shown in (
        f"ml8s run {ctx.run_id}",
        ctx.identity.full_config_hash,
        ctx.identity.data_fingerprint,
        ctx.artifact_root,
        "<code>churned</code>",  # TARGET_COLUMN in the canonical configuration
        "hit: the run had completed, its manifest was returned",
        "<th align='left'>accuracy</th><td><code>0.875000</code>",
        "<th align='left'>test_rows</th><td><code>120</code>",
        "3 (1 indicator, 1 numeric, 1 onehot)",
        "churned: no, yes",
        "600 read, 2 without a target dropped, 478 train, 120 test",
        "dropped customer_id",
        "v3 (1.0.2)",
        "b" * 64,
        "<th align='left'>model_version</th><td><code>4</code>",
    ):
        assert shown in page, shown
    assert "FORCE_RERUN" not in page


def test_a_forced_run_shows_its_audit(ctx: RunContext) -> None:
    _store_run(ctx, forced=True)
    store = ctx.open_store()
    page = render_overview_html(collect_overview(ctx, store, GateDecision(completed=False, force_rerun=True), COMMIT))
    assert "miss: Steps 2-7 ran" in page
    assert (
        "this execution recomputed snapshot, features, train, export; changed: model/model_native.safetensors" in page
    )
    earlier = render_overview_html(collect_overview(ctx, store, GateDecision(completed=True), COMMIT))
    assert "an earlier execution recomputed" in earlier


def test_every_value_is_escaped_and_the_page_is_deterministic(ctx: RunContext) -> None:
    _store_run(ctx, forced=False)
    overview = collect_overview(ctx, ctx.open_store(), GateDecision(completed=True), COMMIT)
    page = render_overview_html(overview)
    assert "plan=&lt;b&gt;pro&lt;/b&gt;" in page and "<b>pro</b>" not in page
    assert "churn&lt;model&gt;" in page and "churn<model>" not in page
    assert not re.search(r"<(?!/?(h2|h3|p|code|table|tr|th|td)\b)", page), "a tag the page does not write"
    assert render_overview_html(overview.model_validate_json(overview.model_dump_json())) == page


def test_long_feature_lists_are_cut(ctx: RunContext) -> None:
    _store_run(ctx, forced=False, extra_features=60)
    page = render_overview_html(collect_overview(ctx, ctx.open_store(), GateDecision(completed=True), COMMIT))
    assert "x046" in page and "x047" not in page and "(13 more)" in page


def test_missing_or_tampered_records_are_named_errors(ctx: RunContext) -> None:
    with pytest.raises(NotFoundError):
        collect_overview(ctx, ctx.open_store(), GateDecision(completed=True), COMMIT)
    _store_run(ctx, forced=False)
    path = Path(ctx.artifact_root.removeprefix("file://")) / layout.METRICS
    path.write_bytes(path.read_bytes().replace(b"0.875", b'"high"'))
    with pytest.raises(IntegrityError, match=r"metrics\.json"):
        collect_overview(ctx, ctx.open_store(), GateDecision(completed=True), COMMIT)


def _svg_points(page: str) -> dict[str, list[tuple[float, float]]]:
    """Each curve of the page's SVG (by its title) as (x, y) points; the SVG must parse as XML."""
    import xml.etree.ElementTree as ET

    (svg,) = re.findall(r"<svg.*?</svg>", page, re.S)
    root = ET.fromstring(svg)
    curves = {}
    for line in root.iter("{http://www.w3.org/2000/svg}polyline"):
        title = line.find("{http://www.w3.org/2000/svg}title")
        assert title is not None and title.text
        curves[title.text] = [(float(x), float(y)) for x, y in (p.split(",") for p in line.attrib["points"].split())]
    return curves


def test_the_page_draws_the_per_epoch_curves_without_times(ctx: RunContext) -> None:
    """logs/epochs.json becomes one curve per series, a point per epoch, lower loss drawn lower; its end times
    (a log) never reach the page, so the same epochs at other times give the same bytes."""
    from ml8s.contract.epochs import EpochRecord, epochs_bytes

    _store_run(ctx, forced=False)
    store = ctx.open_store()
    records = [
        EpochRecord(epoch=1, train_loss=0.9, held_out_log_loss=0.8, held_out_accuracy=0.6, time_ms=1_000),
        EpochRecord(epoch=2, train_loss=0.5, held_out_log_loss=0.6, held_out_accuracy=0.7, time_ms=2_000),
        EpochRecord(epoch=3, train_loss=0.3, held_out_log_loss=0.7, held_out_accuracy=0.75, time_ms=3_000),
    ]
    decision = GateDecision(completed=False)
    pages = []
    for shift in (0, 86_400_000):
        timed = [r.model_copy(update={"time_ms": (r.time_ms or 0) + shift}) for r in records]
        store.put_atomic(ctx.key(layout.EPOCH_LOG), epochs_bytes(shift, timed), tmp_key=f"tmp/epochs-{shift}")
        pages.append(render_overview_html(collect_overview(ctx, store, decision, COMMIT)))
    assert pages[0] == pages[1] and "Training curves (per epoch)" in pages[0]
    curves = _svg_points(pages[0])
    assert sorted(curves) == ["held-out accuracy", "held-out log-loss", "train loss"]
    assert all(len(points) == 3 for points in curves.values())
    train = [y for _, y in curves["train loss"]]
    assert train[0] < train[1] < train[2]  # SVG y grows downwards: the loss falls
    held = [y for _, y in curves["held-out log-loss"]]
    assert held[1] > held[2]  # the overfit shows: held-out loss rises at epoch 3
    assert [x for x, _ in curves["train loss"]] == [x for x, _ in curves["held-out log-loss"]]
    assert pages[0].count("<circle") == 9  # a dot per epoch and series: a one-epoch run still shows its figures


def test_a_run_without_epochs_or_with_an_unreadable_log_has_no_curves(ctx: RunContext) -> None:
    _store_run(ctx, forced=False)
    store = ctx.open_store()
    decision = GateDecision(completed=False)
    assert "<svg" not in render_overview_html(collect_overview(ctx, store, decision, COMMIT))
    store.put_atomic(ctx.key(layout.EPOCH_LOG), b"{not json", tmp_key="tmp/epochs")
    assert "<svg" not in render_overview_html(collect_overview(ctx, store, decision, COMMIT))
