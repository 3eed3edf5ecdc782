"""The checks of a run in its store (``ml8s verify``), one function per named check.

Each check owns one question and FAILs with every problem it finds; a check that needs a file another
check owns SKIPs when that file is unreadable (that other check FAILs). docs/audits.md explains them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from ml8s.audit import offline
from ml8s.audit.consistency import cross_problems, header_length
from ml8s.audit.report import CheckResult, failed, passed, verdict
from ml8s.audit.state import RunState
from ml8s.contract import Unavailable, layout
from ml8s.data.sources import fingerprint_data

T = TypeVar("T")
_NO_FILE = "no regular file or directory (a symbolic link, FIFO, socket or device)"


def use(load: Callable[[], T], owner: str) -> T:
    """A record another check owns: :class:`Unavailable` (so SKIP) when it cannot be read."""
    try:
        return load()
    except Unavailable as exc:
        raise Unavailable(str(exc) if "(see check " in str(exc) else f"{exc} (see check {owner})") from exc


def maybe(load: Callable[[], T]) -> T | None:
    try:
        return load()
    except Unavailable:
        return None


def check_marker(state: RunState) -> CheckResult:
    listing = state.listing()
    info = listing.get(layout.SUCCESS_MARKER)
    if not listing:
        return failed("marker", [f"nothing is stored at {state.artifact_root}: no run {state.run_id} under this root"])
    if layout.SUCCESS_MARKER in state.irregular():  # a link to an empty file was listed as the marker, and PASSed
        return failed(
            "marker",
            [
                f"{state.uri(layout.SUCCESS_MARKER)} is no regular file (a symbolic link, FIFO, socket or device); "
                "the marker is an empty regular file the pipeline writes"
            ],
        )
    if info is None:
        return failed(
            "marker",
            [f"{state.uri(layout.SUCCESS_MARKER)} is missing: the run is incomplete, or the marker was removed"],
        )
    if info.size != 0:
        return failed("marker", [f"{layout.SUCCESS_MARKER} holds {info.size} bytes; the marker is always empty"])
    return passed("marker", f"{layout.SUCCESS_MARKER} present (0 bytes)")


def check_config_snapshot(state: RunState) -> CheckResult:
    try:
        snapshot = state.snapshot()
    except Unavailable as exc:
        return failed("config_snapshot", [str(exc)])
    return verdict(
        "config_snapshot", offline.snapshot_problems(snapshot, state.run_id), offline.snapshot_summary(snapshot)
    )


def check_data_fingerprint(state: RunState) -> CheckResult:
    try:
        record = state.fingerprint_record()
    except Unavailable as exc:
        return failed("data_fingerprint", [str(exc)])
    snapshot = use(state.snapshot, "config_snapshot")
    ok = f"{record.fingerprint} recomputed from its {len(record.files)} file token(s); agrees with the snapshot"
    return verdict("data_fingerprint", offline.fingerprint_problems(record, snapshot), ok)


def check_training_metadata(state: RunState) -> CheckResult:
    try:
        metadata = state.metadata()
    except Unavailable as exc:
        return failed("training_metadata", [str(exc)])
    snapshot = use(state.snapshot, "config_snapshot")
    listing = state.listing()
    schema, metrics = (state.read(rel) if rel in listing else None for rel in (layout.FEATURE_SCHEMA, layout.METRICS))
    weights = None
    if layout.MODEL_NATIVE in listing:
        weights = state.head(layout.MODEL_NATIVE, header_length(state.head(layout.MODEL_NATIVE, 8)))
    problems = offline.metadata_problems(metadata, snapshot) + cross_problems(
        metadata, snapshot, schema, metrics, weights
    )
    ok = (
        f"records the {len(metadata.artifacts)} checksummed artifacts; agrees with the canonical config, "
        "feature_schema.json, metrics.json and the native weights"
    )
    return verdict("training_metadata", problems, ok)


def check_manifest(state: RunState) -> CheckResult:
    try:
        manifest = state.manifest()
    except Unavailable as exc:
        return failed("manifest", [str(exc)])
    snapshot = use(state.snapshot, "config_snapshot")
    version = manifest.mlflow.get("model_version")
    ok = f"names run {manifest.run_id} at {manifest.artifact_root}; MLflow model version {version}"
    here = state.as_recorded(manifest.artifact_root)
    return verdict("manifest", offline.manifest_problems(manifest, snapshot, here), ok)


def check_artifacts(state: RunState) -> CheckResult:
    """Every final file of the layout present, each sha256 and size equal to every record of it."""
    snapshot = use(state.snapshot, "config_snapshot")
    expected = offline.final_artifacts(snapshot)
    listing = state.listing()
    problems = [f"{rel} is missing ({state.uri(rel)})" for rel in expected if rel not in listing]
    metadata, manifest = maybe(state.metadata), maybe(state.manifest)
    recorded = offline.recorded_checksums(metadata, manifest)
    actual = {rel: state.digest(rel) for rel in expected if rel in listing and rel in recorded}
    problems += offline.checksum_problems(recorded, actual)
    details = [
        f"{name} unreadable: its checksums were not compared (see check {check})"
        for name, check, record in (
            (layout.TRAINING_METADATA, "training_metadata", metadata),
            (layout.MANIFEST, "manifest", manifest),
        )
        if record is None
    ]
    unrecorded = [rel for rel in expected if rel not in recorded]
    if unrecorded:
        details.append(f"recorded by no checksum, checked by content instead: {', '.join(unrecorded)}")
    by_metadata = sum(1 for rel in actual if any(s == layout.TRAINING_METADATA for s, _ in recorded[rel]))
    by_manifest = sum(1 for rel in actual if any(s == layout.MANIFEST for s, _ in recorded[rel]))
    ok = (
        f"all {len(expected)} final artifacts present; sha256 and size equal training_metadata.json "
        f"({by_metadata} files) and manifest.json ({by_manifest} files)"
    )
    return verdict("artifacts", problems, ok, details)


def check_unexpected_files(state: RunState) -> CheckResult:
    """Nothing under ARTIFACT_ROOT but the layout, in-flight writes (``.tmp/``) and logs (``logs/``)."""
    snapshot = use(state.snapshot, "config_snapshot")
    final = offline.final_artifacts(snapshot)
    allowed = {*final, layout.SUCCESS_MARKER}
    tmp = [rel for rel in state.listing() if rel.startswith(f"{layout.TMP_DIR}/")]
    logs = [rel for rel in state.listing() if rel.startswith(f"{layout.LOGS_DIR}/")]
    extra = [rel for rel in state.listing() if rel not in allowed and rel not in tmp and rel not in logs]
    details = []
    if tmp:
        details.append(
            f"{len(tmp)} in-flight or stale write(s) under {layout.TMP_DIR}/ (allowed; see ml8s tmp-cleanup)"
        )
    if logs:
        details.append(f"{len(logs)} log file(s) under {layout.LOGS_DIR}/ (allowed; logs are not artifacts)")
    problems = [f"unexpected file {rel} ({state.uri(rel)})" for rel in extra]
    # Left out of the listing: a link (to a directory outside the root, say), a FIFO or a device planted in the run.
    # One where a layout file belongs FAILs that file's own check; under .tmp/ and logs/ they are tolerated.
    for rel in state.irregular():
        if not rel:
            problems.append(f"{state.artifact_root}, or a directory on the way to it, is {_NO_FILE}: read through it")
        elif rel not in allowed and not rel.startswith((f"{layout.TMP_DIR}/", f"{layout.LOGS_DIR}/")):
            problems.append(f"unexpected entry {rel} ({state.uri(rel)}): {_NO_FILE}")
    return verdict("unexpected_files", problems, "no file outside the layout", details)


def check_data_recheck(state: RunState) -> CheckResult:
    """``--recheck-data``: fingerprint DATA_ROOT again and report drift (files added, removed, changed)."""
    record = use(state.fingerprint_record, "data_fingerprint")
    now = fingerprint_data(record.data_root)
    if now.fingerprint == record.fingerprint:
        return passed("data_recheck", f"{record.data_root} still fingerprints to {record.fingerprint}")
    before = {f.relative_path: f.token for f in record.files}
    after = {f.relative_path: f.token for f in now.entries}
    drift = [f"added {p}" for p in sorted(set(after) - set(before))]
    drift += [f"removed {p}" for p in sorted(set(before) - set(after))]
    drift += [
        f"changed {p}: {before[p]} -> {after[p]}" for p in sorted(set(before) & set(after)) if before[p] != after[p]
    ]
    return failed(
        "data_recheck",
        [
            f"DATA_ROOT drifted: {record.data_root} now fingerprints to {now.fingerprint}, "
            f"the run recorded {record.fingerprint}"
        ],
        drift,
    )
