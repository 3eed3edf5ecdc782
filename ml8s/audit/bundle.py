"""``ml8s audit bundle RUN_ID -o FILE``: one deterministic ``.tar.gz`` proving what a run is, for
someone without access to the store or MLflow.

The archive is a set of named entries under ``ml8s-audit-{run_id}/`` (see :data:`ENTRY_BUILDERS`; the
model chain's proof is one more builder). Entries are sorted; every member has mtime 0, uid/gid 0, no
owner names and mode 0644; the gzip header has mtime 0 and no file name. So two bundles of an unchanged
run are byte-identical (with the same Python/zlib: the checksums inside are the lasting invariant).
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import io
import os
import tarfile
from collections.abc import Callable, Mapping

from pydantic import BaseModel, ConfigDict

from ml8s.audit import anchor_tags, mlflow_refs
from ml8s.audit.chain_proof import ANCHOR, CHAIN_PROOF, anchor_bytes, build_proof, proof_bytes
from ml8s.audit.offline import final_artifacts, model_format, pretty
from ml8s.audit.report import Report
from ml8s.audit.run_checks import maybe
from ml8s.audit.state import RunState
from ml8s.audit.verify import verify_state
from ml8s.audit.verify_md import verify_md
from ml8s.chain import Anchor
from ml8s.contract import Unavailable, checksum_lines, layout
from ml8s.errors import AuditBundleError, ChainError, Ml8sError, VerificationFailedError
from ml8s.identity.uri import parse_root_uri
from ml8s.output_files import write_output

FORMAT = "ml8s-audit-bundle/1"
RUN_DIR = "run"  # run files are bundled under run/<path relative to ARTIFACT_ROOT>
CHECKSUMS = "checksums.sha256"  # sha256 of every other member of the bundle
ARTIFACT_CHECKSUMS = "artifacts.sha256"  # sha256 of every final artifact of the run, read at bundle time
INDEX, MLFLOW, VERIFICATION, VERIFY_MD = "bundle.json", "mlflow.json", "verification.json", "VERIFY.md"
# Bundled run files. Not the feature matrix: it is derived training data (size, privacy); its sha256 is
# in artifacts.sha256. The model files are bundled unless excluded or larger than MODEL_BYTES_LIMIT.
RECORDS = (
    layout.CONFIG_SNAPSHOT,
    layout.DATA_FINGERPRINT,
    layout.TRAINING_METADATA,
    layout.METRICS,
    layout.MANIFEST,
    layout.FEATURE_SCHEMA,
)
# A sharded run's shard metadata (the shard list, sizes, sha256, tensor map) is bundled when the run has it;
# the shards themselves are model files of the verified run, their sha256 in artifacts.sha256.
SHARD_RECORDS = (layout.MODEL_SHARD_METADATA,)
MODEL_BYTES_LIMIT = 256 * 1024 * 1024
BUNDLE_MAX_BYTES = MODEL_BYTES_LIMIT + 64 * 1024 * 1024  # what `audit verify` reads, packed or unpacked


class BundleIndex(BaseModel):
    """``bundle.json``: what the bundle is about and what it holds."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    format: str
    run_id: str
    full_config_hash: str
    artifact_root: str
    model_format: str
    model_files: tuple[str, ...]
    verification_status: str


@dataclasses.dataclass(frozen=True)
class BundleEntry:
    path: str  # relative to the bundle's top directory
    data: bytes


@dataclasses.dataclass(frozen=True)
class BundleSource:
    """What the entry builders read: the run, its verification at bundle time, MLflow's view of it."""

    state: RunState
    report: Report
    mlflow: mlflow_refs.MlflowView | None
    model_files: tuple[str, ...]


def _run_files(source: BundleSource) -> list[BundleEntry]:
    rels = sorted({*RECORDS, *SHARD_RECORDS, *source.model_files})
    # A model file is bundled up to MODEL_BYTES_LIMIT (checked when choosing them), not a record's bound: a
    # model over 16 MiB refused the whole bundle.
    return [
        BundleEntry(
            f"{RUN_DIR}/{rel}", source.state.read(rel, MODEL_BYTES_LIMIT if rel in source.model_files else None)
        )
        for rel in rels
        if rel in source.state.listing()
    ]


