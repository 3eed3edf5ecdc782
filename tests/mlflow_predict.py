"""Predicting one set of raw rows three ways: `ml8s predict`, an MLflow pyfunc model, and a served model."""

from __future__ import annotations

import csv
import io
import json
import math
import urllib.request
from pathlib import Path

import pandas as pd
import pytest

from ml8s.cli.main import main
from ml8s.registry.mlflow_model import registry_resolves_with

# Rows the training data never held: an unseen plan, every value missing, untrimmed text, odd case.
EDGE_ROWS = [
    {"customer_id": "N1", "tenure": "", "monthly_charges": "", "plan": "", "auto_pay": "", "churned": ""},
    {
        "customer_id": "N2",
        "tenure": " 7 ",
        "monthly_charges": "250.5",
        "plan": "gold",
        "auto_pay": "TRUE",
        "churned": "",
    },
    {"customer_id": "N3", "tenure": "0", "monthly_charges": "-3", "plan": " pro ", "auto_pay": "False", "churned": "x"},
]


def cli_predict(capsys: pytest.CaptureFixture[str], root: Path, run_id: str, rows: Path) -> list[list[str]]:
    """`ml8s predict` in this process, every digit; its CSV output as rows (header first)."""
    capsys.readouterr()
    code = main(["predict", "--run", run_id, "--input", str(rows), "--root", str(root), "--precision", "full"])
    out, err = capsys.readouterr()
    assert code == 0, err
    return list(csv.reader(io.StringIO(out)))


def typed_frame(rows: list[dict[str, str]]) -> pd.DataFrame:
    """The rows as a DataFrame of typed columns (what an MLflow client sends): NaN/None for blanks."""

    def number(text: str) -> float:
        return float(text) if text.strip() else math.nan

    return pd.DataFrame(
        {
            "customer_id": [r["customer_id"] for r in rows],
            "tenure": [number(r["tenure"]) for r in rows],
            "monthly_charges": [number(r["monthly_charges"]) for r in rows],
            "plan": [r["plan"].strip() or None for r in rows],
            "auto_pay": [r["auto_pay"].strip().lower() == "true" if r["auto_pay"].strip() else None for r in rows],
        }
    )


def pyfunc_predict(tracking_uri: str, model_uri: str, frame: pd.DataFrame) -> pd.DataFrame:
    import mlflow

    with registry_resolves_with(tracking_uri):
        model = mlflow.pyfunc.load_model(model_uri)
        out: pd.DataFrame = model.predict(frame)
    return out


def as_csv_rows(frame: pd.DataFrame) -> list[list[str]]:
    """A predictions DataFrame in the CLI's CSV form (probabilities with repr, which reads back exactly)."""
    rows = [list(frame.columns)]
    for record in frame.itertuples(index=False):
        rows.append([str(record[0]), *(repr(float(p)) for p in record[1:])])
    return rows


def post_raw(url: str, body: bytes, content_type: str) -> pd.DataFrame:
    """POST a request body as is to a served model's /invocations, the predictions back."""
    request = urllib.request.Request(url, data=body, headers={"Content-Type": content_type})
    with urllib.request.urlopen(request, timeout=60) as answer:
        return pd.DataFrame(json.loads(answer.read())["predictions"])


def post_invocations(url: str, frame: pd.DataFrame) -> pd.DataFrame:
    """POST rows to a served model's /invocations (``dataframe_split``), the predictions back."""
    split = json.loads(frame.to_json(orient="split", index=False))
    body = json.dumps({"dataframe_split": split}).encode()
    request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as answer:
        return pd.DataFrame(json.loads(answer.read())["predictions"])


def assert_same_predictions(expected: list[list[str]], frame: pd.DataFrame) -> None:
    assert expected[0] == ["predicted_class", "probability_no", "probability_yes"]
    got = as_csv_rows(frame)
    wrong = [(i, want, have) for i, (want, have) in enumerate(zip(expected, got, strict=False)) if want != have]
    assert len(got) == len(expected) and not wrong, f"{len(got)} rows, expected {len(expected)}; differ: {wrong[:5]}"
