"""What an MLflow run of ml8s holds besides its contract tags: params, metric curves, source tags.

- Params: the canonical config, one param per variable, as plain strings (``params.model_type = 'mlp'``):
  text as itself, anything else (numbers, booleans, null, lists) as compact JSON.
- Metrics: ``train_loss`` at steps 1..EPOCHS (the per-epoch means training records in
  ``training_metadata.json``), ``held_out_log_loss`` and ``held_out_accuracy`` after each epoch where
  training evaluated them (``logs/epochs.json``), each point at the time its epoch ended, and every held-out
  figure of ``metrics.json`` at step EPOCHS.
- Input: the training data as a dataset (``mlflow.log_input``'s record): DATA_ROOT, the data fingerprint's
  first 32 hex digits as its digest, its file count and size, context ``training``.
- Tags: ``mlflow.source.name`` (the program that registered), ``mlflow.source.type``,
  ``mlflow.source.git.commit`` (``git rev-parse HEAD`` of ml8s's source, else ML8S_GIT_COMMIT, else none),
  ``ml8s.version``, and the row counts (``ml8s.train_rows``, ``ml8s.test_rows``: counts are no metrics).

Everything is added only where missing, so registering again (or after a crash) never duplicates a point
nor changes what a run already records (MLflow params are immutable).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, TypeGuard

import ml8s
from ml8s.context.run import RunContext
from ml8s.contract import layout
from ml8s.contract.epochs import EpochRecord, read_epochs
from ml8s.errors import NotFoundError, ObjectTooLargeError, RegistryError
from ml8s.identity.hashing import json_loads
from ml8s.identity.variables import JsonValue
from ml8s.store import Store

if TYPE_CHECKING:
    from mlflow import MlflowClient
    from mlflow.entities import DatasetInput, Run

TRAIN_LOSS = "train_loss"
HELD_OUT_LOG_LOSS = "held_out_log_loss"
HELD_OUT_ACCURACY = "held_out_accuracy"
ROW_COUNTS = ("test_rows", "train_rows")
GIT_COMMIT_ENV = "ML8S_GIT_COMMIT"
_BATCH = 1000  # MLflow's limit of metrics per log_batch call
_PARAM_BATCH = 100  # ... and of params


def mlflow_params(config: Mapping[str, JsonValue]) -> dict[str, str]:
    """The canonical config as MLflow params, keys sorted: text as itself, other values as compact JSON."""
    return {
        key: value if isinstance(value, str) else json.dumps(value, separators=(",", ":"), ensure_ascii=False)
        for key, value in sorted(config.items())
    }


def source_tags(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """Where the registering code came from: program, git commit (when known) and ml8s version."""
    tags = {
        "ml8s.version": ml8s.__version__,
        "mlflow.source.name": os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "python",
        "mlflow.source.type": "LOCAL",
    }
    commit = git_commit(os.path.dirname(os.path.abspath(ml8s.__file__))) or (env or os.environ).get(GIT_COMMIT_ENV, "")
    if commit:
        tags["mlflow.source.git.commit"] = commit
    return dict(sorted(tags.items()))


def git_commit(directory: str) -> str:
    """``git rev-parse HEAD`` in ``directory``; "" when git or the repository is absent (an installed image)."""
    try:
        done = subprocess.run(
            ["git", "-C", directory, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return ""
    commit = done.stdout.strip()
    return commit if done.returncode == 0 and len(commit) == 40 else ""


Point = tuple[int, float, int | None]
"""(step, value, time in ms since the epoch; None: the time of registration)."""


def run_metrics(ctx: RunContext, store: Store) -> dict[str, list[Point]]:
    """Each metric's points: the per-epoch training loss and held-out figures, and the final held-out figures."""
    metrics: dict[str, list[Point]] = {}
    _, epochs = epoch_log(ctx, store)
    times = {r.epoch: r.time_ms for r in epochs}
    losses = _read_json(ctx, store, layout.TRAINING_METADATA, ("training", "epoch_losses"))
    if isinstance(losses, list):
        metrics[TRAIN_LOSS] = [(n, float(v), times.get(n)) for n, v in enumerate(losses, start=1) if _number(v)]
    for name in (HELD_OUT_LOG_LOSS, HELD_OUT_ACCURACY):
        series = [(r.epoch, getattr(r, name), r.time_ms) for r in epochs if getattr(r, name) is not None]
        if series:
            metrics[name] = series
    last = len(metrics.get(TRAIN_LOSS, [])) or ctx.params.epochs
    held_out = _held_out(ctx, store)
    for name, value in sorted(held_out.items()):
        if _number(value) and name not in ROW_COUNTS:
            metrics[str(name)] = [(last, float(value), times.get(last))]
    return metrics


