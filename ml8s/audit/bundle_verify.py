"""``ml8s audit verify FILE``: re-verify an audit bundle offline (no store, no MLflow).

The archive is read in memory, never extracted. Checks (named like the run's, where they mean the same):
``archive`` (readable, safe members, the expected entries), ``checksums`` (every member against
checksums.sha256), ``config_snapshot`` and ``data_fingerprint`` (hashes recomputed), ``training_metadata``
and ``manifest`` (consistency), ``artifacts`` (recorded checksums against the bundled checksum list and
the bundled files), ``mlflow`` (the saved MLflow view against the run's records), ``verification`` (the
run passed verification when bundled). The chain integration adds a ``chain`` check on chain_proof.json.
"""

from __future__ import annotations

import hashlib

from ml8s.audit import bundle as b
from ml8s.audit import mlflow_refs, offline
from ml8s.audit.bundle_open import OpenedBundle, open_bundle
from ml8s.audit.chain_proof import ANCHOR, CHAIN_PROOF, anchor_problems, proof_problems
from ml8s.audit.consistency import cross_problems
from ml8s.audit.report import (
    Check,
    CheckResult,
    Report,
    Status,
    failed,
    make_report,
    run_checks,
    verdict,
)
from ml8s.audit.run_checks import maybe, use
from ml8s.audit.verify_md import verify_md
from ml8s.contract import (
    Invalid,
    layout,
)
from ml8s.identity.versions import world_size_of
from ml8s.text import shown

REQUIRED = (
    b.INDEX,
    b.CHECKSUMS,
    b.VERIFY_MD,
    b.ARTIFACT_CHECKSUMS,
    b.VERIFICATION,
    b.MLFLOW,
    CHAIN_PROOF,
    *(f"{b.RUN_DIR}/{rel}" for rel in b.RECORDS),
)


def check_archive(bundle: OpenedBundle) -> CheckResult:
    problems = list(bundle.problems)
    if not problems:
        problems += [f"{rel} is missing" for rel in REQUIRED if rel not in bundle.members]
        index = maybe(lambda: bundle.parse(b.INDEX, b.BundleIndex))
        if index is None and b.INDEX in bundle.members:
            problems.append(f"{b.INDEX} is not a valid bundle index")
        elif index is not None:
            if index.format != b.FORMAT:
                problems.append(f"format {index.format!r} is not {b.FORMAT!r}")
            if bundle.top != f"ml8s-audit-{index.run_id}":
                problems.append(f"top directory {bundle.top!r} is not ml8s-audit-{index.run_id}")
    ok = f"{len(bundle.members)} members under {bundle.top}/, all regular files with safe names"
    return verdict("archive", problems, ok)


def check_checksums(bundle: OpenedBundle) -> CheckResult:
    try:
        listed = bundle.checksum_list(b.CHECKSUMS)
    except Invalid as exc:  # a missing entry is the archive check's FAIL; here it SKIPs
        return failed("checksums", [str(exc)])
    others = set(bundle.members) - {b.CHECKSUMS}
    problems = [f"{shown(rel)} is in the bundle but not in {b.CHECKSUMS}" for rel in sorted(others - set(listed))]
    problems += [
        f"{shown(rel)} is listed in {b.CHECKSUMS} but not in the bundle" for rel in sorted(set(listed) - others)
    ]
    for rel in sorted(others & set(listed)):
        digest = hashlib.sha256(bundle.members[rel]).hexdigest()
        if digest != listed[rel]:
            problems.append(f"{rel}: sha256 {digest}, but {b.CHECKSUMS} lists {listed[rel]}")
    return verdict("checksums", problems, f"all {len(listed)} members match {b.CHECKSUMS}")


def check_config_snapshot(bundle: OpenedBundle) -> CheckResult:
    try:
        snapshot = bundle.snapshot()
    except Invalid as exc:  # a missing entry is the archive check's FAIL; here it SKIPs
        return failed("config_snapshot", [str(exc)])
    problems = offline.snapshot_problems(snapshot, bundle.index().run_id)
    return verdict("config_snapshot", problems, offline.snapshot_summary(snapshot))


def check_data_fingerprint(bundle: OpenedBundle) -> CheckResult:
    try:
        record = bundle.fingerprint_record()
    except Invalid as exc:  # a missing entry is the archive check's FAIL; here it SKIPs
        return failed("data_fingerprint", [str(exc)])
    problems = offline.fingerprint_problems(record, use(bundle.snapshot, "config_snapshot"))
    return verdict("data_fingerprint", problems, f"{record.fingerprint} recomputed from {len(record.files)} token(s)")