def artifact_sha256(state: RunState) -> dict[str, str]:
    """sha256 of every final artifact present, read from the store now."""
    snapshot = state.snapshot()
    rels = final_artifacts(snapshot)
    return {rel: state.digest(rel)[0] for rel in rels if rel in state.listing()}


def _artifact_checksums(source: BundleSource) -> list[BundleEntry]:
    return [BundleEntry(ARTIFACT_CHECKSUMS, checksum_lines(artifact_sha256(source.state)))]


def _mlflow(source: BundleSource) -> list[BundleEntry]:
    return [BundleEntry(MLFLOW, pretty(source.mlflow.model_dump(mode="json")))] if source.mlflow else []


def _verification(source: BundleSource) -> list[BundleEntry]:
    return [BundleEntry(VERIFICATION, pretty(source.report.model_dump(mode="json")))]


def _chain_proof(source: BundleSource) -> list[BundleEntry]:
    """The chain proof; absent (so ``audit verify`` FAILs) only for a run bundled with --allow-failed."""
    try:
        proof = build_proof(source.state, source.state.snapshot().full_config_hash)
    except ChainError:
        return []
    return [BundleEntry(CHAIN_PROOF, proof_bytes(proof))]


def _anchor(source: BundleSource) -> list[BundleEntry]:
    """The chain anchor the run's chain check verified against (``anchor.json``), when there was one."""
    return [BundleEntry(ANCHOR, anchor_bytes(source.state.anchor))] if source.state.anchor else []


def _index(source: BundleSource) -> list[BundleEntry]:
    snapshot = source.state.snapshot()
    index = BundleIndex(
        format=FORMAT,
        run_id=source.state.run_id,
        full_config_hash=snapshot.full_config_hash,
        artifact_root=source.state.artifact_root,
        model_format=model_format(snapshot),
        model_files=source.model_files,
        verification_status=source.report.status.value,
    )
    return [BundleEntry(INDEX, pretty(index.model_dump(mode="json")))]


# Each builder adds named entries; VERIFY.md and checksums.sha256 are made last, from all of them.
ENTRY_BUILDERS: tuple[Callable[[BundleSource], list[BundleEntry]], ...] = (
    _run_files,
    _artifact_checksums,
    _mlflow,
    _verification,
    _chain_proof,
    _anchor,
    _index,
)


def build_bundle(
    root_uri: str,
    run_id: str,
    env: Mapping[str, str],
    *,
    include_model: bool = True,
    allow_failed: bool = False,
    tracking_uri: str = "",
    anchor: Anchor | None = None,
) -> tuple[bytes, Report]:
    """The archive's bytes and the run's verification report at bundle time.

    ``tracking_uri`` overrides the MLflow that manifest.json records, as in :func:`~ml8s.audit.verify_run`.
    ``anchor``: the chain anchor to check the chain against and embed (``anchor.json``); default the
    latest one published in MLflow for the run's registered model (anchor_tags.py), if any.

    Raises:
        VerificationFailedError: the run fails verification (``allow_failed`` bundles it anyway, as evidence).
    """
    state = RunState(root_uri, run_id, env, tracking_uri=tracking_uri)
    state.anchor = anchor or _published_anchor(state)
    report = verify_state(state)
    if not report.passed and not allow_failed:
        raise VerificationFailedError(
            f"run {run_id} at {state.artifact_root} fails verification ({', '.join(report.failed()) or 'skipped'}); "
            "no bundle written (run `ml8s verify`, or pass --allow-failed to bundle it as evidence)"
        )
    try:
        return _build(state, report, include_model), report
    except Unavailable as exc:  # only with allow_failed: a record the bundle is made of is unreadable
        raise AuditBundleError(f"cannot bundle run {run_id}: {exc}") from exc


