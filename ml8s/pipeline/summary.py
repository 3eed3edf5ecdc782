"""The one line a finished run ends with on stderr: what it scored, which model version it is, where it lies."""

from __future__ import annotations

from ml8s.contract import Manifest, Metrics, layout, load
from ml8s.errors import Ml8sError
from ml8s.log import MAX_LINE
from ml8s.store import open_store


def summary_line(manifest_text: str, seconds: float | None = None) -> str:
    """``ml8s: run 0123abcd4567 done in 12.3s; accuracy 0.8125, log-loss 0.4210; ml8s-model v3; file:///…``.

    The held-out metrics are read back from the run's ``metrics.json``; a figure that cannot be read is left
    out (the line is a headline, the manifest on stdout is the record). The artifact root is left out too when
    the line would exceed ``MAX_LINE`` characters.
    """
    took = f" in {seconds:.1f}s" if seconds is not None else ""
    try:
        manifest = Manifest.model_validate_json(manifest_text)
    except ValueError:  # a headline never fails a run: the manifest on stdout is the record
        return f"ml8s: run done{took}"
    parts = [f"ml8s: run {manifest.run_id} done{took}"]
    root = manifest.artifact_root.removesuffix("/" + layout.run_prefix(manifest.run_id))
    try:
        data = open_store(root).get(f"{layout.run_prefix(manifest.run_id)}/{layout.METRICS}")
        metrics = load(layout.METRICS, data, Metrics)
        parts.append(f"accuracy {metrics.accuracy:.4f}, log-loss {metrics.log_loss:.4f}")
    except Ml8sError:
        pass
    mlflow = manifest.mlflow
    if mlflow.get("model_name"):
        parts.append(f"{mlflow['model_name']} v{mlflow.get('model_version', '?')}")
    line = "; ".join(parts)
    with_root = f"{line}; {manifest.artifact_root}"
    return with_root if len(with_root) <= MAX_LINE else line