def check_training_metadata(bundle: OpenedBundle) -> CheckResult:
    try:
        metadata = bundle.metadata()
    except Invalid as exc:  # a missing entry is the archive check's FAIL; here it SKIPs
        return failed("training_metadata", [str(exc)])
    snapshot = use(bundle.snapshot, "config_snapshot")
    schema, metrics, weights = (
        bundle.members.get(f"{b.RUN_DIR}/{rel}") for rel in (layout.FEATURE_SCHEMA, layout.METRICS, layout.MODEL_NATIVE)
    )
    problems = offline.metadata_problems(metadata, snapshot) + cross_problems(
        metadata, snapshot, schema, metrics, weights
    )
    ok = "agrees with the canonical config, feature_schema.json, metrics.json" + (
        " and the native weights" if weights is not None else " (native weights not bundled)"
    )
    return verdict("training_metadata", problems, ok)


def check_manifest(bundle: OpenedBundle) -> CheckResult:
    try:
        manifest = bundle.manifest()
    except Invalid as exc:  # a missing entry is the archive check's FAIL; here it SKIPs
        return failed("manifest", [str(exc)])
    snapshot, index = use(bundle.snapshot, "config_snapshot"), bundle.index()
    problems = offline.manifest_problems(manifest, snapshot, index.artifact_root)
    return verdict("manifest", problems, f"names run {manifest.run_id} at {manifest.artifact_root}")


def check_artifacts(bundle: OpenedBundle) -> CheckResult:
    """Recorded checksums (training_metadata.json, manifest.json) = the bundled list = the bundled files."""
    snapshot = use(bundle.snapshot, "config_snapshot")
    index = bundle.index()
    try:
        listed = bundle.checksum_list(b.ARTIFACT_CHECKSUMS)
    except Invalid as exc:  # a missing entry is the archive check's FAIL; here it SKIPs
        return failed("artifacts", [str(exc)])
    expected = set(offline.final_artifacts(snapshot))
    problems = [f"{b.ARTIFACT_CHECKSUMS} lacks {rel}" for rel in sorted(expected - set(listed))]
    problems += [f"{b.ARTIFACT_CHECKSUMS} lists {rel}, not an artifact" for rel in sorted(set(listed) - expected)]
    recorded = offline.recorded_checksums(maybe(bundle.metadata), maybe(bundle.manifest))
    problems += offline.checksum_problems(recorded, {rel: (sha, 0) for rel, sha in listed.items()}, sizes=False)
    bundled = {
        rel[len(b.RUN_DIR) + 1 :]: data for rel, data in bundle.members.items() if rel.startswith(b.RUN_DIR + "/")
    }
    problems += [
        f"model file {rel} named in {b.INDEX} is not bundled" for rel in index.model_files if rel not in bundled
    ]
    actual = {rel: (hashlib.sha256(data).hexdigest(), len(data)) for rel, data in bundled.items()}
    problems += offline.checksum_problems(recorded, actual)
    problems += [
        f"{b.RUN_DIR}/{shown(rel)} is bundled, but {b.ARTIFACT_CHECKSUMS} does not list it"
        if rel not in listed
        else f"{b.RUN_DIR}/{shown(rel)}: sha256 {sha}, but {b.ARTIFACT_CHECKSUMS} lists {listed[rel]}"
        for rel, (sha, _) in sorted(actual.items())
        if listed.get(rel) != sha
    ]
    ok = (
        f"{len(listed)} artifact checksums agree with training_metadata.json and manifest.json; "
        f"{len(bundled)} bundled run files match them"
    )
    return verdict("artifacts", problems, ok)


def check_mlflow(bundle: OpenedBundle) -> CheckResult:
    snapshot, index = use(bundle.snapshot, "config_snapshot"), bundle.index()
    ref = mlflow_refs.manifest_ref(use(bundle.manifest, "manifest"))
    try:
        view = bundle.parse(b.MLFLOW, mlflow_refs.MlflowView)
    except Invalid as exc:  # a missing entry is the archive check's FAIL; here it SKIPs
        return failed("mlflow", [str(exc)])
    ok = f"model {view.model_name!r} version {view.model_version} carried this run's tags when bundled"
    return verdict("mlflow", mlflow_refs.view_problems(view, ref, snapshot, index.artifact_root), ok)


