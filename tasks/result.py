"""The training workflow's output: a typed result (run id, model version, metrics, the model as a file).

A dataclass, so the Flyte console shows its fields and a downstream workflow reads ``result.model`` as a file
without parsing anything. The files are not copied: a model under an ``s3://`` root is referenced where it
lies, and one under a local root is handed over as its local path (``remote_path=False``; a local root is a
local execution's, whose files stay where they are). The manifest itself is a file of the result too, so
every record of the run (the FORCE_RERUN audit included) stays one read away.

``pyflyte run`` prints the result as JSON on stdout (``tasks.pyflyte_cli``), its files as their paths.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING

from flytekit.types.file import FlyteFile

from ml8s.contract import Manifest, Metrics, layout, load

if TYPE_CHECKING:
    from ml8s.context.run import RunContext
    from ml8s.pipeline.chain_commit import ChainCommit
    from ml8s.store import Store


@dataclass
class TrainingResult:
    """One completed run: what it is, where its model lies, what it scored."""

    run_id: str
    model_name: str  # the MLflow registered model ("" when the run registered none)
    model_version: int  # its MLflow model version (0 when none)
    chain: str
    chain_version: int  # the run's version counter on its chain
    metrics: dict[str, float]  # the held-out metrics of metrics.json (not its row counts)
    model: FlyteFile  # the exported model (MODEL_FORMAT)
    manifest: FlyteFile  # manifest.json
    sha256: dict[str, str]  # every artifact's sha256 by its path in the run, as manifest.json records them


def training_result(run: RunContext, store: Store, manifest_text: str, commit: ChainCommit) -> TrainingResult:
    """The result of a completed run, read from what it recorded."""
    manifest = Manifest.model_validate_json(manifest_text)
    metrics = load(run.uri(layout.METRICS), store.get(run.key(layout.METRICS)), Metrics)
    fmt = str(run.identity.canonical_config.get("model_format") or "onnx")
    version = manifest.mlflow.get("model_version", "")
    return TrainingResult(
        run_id=manifest.run_id,
        model_name=manifest.mlflow.get("model_name", ""),
        model_version=int(version) if version.isdigit() else 0,
        chain=commit.chain_name,
        chain_version=commit.counter,
        metrics={name: value for name, value in sorted(metrics.scalars().items()) if isinstance(value, float)},
        model=_file(run.uri(layout.model_export(fmt))),
        manifest=_file(run.uri(layout.MANIFEST)),
        sha256={rel: artifact.sha256 for rel, artifact in sorted(manifest.artifacts.items())},
    )


def _file(uri: str) -> FlyteFile:
    if uri.startswith("file://"):
        return FlyteFile(uri.removeprefix("file://"), remote_path=False)
    if "://" not in uri:
        return FlyteFile(uri, remote_path=False)
    return FlyteFile(uri)


def result_json(result: TrainingResult) -> str:
    """The result as ``pyflyte run`` prints it: JSON, keys sorted, each file as its path or URI."""
    fields = {
        "run_id": result.run_id,
        "model_name": result.model_name,
        "model_version": result.model_version,
        "chain": result.chain,
        "chain_version": result.chain_version,
        "metrics": dict(sorted(result.metrics.items())),
        "model": _where(result.model),
        "manifest": _where(result.manifest),
        "sha256": dict(sorted(result.sha256.items())),
    }
    return json.dumps(fields, indent=2, sort_keys=True)


def _where(file: FlyteFile) -> str:
    return str(file.remote_source or file.path)
