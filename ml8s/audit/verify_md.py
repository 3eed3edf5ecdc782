"""``VERIFY.md``: the plain-language instructions inside every audit bundle, filled in for its run."""

from __future__ import annotations

from ml8s.audit.mlflow_refs import MlflowView
from ml8s.audit.offline import model_format
from ml8s.audit.report import Report
from ml8s.contract import ConfigSnapshot, layout

_TEMPLATE = """\
# Audit bundle of ml8s run {run_id}

This archive proves which configuration and which data produced the model of run `{run_id}`, and
what every file of that run hashes to. It was made from the run's storage and its MLflow registry;
checking it needs neither: only this archive (and, for the commands below, Python 3 or `sha256sum`).

| what | value |
| --- | --- |
| RUN_ID | `{run_id}` |
| FULL_CONFIG_HASH | `{full_hash}` |
| DATA_FINGERPRINT | `{fingerprint}` |
| where the run is stored | `{artifact_root}` |
| MLflow | {mlflow} |
| verification when bundled | **{status}** ({checks}) |
| model files included | {models} |

## The quick way

    ml8s audit verify {bundle_name}

It re-checks everything below and prints PASS or FAIL with the reason of each check.

## By hand

1. **Nothing in the bundle was changed.** Unpack it and check every file against `checksums.sha256`:

        tar -xzf {bundle_name} && cd ml8s-audit-{run_id} && sha256sum -c checksums.sha256

2. **The configuration and the data give this run's identity.** `run/config_snapshot.json` holds the
   canonical configuration and the data fingerprint. FULL_CONFIG_HASH is the sha256 of the canonical
   JSON (sorted keys, no spaces), a newline, and the data fingerprint; RUN_ID is its first 12 characters:

        python3 -c 'import hashlib,json; s=json.load(open("run/config_snapshot.json")); \\
        c=json.dumps(s["canonical_config"],separators=(",",":"),sort_keys=True,ensure_ascii=False); \\
        print(hashlib.sha256((c+"\\n"+s["data_fingerprint"]).encode()).hexdigest(), s["full_config_hash"])'

   The two printed values must be equal. (A run made with `STRICT_DATA_IDENTITY=false` hashes an empty
   fingerprint instead: replace `s["data_fingerprint"]` by `""`.)

3. **The data fingerprint is the one of the listed data files.** `run/data_fingerprint.json` lists every
   data file as `path:checksum:size` (checksum: {checksum}). The fingerprint is the sha256 of those tokens
   in the order of their paths, joined with `|`:

        python3 -c 'import hashlib,json; r=json.load(open("run/data_fingerprint.json")); \\
        fs=sorted(r["files"], key=lambda f: f["relative_path"]); \\
        t="|".join("%s:%s:%s" % (f["relative_path"], f["checksum"], f["size"]) for f in fs); \\
        print(hashlib.sha256(t.encode()).hexdigest(), r["fingerprint"])'

   If you hold the data, hash each file (`sha256sum`) and compare with the list.

4. **The artifacts are the ones recorded.** `artifacts.sha256` lists the sha256 of every file of the run
   as stored when the bundle was made; `run/training_metadata.json` (field `artifacts`) and
   `run/manifest.json` record the same values, written by the pipeline itself.

5. **A model file you were handed is this run's model.** Compute its sha256 and find it in
   `artifacts.sha256`:

{model_lines}

6. **MLflow agreed.** `mlflow.json` is what the MLflow registry said when the bundle was made: the
   registered version, its source (the run's logged MLflow model), and the tags `run_id`, `full_config_hash`,
   `data_fingerprint`, `artifact_uri` (timestamps and MLflow's own `mlflow.*` tags are left out, so that
   the bundle is reproducible). `verification.json` is the full verification report of the stored run.

## What the bundle does not prove on its own

Anyone can build a self-consistent archive. Trust it by comparing FULL_CONFIG_HASH or a model sha256
with a value you obtained independently (the model chain, the MLflow registry, a signed record of the
bundle's own sha256). The feature matrix is not bundled (it is derived training data): its sha256 is in
`artifacts.sha256`.
"""


def verify_md(
    *,
    artifact_root: str,
    snapshot: ConfigSnapshot,
    checksum_kind: str,
    artifact_sha256: dict[str, str],
    report: Report,
    view: MlflowView | None,
    models: tuple[str, ...],
) -> str:
    """The text, from the bundle's own content only: ``ml8s audit verify`` regenerates and compares it."""
    mlflow = (
        f"model `{view.model_name}` version `{view.model_version}`, run `{view.run_id}` ({view.tracking_uri})"
        if view
        else "could not be read when bundled"
    )
    wanted = (layout.MODEL_NATIVE, layout.model_export(model_format(snapshot)))
    model_lines = "\n".join(f"        {artifact_sha256[rel]}  {rel}" for rel in wanted if rel in artifact_sha256)
    included = ", ".join(f"`run/{m}`" for m in models) if models else "no (their sha256 are listed below)"
    return _TEMPLATE.format(
        run_id=snapshot.run_id,
        full_hash=snapshot.full_config_hash,
        fingerprint=snapshot.data_fingerprint,
        artifact_root=artifact_root,
        mlflow=mlflow,
        status=report.status.value,
        checks=", ".join(f"{c.name} {c.status.value}" for c in report.checks),
        models=included,
        bundle_name=f"ml8s-audit-{snapshot.run_id}.tar.gz",
        checksum=checksum_kind,
        model_lines=model_lines,
    )