def check_chain_proof(bundle: OpenedBundle) -> CheckResult:
    """Genesis → the run's block → the head at bundle time, every hash recomputed offline."""
    snapshot = use(bundle.snapshot, "config_snapshot")
    manifest = bundle.read(f"{b.RUN_DIR}/{layout.MANIFEST}")
    try:
        listed = bundle.checksum_list(b.ARTIFACT_CHECKSUMS)
    except Invalid:
        listed = {}
    payload_sha256: dict[str, str | None] = {}
    for name, rel in layout.chain_payload_files(
        offline.model_format(snapshot), snapshot.canonicalization_version, world_size_of(snapshot.canonical_config)
    ):
        data = bundle.members.get(f"{b.RUN_DIR}/{rel}")
        payload_sha256[name] = hashlib.sha256(data).hexdigest() if data is not None else listed.get(rel)
    index = bundle.index()
    notes: list[str] = []
    problems = proof_problems(
        bundle.read(CHAIN_PROOF),
        snapshot.full_config_hash,
        manifest,
        payload_sha256,
        run_id=index.run_id,
        artifact_root=index.artifact_root,
        notes=notes,
    )
    problems += anchor_problems(bundle.members.get(ANCHOR), bundle.read(CHAIN_PROOF))
    anchored = " and agrees with the bundled anchor" if ANCHOR in bundle.members else ""
    return verdict(
        "chain", problems, f"the run's block links to genesis and to the head{anchored}; it holds these files", notes
    )


def check_verification(bundle: OpenedBundle) -> CheckResult:
    try:
        report = bundle.parse(b.VERIFICATION, Report)
    except Invalid as exc:  # a missing entry is the archive check's FAIL; here it SKIPs
        return failed("verification", [str(exc)])
    index = bundle.index()
    problems = [] if report.passed else [f"the stored run FAILed verification when bundled: {list(report.failed())}"]
    if report.subject != index.run_id or report.status.value != index.verification_status:
        problems.append(f"{b.VERIFICATION} ({report.subject}, {report.status.value}) contradicts {b.INDEX}")
    return verdict("verification", problems, f"the stored run passed all {len(report.checks)} checks when bundled")


def check_verify_md(bundle: OpenedBundle) -> CheckResult:
    """VERIFY.md is exactly the text the bundle's own content gives (its instructions were not edited)."""
    index = bundle.index()
    record = use(bundle.fingerprint_record, "data_fingerprint")
    expected = verify_md(
        artifact_root=index.artifact_root,
        snapshot=use(bundle.snapshot, "config_snapshot"),
        checksum_kind=record.checksum,
        artifact_sha256=use(lambda: bundle.checksum_list(b.ARTIFACT_CHECKSUMS), "artifacts"),
        report=use(lambda: bundle.parse(b.VERIFICATION, Report), "verification"),
        view=maybe(lambda: bundle.parse(b.MLFLOW, mlflow_refs.MlflowView)),
        models=index.model_files,
    )
    if bundle.read(b.VERIFY_MD) != expected.encode("utf-8"):
        return failed("verify_md", [f"{b.VERIFY_MD} differs from the text the bundle's content gives: it was edited"])
    return CheckResult(name="verify_md", status=Status.PASS, reason=f"{b.VERIFY_MD} matches the bundle's content")


BUNDLE_CHECKS: tuple[Check[OpenedBundle], ...] = (
    Check("archive", check_archive),
    Check("checksums", check_checksums),
    Check("config_snapshot", check_config_snapshot),
    Check("data_fingerprint", check_data_fingerprint),
    Check("training_metadata", check_training_metadata),
    Check("manifest", check_manifest),
    Check("artifacts", check_artifacts),
    Check("mlflow", check_mlflow),
    Check("chain", check_chain_proof),
    Check("verification", check_verification),
    Check("verify_md", check_verify_md),
)


def verify_bundle(path: str, checks: tuple[Check[OpenedBundle], ...] = BUNDLE_CHECKS) -> Report:
    """Verify the bundle at ``path`` offline; the report names each failed check."""
    bundle = open_bundle(path)
    subject = bundle.top.removeprefix("ml8s-audit-") or "?"
    return make_report("audit verify", subject, path, run_checks(checks, bundle))
