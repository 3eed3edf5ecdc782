"""The checks that need no store and no MLflow: pure functions over the recorded files.

``ml8s verify`` (a run in its store) and ``ml8s audit verify`` (a bundle) both call these, so a run
and its bundle are judged by the same code. Each returns the problems found (empty = PASS).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping

from ml8s.contract import ConfigSnapshot, FingerprintRecord, Manifest, TrainingMetadata, layout
from ml8s.data.fingerprint import fingerprint_entries
from ml8s.identity.hashing import full_config_hash
from ml8s.identity.model_code import model_code_problem
from ml8s.identity.variables import canonical_json
from ml8s.identity.versions import CANONICAL_KEYS, expected_keys, world_size_of
from ml8s.modeling.families import MODEL_FORMATS

# Every canonicalization version this verifier can recompute (SPEC §2): ml8s.identity.versions lists them.
KNOWN_CANONICALIZATION_VERSIONS = frozenset(CANONICAL_KEYS)
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_RUN_ID = re.compile(r"^[0-9a-f]{12}$")
# training_metadata.json "training" fields that must equal the canonical config's values.
_TRAINING_FROM_CONFIG = ("batch_size", "epochs", "learning_rate", "random_seed")

Digest = tuple[str, int]  # (sha256, size)


def is_run_id(text: str) -> bool:
    return bool(_RUN_ID.fullmatch(text))


def identity_mode(snapshot: ConfigSnapshot) -> str | None:
    """``"strict"`` when FULL_CONFIG_HASH = sha256(CANONICAL_JSON + "\\n" + DATA_FINGERPRINT),
    ``"non-strict"`` when it hashes an empty fingerprint (STRICT_DATA_IDENTITY=false), None when neither."""
    text = canonical_json(snapshot.canonical_config)
    if full_config_hash(text, snapshot.data_fingerprint) == snapshot.full_config_hash:
        return "strict"
    if full_config_hash(text, "") == snapshot.full_config_hash:
        return "non-strict"
    return None


def snapshot_problems(snapshot: ConfigSnapshot, run_id: str) -> list[str]:
    """The snapshot's hash recomputed from its canonical config and fingerprint, its run id, its version."""
    problems: list[str] = []
    if snapshot.canonicalization_version not in KNOWN_CANONICALIZATION_VERSIONS:
        problems.append(
            f"canonicalization_version {snapshot.canonicalization_version!r} is unknown to this verifier "
            f"(known: {sorted(KNOWN_CANONICALIZATION_VERSIONS)})"
        )
    keys = expected_keys(snapshot.canonicalization_version, snapshot.canonical_config)
    if sorted(snapshot.canonical_config) != keys:
        problems.append(
            f"canonical_config has keys {sorted(snapshot.canonical_config)}; expected exactly the keys of "
            f"canonicalization {snapshot.canonicalization_version} {keys}"
        )
    code_problem = model_code_problem(snapshot.canonical_config)
    if code_problem is not None:
        problems.append(code_problem)
    if not _HEX64.fullmatch(snapshot.full_config_hash):
        problems.append(f"full_config_hash {snapshot.full_config_hash!r} is not 64 lowercase hex digits")
    if snapshot.run_id != run_id:
        problems.append(f"run_id is {snapshot.run_id!r}; expected {run_id!r} (the run's directory)")
    if snapshot.full_config_hash[:12] != snapshot.run_id:
        problems.append(f"run_id {snapshot.run_id!r} is not FULL_CONFIG_HASH[:12] of {snapshot.full_config_hash}")
    if not _HEX64.fullmatch(snapshot.data_fingerprint):
        problems.append(f"data_fingerprint {snapshot.data_fingerprint!r} is not 64 lowercase hex digits")
    if identity_mode(snapshot) is None:
        text = canonical_json(snapshot.canonical_config)
        problems.append(
            f"full_config_hash {snapshot.full_config_hash} is not sha256(CANONICAL_JSON + '\\n' + DATA_FINGERPRINT) "
            f"= {full_config_hash(text, snapshot.data_fingerprint)} (strict) nor sha256(CANONICAL_JSON + '\\n') = "
            f"{full_config_hash(text, '')} (non-strict)"
        )
    return problems


def snapshot_summary(snapshot: ConfigSnapshot) -> str:
    mode = identity_mode(snapshot)
    how = "canonical config + data fingerprint" if mode == "strict" else "canonical config alone"
    return (
        f"FULL_CONFIG_HASH {snapshot.full_config_hash} recomputed ({mode} identity: {how}); "
        f"canonicalization {snapshot.canonicalization_version}"
    )


def fingerprint_problems(record: FingerprintRecord, snapshot: ConfigSnapshot) -> list[str]:
    """The record agrees with the snapshot and its fingerprint is recomputed from its own tokens."""
    problems: list[str] = []
    if record.fingerprint != snapshot.data_fingerprint:
        problems.append(
            f"fingerprint {record.fingerprint} differs from config_snapshot.json's data_fingerprint "
            f"{snapshot.data_fingerprint}"
        )
    recomputed = fingerprint_entries(record.files)
    if recomputed != record.fingerprint:
        problems.append(f"fingerprint {record.fingerprint} is not the sha256 of its file tokens ({recomputed})")
    names = [f.relative_path for f in record.files]
    if names != sorted(set(names)):
        problems.append("files are not sorted by relative path, or list a file twice")
    if not record.files:
        problems.append("files is empty; a fingerprint covers at least one data file")
    if record.data_root != snapshot.canonical_config.get("data_root"):
        problems.append(
            f"data_root {record.data_root!r} differs from the canonical config's "
            f"{snapshot.canonical_config.get('data_root')!r}"
        )
    return problems


