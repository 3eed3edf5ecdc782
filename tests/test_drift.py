"""Drift per generation: a warm start whose new generation holds a category the lineage never saw and a
numeric column that is entirely missing reports both (run summary, training metadata, ``chain log``); with
DRIFT_POLICY=fail it stops with LINEAGE_DRIFT before anything is written."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from conftest import write_small_churn
from forked_cli import forked_ml8s

from ml8s.chain import ChainStore
from ml8s.contract import TrainingMetadata, layout, parse
from ml8s.pipeline.bootstrap import bootstrap
from ml8s.pipeline.chain_commit import chain_commit
from ml8s.pipeline.gate import gate
from ml8s.pipeline.run_overview import collect_overview, render_overview_html
from ml8s.store import LocalStore

CHAIN = "ml8s-model"


def _env(data: Path, root: Path, **extra: str) -> dict[str, str]:
    drop = ("FORCE_RERUN", "CHAIN_NAME", "WARM_START", "MLFLOW_TRACKING_URI", "WARM_START_ROOT_URI", "DRIFT_POLICY")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env.update(DATA_ROOT=str(data), TARGET_COLUMN="churned", PIPELINE_ROOT_URI=str(root), WARM_START="head")
    env.update(EPOCHS="1", HIDDEN_UNITS="8", BATCH_SIZE="64")
    env.update(extra)
    return env


def _ml8s(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return forked_ml8s(args, env, timeout=300)


def _drifted_generation(data: Path, rows: int = 90) -> None:
    """Like generation 0, but a third of the plans are 'enterprise' (never seen) and monthly_charges is empty."""
    lines = ["customer_id,tenure,monthly_charges,plan,auto_pay,churned"]
    for i in range(rows):
        plan = "enterprise" if i % 3 == 0 else ("basic", "plus", "pro")[i % 3]
        lines.append(f"D-{i:05d},{(i * 7) % 72},,{plan},{'true' if i % 2 else 'false'},{'yes' if i % 5 == 0 else 'no'}")
    (data / "gen-001.csv").write_text("\n".join(lines) + "\n")


@pytest.fixture(scope="module")
def lineage(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A cold start on generation 0; then a drifted generation 1 arrives under DATA_ROOT (not trained yet)."""
    base = tmp_path_factory.mktemp("drift")
    data, root = write_small_churn(base / "data", rows=240, files=1), base / "root"
    cold = _ml8s(_env(data, root), "run")
    assert cold.returncode == 0, cold.stderr[-3000:]
    _drifted_generation(data)
    return data, root


def _tree(root: Path) -> list[str]:
    return sorted(
        str(p.relative_to(root)) for p in root.rglob("*") if "mlflow" not in p.name and "mlruns" not in str(p)
    )


def test_drift_policy_fail_stops_before_any_write(lineage: tuple[Path, Path]) -> None:
    data, root = lineage
    before = _tree(root)
    proc = _ml8s(_env(data, root, DRIFT_POLICY="fail", WARM_START="1"), "run")
    assert proc.returncode == 1, proc.stderr[-3000:]
    line = proc.stderr.strip().splitlines()[-1]
    assert line.startswith("ml8s: LINEAGE_DRIFT: DRIFT_POLICY=fail"), line
    assert "'plan'" in line and "'enterprise' (30)" in line  # the unseen category, with its count
    assert "'monthly_charges': 100.0% of its values are missing" in line
    assert "30 of 90 row(s) map to an unknown category" in line
    assert "a cold start (WARM_START='')" in line  # how a lineage adopts a changed schema
    assert "Traceback" not in proc.stderr
    assert _tree(root) == before  # no run directory, no history record, no chain version


def test_drift_policy_warn_trains_and_records_the_report(lineage: tuple[Path, Path]) -> None:
    data, root = lineage
    proc = _ml8s(_env(data, root, DRIFT_POLICY="warn"), "run")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "warm start: drift column 'plan'" in proc.stderr  # the run's log says it at bootstrap
    run_id = json.loads(proc.stdout)["run_id"]
    metadata = parse(
        layout.TRAINING_METADATA,
        (root / layout.run_prefix(run_id) / layout.TRAINING_METADATA).read_bytes(),
        TrainingMetadata,
    )
    drift = metadata.drift
    assert drift is not None and drift.drifted and drift.generations == [1] and drift.rows == 90
    assert drift.new_categories == {"plan": {"enterprise": 30}} and drift.rows_with_unknown == 30
    assert [(c.column, c.what, c.now) for c in drift.columns] == [("monthly_charges", "missing_share", 1.0)]
    chain = ChainStore(LocalStore(str(root)), CHAIN)
    cold = parse(
        layout.TRAINING_METADATA, chain.fetch_payload(chain.get(1), layout.PAYLOAD_TRAINING_METADATA), TrainingMetadata
    )
    assert cold.drift is None and b'"drift"' not in cold.to_bytes()  # a cold start's file is as before
    log = json.loads(_ml8s(_env(data, root), "chain", "log", "--json").stdout)
    assert log[0]["counter"] == 2 and any("'enterprise' (30)" in line for line in log[0]["drift"])
    assert log[1]["drift"] is None
    text = _ml8s(_env(data, root), "chain", "log").stdout
    assert "drift: column 'monthly_charges': 100.0% of its values are missing" in text

    # the Deck's page (ml8s.pipeline.run_overview) of the same run, read back through the gate
    ctx = bootstrap(_env(data, root, WARM_START="1"))
    store = ctx.open_store()
    decision = gate(ctx, store)
    assert decision.completed and ctx.run_id == run_id
    page = render_overview_html(collect_overview(ctx, store, decision, chain_commit(ctx, store)))
    assert "Drift of the new generations" in page and "enterprise" in page
    # DRIFT_POLICY is a platform setting: the committed run is the same run under fail, and its re-run returns
    # it (it was LINEAGE_DRIFT, for a run already trained, registered and committed)
    assert bootstrap(_env(data, root, WARM_START="1", DRIFT_POLICY="fail")).run_id == run_id
    assert bootstrap(_env(data, root, DRIFT_POLICY="fail")).run_id == run_id  # WARM_START=head: the head's own run


def test_values_whose_sum_overflows_give_a_mean_of_inf_and_no_warning(
    lineage: tuple[Path, Path], tmp_path: Path
) -> None:
    """Two cells of 1.7e308 sum beyond float64: the drift report's mean printed numpy's 'RuntimeWarning: overflow
    encountered in reduce' (with a numpy source path) to stderr at bootstrap. The mean is now inf, said once."""
    import shutil
    import warnings

    data, root = tmp_path / "data", tmp_path / "root"
    shutil.copytree(lineage[0], data)
    shutil.copytree(lineage[1], root)
    lines = ["customer_id,tenure,monthly_charges,plan,auto_pay,churned"]
    lines += [
        f"H-{i},{i},{'1.7e308' if i < 2 else '50.5'},basic,true,{'yes' if i % 4 == 0 else 'no'}" for i in range(8)
    ]
    (data / "gen-002.csv").write_text("\n".join(lines) + "\n")  # new whether or not v2 trained on gen-001
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        ctx = bootstrap(_env(data, root))
    assert ctx.spec.lineage is not None and ctx.spec.lineage.drift is not None
    (moved,) = [c for c in ctx.spec.lineage.drift.columns if c.column == "monthly_charges" and c.what == "mean"]
    assert moved.now == float("inf")