def _build(state: RunState, report: Report, include_model: bool) -> bytes:
    snapshot = state.snapshot()
    fmt = model_format(snapshot)
    models = tuple(rel for rel in (layout.MODEL_NATIVE, layout.model_export(fmt)) if rel in state.listing())
    if not include_model or sum(state.listing()[rel].size for rel in models) > MODEL_BYTES_LIMIT:
        models = ()
    view = _read_view(state, snapshot.full_config_hash)
    source = BundleSource(state=state, report=report, mlflow=view, model_files=models)
    entries = [entry for builder in ENTRY_BUILDERS for entry in builder(source)]
    text = verify_md(
        artifact_root=state.artifact_root,
        snapshot=snapshot,
        checksum_kind=record.checksum if (record := maybe(state.fingerprint_record)) else "unknown",
        artifact_sha256=artifact_sha256(state),
        report=report,
        view=view,
        models=models,
    )
    entries.append(BundleEntry(VERIFY_MD, text.encode("utf-8")))
    entries.append(BundleEntry(CHECKSUMS, checksum_lines({e.path: _sha256(e.data) for e in entries})))
    return write_archive(f"ml8s-audit-{state.run_id}", entries)


def write_bundle(path: str, data: bytes) -> None:
    """Write the archive to ``path``: a regular file is replaced atomically (tmp file in the same directory,
    fsync, rename); a device or FIFO (``-o /dev/stdout``) is written in place (:mod:`ml8s.output_files`)."""

    def fail(reason: str) -> AuditBundleError:
        return AuditBundleError(f"cannot write the bundle to {path}: {reason}")

    write_output(path, data, fail)


def refuse_inside_runs(path: str, root_uri: str) -> None:
    """AuditBundleError when ``path`` lies in a run folder of the local root ``root_uri``: a bundle written into the
    ARTIFACT_ROOT it proves made that run FAIL its next verification (an unexpected file), and a bundle of a run
    then changed with every new bundle written beside it."""
    root = parse_root_uri(root_uri, variable="--root")
    if root.scheme != "file" or path == "-":
        return
    runs = os.path.realpath(os.path.join(root.path, layout.RUNS_DIR))
    target = os.path.realpath(path)
    if os.path.commonpath([runs, target]) == runs:
        raise AuditBundleError(
            f"cannot write the bundle to {path}: it lies inside the run folders of {root_uri} ({runs}), where a file "
            "is an unexpected file of a run; expected a path outside the pipeline root's runs (nothing written)"
        )


def write_archive(top: str, entries: list[BundleEntry]) -> bytes:
    """A deterministic tar.gz of ``entries`` under ``top/`` (sorted; fixed mtime, owner and mode)."""
    paths = [e.path for e in entries]
    if len(paths) != len(set(paths)):
        raise AuditBundleError(f"duplicate bundle entries: {sorted(p for p in paths if paths.count(p) > 1)}")
    buffer = io.BytesIO()
    with (
        gzip.GzipFile(filename="", mode="wb", fileobj=buffer, mtime=0, compresslevel=9) as zipped,
        tarfile.open(fileobj=zipped, mode="w", format=tarfile.PAX_FORMAT) as tar,
    ):
        for entry in sorted(entries, key=lambda e: e.path):
            info = tarfile.TarInfo(f"{top}/{entry.path}")
            info.size, info.mtime, info.mode, info.type = len(entry.data), 0, 0o644, tarfile.REGTYPE
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            tar.addfile(info, io.BytesIO(entry.data))
    return buffer.getvalue()


def _read_view(state: RunState, full_hash: str) -> mlflow_refs.MlflowView | None:
    """MLflow's view of the run; None when it cannot be read (only reachable with allow_failed)."""
    try:
        ref = mlflow_refs.manifest_ref(state.manifest())
        choice = mlflow_refs.choose_tracking_uri(ref, state.env, state.root_uri, state.tracking_uri)
        return mlflow_refs.read_view(choice.uri, ref, full_hash)
    except (Unavailable, Ml8sError):
        return None


def _published_anchor(state: RunState) -> Anchor | None:
    """The latest anchor published on the run's registered model; None when there is none or MLflow cannot say."""
    try:
        ref = mlflow_refs.manifest_ref(state.manifest())
        return anchor_tags.read_published(mlflow_refs.tracking_uri(state.env, state.root_uri), ref.model_name)
    except (Unavailable, Ml8sError):
        return None


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
