"""Missing values as users spell them (defect 2): one token set, read as missing in every column.

A numeric column whose gaps say ``NA`` must give the features (and so the model) of the same data
with empty cells, not a one-hot of its distinct values; a target spelled ``NA`` is missing; a numeric
column with a few stray words is typed numeric and reported, never one-hot encoded.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from conftest import make_context, write_small_churn
from forked_cli import forked_ml8s

from ml8s.audit.offline import KNOWN_CANONICALIZATION_VERSIONS
from ml8s.context.publish import local_path
from ml8s.contract import layout
from ml8s.data.dataset import load_dataset
from ml8s.data.missing import MISSING_TOKENS, STRAY_TEXT_CODE
from ml8s.identity.variables import CANONICALIZATION_VERSION
from ml8s.pipeline.features import compute_features
from ml8s.training.fit import train


def _respell(source: Path, target: Path, column: int, token: str) -> Path:
    """A copy of ``source`` whose empty cells in ``column`` say ``token`` instead."""
    target.mkdir(parents=True)
    for path in sorted(source.iterdir()):
        lines = path.read_text().splitlines()
        out = [lines[0]]
        for line in lines[1:]:
            cells = line.split(",")
            cells[column] = cells[column] or token
            out.append(",".join(cells))
        (target / path.name).write_text("\n".join(out) + "\n")
    return target


def _features(data: Path, root: Path, out: Path, target: str = "churned") -> tuple[bytes, Any]:
    ctx = make_context(data, root, EPOCHS="1", TARGET_COLUMN=target)
    compute_features(ctx.spec, str(out))
    schema = json.loads((out / local_path("", layout.FEATURE_SCHEMA)).read_bytes())
    return (out / local_path("", layout.FEATURE_MATRIX)).read_bytes(), schema


def test_na_cells_give_the_features_and_model_of_empty_cells(tmp_path: Path) -> None:
    clean = write_small_churn(tmp_path / "clean", rows=200, files=2)  # empty tenure and plan cells
    spelled = _respell(clean, tmp_path / "na", 1, "NA")  # tenure: numeric with NA
    spelled = _respell(spelled, tmp_path / "na-plan", 3, "N/A")  # plan: categorical with N/A

    clean_matrix, clean_schema = _features(clean, tmp_path / "r1", tmp_path / "f1")
    na_matrix, na_schema = _features(spelled, tmp_path / "r2", tmp_path / "f2")

    names = [f["name"] for f in na_schema["features"]]
    assert "tenure" in names and "tenure__missing" in names
    assert not any(name.startswith("tenure=") for name in names), names
    assert "plan=N/A" not in names
    assert na_matrix == clean_matrix
    assert na_schema == clean_schema

    ctx = make_context(clean, tmp_path / "r1", EPOCHS="1")
    metrics = []
    for features in ("f1", "f2"):
        train(ctx.spec, str(tmp_path / features), str(tmp_path / f"m-{features}"))
        metrics.append((tmp_path / f"m-{features}" / local_path("", layout.METRICS)).read_bytes())
    assert metrics[0] == metrics[1]  # the same accuracy as the clean encoding, to the byte


def test_target_spelled_as_missing_is_dropped_and_counted(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    rows = ["x,label"] + [f"{i},{'yes' if i % 3 else 'no'}" for i in range(40)] + ["41,NA", "42,null", "43,"]
    (data / "part.csv").write_text("\n".join(rows) + "\n")

    _, schema = _features(data, tmp_path / "root", tmp_path / "f", "label")

    assert schema["target"]["classes"] == ["no", "yes"]
    assert schema["rows"]["missing_target_dropped"] == 3
    assert schema["rows"]["read"] == 43


def test_every_token_is_missing_in_every_column_and_the_case_rule_is_exact(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    lines = ["num,cat,flag,label"]
    for i, token in enumerate(MISSING_TOKENS * 3):
        lines.append(f"{i}.5,{'ab'[i % 2]},{'true' if i % 2 else 'false'},{'yn'[i % 2]}")
        lines.append(f"{token},{token},{token},{'yn'[i % 2]}")
    lines.append("7,none,true,y")  # lower-case "none" is not a token: it stays a category
    (data / "part.csv").write_text("\n".join(lines) + "\n")

    dataset = load_dataset(make_context(data, tmp_path / "root", TARGET_COLUMN="label").fingerprint)

    kinds = {c.name: c.kind for c in dataset.columns}
    assert kinds == {"num": "numeric", "cat": "categorical", "flag": "boolean", "label": "categorical"}
    for name in ("num", "cat", "flag"):
        assert int(dataset.column(name).missing().sum()) == 3 * len(MISSING_TOKENS), name
    assert sorted({v for v in dataset.column("cat").text().tolist() if v is not None}) == ["a", "b", "none"]
    assert dataset.warnings == ()


def test_numeric_column_with_stray_text_is_numeric_and_reported(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    lines = ["reading,code,label"]
    for i in range(100):
        reading = "unknown" if i in (5, 50) else ("sensor fault" if i == 70 else f"{i * 1.5}")
        code = f"{i % 4}" if i % 2 else "x"  # half text: a genuine categorical column
        lines.append(f"{reading},{code},{'yn'[i % 2]}")
    (data / "part.csv").write_text("\n".join(lines) + "\n")

    _, schema = _features(data, tmp_path / "root", tmp_path / "f", "label")

    names = [f["name"] for f in schema["features"]]
    assert "reading" in names and "reading__missing" in names
    assert not any(n.startswith("reading=") for n in names)
    assert any(n.startswith("code=") for n in names)
    (warning,) = schema["warnings"]
    assert warning["code"] == STRAY_TEXT_CODE
    assert warning["column"] == "reading"
    assert warning["cells"] == 3
    assert warning["examples"] == ["sensor fault", "unknown"]
    assert "read as missing" in warning["message"]


def test_schema_records_the_token_set_and_the_version_is_bumped(tmp_path: Path) -> None:
    data = write_small_churn(tmp_path / "data", rows=60, files=1)
    _, schema = _features(data, tmp_path / "root", tmp_path / "f")

    record = schema["missing_values"]
    assert record["tokens"] == list(MISSING_TOKENS) == sorted(MISSING_TOKENS)
    assert "case-sensitive" in record["match"]
    assert schema["warnings"] == []
    assert {"NA", "N/A", "NaN", "null", ""} <= set(MISSING_TOKENS)
    assert CANONICALIZATION_VERSION not in ("1.0.0",)  # 1.1.0 brought the tokens; 2.0.0 (model_code) followed
    assert {"1.0.0", "1.1.0"} <= KNOWN_CANONICALIZATION_VERSIONS


# A run made by ml8s before the token set: the canonicalization version it records is 1.0.0.
OLD_RUN = """
import os
from ml8s.pipeline import bootstrap
real = bootstrap.compute_identity
new_keys = ("model_code", "sampler_alpha", "train_world_size", "warm_start")
old_keys = lambda config: {key: value for key, value in config.items() if key not in new_keys}  # 1.0.0 keys
bootstrap.compute_identity = lambda config, *a, **k: real(old_keys(config), *a, **k).model_copy(
    update={"canonicalization_version": "1.0.0"}
)
from ml8s.pipeline.run import run_pipeline
print(run_pipeline(dict(os.environ)))
"""


def test_a_run_recorded_under_1_0_0_still_verifies(tmp_path: Path) -> None:
    data = write_small_churn(tmp_path / "data", rows=120, files=1)
    env = {k: v for k, v in os.environ.items() if k not in ("FORCE_RERUN", "MLFLOW_TRACKING_URI")}
    env.update(DATA_ROOT=str(data), TARGET_COLUMN="churned", PIPELINE_ROOT_URI=str(tmp_path / "root"), EPOCHS="1")
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parents[1]), env.get("PYTHONPATH", "")])
    old = subprocess.run([sys.executable, "-c", OLD_RUN], env=env, capture_output=True, text=True, timeout=300)
    assert old.returncode == 0, old.stderr
    manifest = json.loads(old.stdout)
    assert manifest["canonicalization_version"] == "1.0.0"

    verify = forked_ml8s(["verify", manifest["run_id"]], env, timeout=300)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert "canonicalization 1.0.0" in verify.stdout
