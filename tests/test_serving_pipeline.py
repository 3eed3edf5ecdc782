"""The inference client on a chain the pipeline wrote: its versions carry the model graph, so the client
predicts raw rows exactly as `ml8s predict --run` does, pinned or tracking the head of a lineage."""

from __future__ import annotations

import csv
import io
import json
import os
from pathlib import Path

from conftest import write_small_churn
from forked_cli import forked_ml8s
from mlflow_support import raw_rows, write_rows

from ml8s.chain import ChainStore
from ml8s.serving import ClientConfig, InferenceClient
from ml8s.store import LocalStore


def _env(data: Path, root: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("FORCE_RERUN", "CHAIN_NAME", "WARM_START")}
    env.update(DATA_ROOT=str(data), TARGET_COLUMN="churned", PIPELINE_ROOT_URI=str(root), EPOCHS="1")
    # every candidate promoted: this is about what a tracking client predicts, not the promotion rule
    env.update(HIDDEN_UNITS="16", PROMOTE_MIN_DELTA="-1", **extra)
    return env


def _ml8s(env: dict[str, str], *args: str) -> str:
    proc = forked_ml8s(args, env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def _rows_of(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text)))


def test_pinned_and_tracking_clients_predict_like_ml8s_predict(tmp_path: Path) -> None:
    data, root = write_small_churn(tmp_path / "data", rows=300, files=1), tmp_path / "root"
    first = json.loads(_ml8s(_env(data, root), "run"))["run_id"]
    rows = raw_rows(data)[:40]
    path = write_rows(tmp_path / "rows.csv", rows)
    expected_v1 = _ml8s(_env(data, root), "predict", "--run", first, "--input", str(path), "--precision", "full")

    chain = ChainStore(LocalStore(str(root)), "ml8s-model")
    pinned = InferenceClient(chain, ClientConfig(pinned=1))
    pinned.refresh()
    assert pinned.predict_sync(rows).to_csv() == expected_v1
    tracking = InferenceClient(chain, ClientConfig(state_path=str(tmp_path / "seen.json")))
    tracking.refresh()
    assert tracking.version is not None and tracking.version.counter == 1

    (data / "gen-001.csv").write_text((data / "part-000.csv").read_text().replace("C0", "N0"))
    second = json.loads(_ml8s(_env(data, root, WARM_START="head"), "run"))["run_id"]
    expected_v2 = _ml8s(_env(data, root), "predict", "--run", second, "--input", str(path), "--precision", "full")
    assert tracking.refresh() and tracking.version is not None and tracking.version.counter == 2
    assert tracking.predict_sync(rows).to_csv() == expected_v2
    assert pinned.refresh() is False and pinned.predict_sync(rows).to_csv() == expected_v1  # never changes
    assert _rows_of(expected_v1)[0].keys() == _rows_of(expected_v2)[0].keys()