def model_format(snapshot: ConfigSnapshot) -> str:
    fmt = snapshot.canonical_config.get("model_format")
    return fmt if isinstance(fmt, str) and fmt in MODEL_FORMATS else "onnx"


def final_artifacts(snapshot: ConfigSnapshot) -> tuple[str, ...]:
    """The layout's final files of the run the snapshot records (its format, version and world size)."""
    return layout.final_artifacts(
        model_format(snapshot), snapshot.canonicalization_version, world_size_of(snapshot.canonical_config)
    )


def metadata_problems(metadata: TrainingMetadata, snapshot: ConfigSnapshot) -> list[str]:
    """What training_metadata.json can be checked against: the layout and the canonical config."""
    problems: list[str] = []
    fmt = model_format(snapshot)
    expected = sorted(
        layout.checksummed_artifacts(fmt, snapshot.canonicalization_version, world_size_of(snapshot.canonical_config))
    )
    if sorted(metadata.artifacts) != expected:
        problems.append(f"artifacts records {sorted(metadata.artifacts)}; expected exactly {expected}")
    if metadata.canonicalization_version != snapshot.canonicalization_version:
        problems.append(
            f"canonicalization_version {metadata.canonicalization_version!r} differs from the snapshot's "
            f"{snapshot.canonicalization_version!r}"
        )
    for name in _TRAINING_FROM_CONFIG:
        if getattr(metadata.training, name) != snapshot.canonical_config.get(name):
            problems.append(
                f"training.{name} is {getattr(metadata.training, name)!r}; the canonical config says "
                f"{snapshot.canonical_config.get(name)!r}"
            )
    if metadata.export.format != fmt:
        problems.append(f"export.format is {metadata.export.format!r}; the canonical config says {fmt!r}")
    return problems


def manifest_problems(manifest: Manifest, snapshot: ConfigSnapshot, artifact_root: str) -> list[str]:
    """The manifest names this run, this ARTIFACT_ROOT and exactly the layout's recorded artifacts."""
    problems: list[str] = []
    for field in ("run_id", "full_config_hash", "data_fingerprint", "canonicalization_version"):
        if getattr(manifest, field) != getattr(snapshot, field):
            problems.append(
                f"{field} is {getattr(manifest, field)!r}; config_snapshot.json says {getattr(snapshot, field)!r}"
            )
    if other := layout.other_root(manifest.artifact_root, artifact_root, manifest.run_id):
        problems.append(
            f"recorded at another root: artifact_root is {manifest.artifact_root}; the run is at {artifact_root} "
            f"(the pipeline root was copied or moved from {other}: FORCE_RERUN=true at this root writes a manifest "
            "naming it, or verify it with --root at the root it was recorded at)"
        )
    elif manifest.artifact_root != artifact_root:
        problems.append(f"artifact_root is {manifest.artifact_root}; the run is at {artifact_root}")
    fmt = model_format(snapshot)
    world = world_size_of(snapshot.canonical_config)
    required = {
        *layout.checksummed_artifacts(fmt, snapshot.canonicalization_version, world),
        *layout.identity_artifacts(),
    }
    allowed = required | {layout.TRAINING_METADATA}
    if not required <= set(manifest.artifacts) <= allowed:
        problems.append(f"artifacts records {sorted(manifest.artifacts)}; expected {sorted(required)}")
    for rel, ref in sorted(manifest.artifacts.items()):
        if ref.uri != f"{manifest.artifact_root}/{rel}":
            problems.append(f"artifacts[{rel!r}].uri is {ref.uri}; expected {manifest.artifact_root}/{rel}")
    audit = manifest.force_rerun
    if audit is not None and audit.reproduced != (bool(audit.previous_sha256) and not audit.changed):
        problems.append("force_rerun.reproduced contradicts its own changed/previous_sha256 lists")
    return problems


def recorded_checksums(
    metadata: TrainingMetadata | None, manifest: Manifest | None
) -> dict[str, list[tuple[str, Digest]]]:
    """Every recorded (sha256, size) per artifact, with the file that records it."""
    out: dict[str, list[tuple[str, Digest]]] = {}
    if metadata is not None:
        for rel, entry in metadata.artifacts.items():
            out.setdefault(rel, []).append((layout.TRAINING_METADATA, (entry.sha256, entry.size)))
    if manifest is not None:
        for rel, ref in manifest.artifacts.items():
            out.setdefault(rel, []).append((layout.MANIFEST, (ref.sha256, ref.size)))
    return out


def checksum_problems(
    recorded: Mapping[str, list[tuple[str, Digest]]], actual: Mapping[str, Digest], *, sizes: bool = True
) -> list[str]:
    """Each recorded checksum against the actual one (files absent from ``actual`` are reported elsewhere)."""
    problems: list[str] = []
    for rel in sorted(recorded):
        if rel not in actual:
            continue
        sha, size = actual[rel]
        for source, (want_sha, want_size) in recorded[rel]:
            if sha != want_sha or (sizes and size != want_size):
                shown = f" ({size} bytes)" if sizes else ""
                wanted = f" ({want_size} bytes)" if sizes else ""
                problems.append(f"{rel}: sha256 {sha}{shown}, but {source} records {want_sha}{wanted}")
    return problems


def pretty(obj: object) -> bytes:
    """JSON for the files the verifiers write (reports, MLflow references): sorted, indented, newline."""
    return (json.dumps(obj, sort_keys=True, indent=2, ensure_ascii=False) + "\n").encode("utf-8")