def run_tags(ctx: RunContext, store: Store) -> dict[str, str]:
    """The source tags and the row counts of ``metrics.json`` (``ml8s.train_rows``, ``ml8s.test_rows``)."""
    held_out = _held_out(ctx, store)
    rows = {f"ml8s.{k}": str(held_out[k]) for k in ROW_COUNTS if _number(held_out.get(k))}
    return dict(sorted({**source_tags(), **rows}.items()))


def epoch_log(ctx: RunContext, store: Store) -> tuple[int | None, list[EpochRecord]]:
    """``logs/epochs.json`` of the run: when training started and its epochs; (None, []) when absent.

    A log, not an artifact: a malformed one is skipped with a warning, never a failed registration.
    """
    try:
        return read_epochs(ctx.read_record(store, layout.EPOCH_LOG))
    except NotFoundError:
        return None, []
    except (ValueError, ObjectTooLargeError) as exc:
        ctx.log("register", f"WARNING: {ctx.uri(layout.EPOCH_LOG)} skipped: {str(exc)[:80]}")
        return None, []


def _held_out(ctx: RunContext, store: Store) -> dict[str, object]:
    held_out = _read_json(ctx, store, layout.METRICS, ())
    if held_out is not None and not isinstance(held_out, dict):
        raise RegistryError(f"{ctx.uri(layout.METRICS)} is not a JSON object of metric name to number")
    return {str(k): v for k, v in (held_out or {}).items()}


def log_run_data(ctx: RunContext, store: Store, client: MlflowClient, run: Run) -> None:
    """Add the params, metric points and source tags the MLflow run lacks (see the module docstring)."""
    from mlflow.entities import Metric, Param, RunTag

    run_id = str(run.info.run_id)
    params = [Param(k, v) for k, v in mlflow_params(ctx.identity.canonical_config).items() if k not in run.data.params]
    tags = [RunTag(k, v) for k, v in run_tags(ctx, store).items() if k not in run.data.tags]
    now = int(time.time() * 1000)
    points: list[Metric] = []
    for name, series in sorted(run_metrics(ctx, store).items()):
        logged = {int(m.step) for m in client.get_metric_history(run_id, name)} if name in run.data.metrics else set()
        points += [Metric(name, value, at or now, step) for step, value, at in series if step not in logged]
    for start in range(0, len(params), _PARAM_BATCH):
        client.log_batch(run_id, params=params[start : start + _PARAM_BATCH])
    if tags:
        client.log_batch(run_id, tags=tags)
    for start in range(0, len(points), _BATCH):
        client.log_batch(run_id, metrics=points[start : start + _BATCH])
    logged_inputs = {d.dataset.digest for d in (run.inputs.dataset_inputs if run.inputs else [])}
    if dataset_digest(ctx) not in logged_inputs:
        client.log_inputs(run_id, datasets=[dataset_input(ctx)])


def dataset_digest(ctx: RunContext) -> str:
    """The data fingerprint's first 32 hex digits (MLflow keeps a dataset digest in at most 36 characters)."""
    return ctx.identity.data_fingerprint[:32]


def dataset_input(ctx: RunContext) -> DatasetInput:
    """The training data as an MLflow dataset input: DATA_ROOT, its fingerprint, its files, context training."""
    from mlflow.entities import Dataset, DatasetInput, InputTag

    profile = {
        "data_fingerprint": ctx.identity.data_fingerprint,
        "files": len(ctx.fingerprint.entries),
        "bytes": sum(e.size for e in ctx.fingerprint.entries),
        "target_column": ctx.params.target_column,
    }
    dataset = Dataset(
        name=ctx.params.data_root.rstrip("/").rsplit("/", 1)[-1] or "data",
        digest=dataset_digest(ctx),
        source_type="ml8s",
        source=json.dumps({"uri": ctx.params.data_root}),
        profile=json.dumps(profile, sort_keys=True),
    )
    return DatasetInput(dataset, tags=[InputTag("mlflow.data.context", "training")])


def _number(value: object) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _read_json(ctx: RunContext, store: Store, rel: str, path: tuple[str, ...]) -> object:
    """A JSON value of an artifact (None when the file or the path is absent)."""
    try:
        data = json_loads(ctx.read_record(store, rel))
    except NotFoundError:
        return None
    except ValueError:
        raise RegistryError(f"{ctx.uri(rel)} is not valid JSON") from None
    for key in path:
        data = data.get(key) if isinstance(data, dict) else None
    return data
