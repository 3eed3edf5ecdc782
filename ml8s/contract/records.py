"""The recorded files of a run, as the verifiers read them (pydantic, ``extra="forbid"``).

``parse`` turns bytes into a model or raises :class:`Invalid` (an :class:`Unavailable`)
naming the file and the problem, so a check that merely *uses* a file skips, and the check that *owns*
it fails.
"""

from __future__ import annotations

import json
from typing import TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from ml8s.data.fingerprint import FileEntry
from ml8s.identity.hashing import canonical_bytes
from ml8s.identity.variables import JsonScalar, JsonValue


class Unavailable(Exception):
    """A check cannot run: an input it needs is missing or unreadable. The runner reports it as SKIP
    (the check that owns that input FAILs for it)."""


class Invalid(Unavailable):
    """A record is present but malformed: the check that owns it FAILs (a missing one may only SKIP)."""


_STRICT = ConfigDict(extra="forbid", frozen=True, strict=True)


class ConfigSnapshot(BaseModel):
    """``config_snapshot.json``."""

    model_config = _STRICT

    canonical_config: dict[str, JsonValue]
    canonicalization_version: str
    data_fingerprint: str
    full_config_hash: str
    run_id: str


class FingerprintRecord(BaseModel):
    """``data_fingerprint.json``: the fingerprint and every token it was computed from."""

    model_config = _STRICT

    algorithm: str
    checksum: str
    data_root: str
    fingerprint: str
    files: list[FileEntry]


class ArtifactChecksum(BaseModel):
    model_config = _STRICT

    sha256: str
    size: int


class ModelSpecRecord(BaseModel):
    model_config = _STRICT

    model_type: str
    n_features: int
    n_classes: int
    hidden_units: int
    hidden_layers: int


class ModelRecord(BaseModel):
    model_config = _STRICT

    architecture: str
    classes: list[JsonScalar]
    feature_names: list[str]
    parameter_count: int
    spec: ModelSpecRecord


class TrainingRecord(BaseModel):
    model_config = _STRICT

    batch_size: int
    epoch_losses: list[float]
    epochs: int
    learning_rate: float
    optimizer: str
    random_seed: int
    test_rows: int
    train_rows: int


class ExportRecord(BaseModel):
    model_config = _STRICT

    format: str
    held_out_rows: int
    max_abs_diff: float
    onnx_opset: int | None
    tolerance: float


class DeterminismRecord(BaseModel):
    model_config = _STRICT

    cublas_workspace_config: str
    cudnn_benchmark: bool
    cudnn_deterministic: bool
    device: str
    torch_num_threads: int | None
    use_deterministic_algorithms: bool


class TrainingMetadata(BaseModel):
    """``training_metadata.json``, every field typed strictly: an unknown, renamed or retyped field FAILs."""

    model_config = _STRICT

    artifacts: dict[str, ArtifactChecksum]
    canonicalization_version: str
    determinism: DeterminismRecord
    export: ExportRecord
    model: ModelRecord
    training: TrainingRecord
    versions: dict[str, str]


M = TypeVar("M", bound=BaseModel)


def parse(rel: str, data: bytes, model: type[M]) -> M:
    """Validate ``data`` as ``model``; also require the canonical JSON form the pipeline writes
    (sorted keys, 2-space indent, trailing newline), so a reformatted file is noticed too."""
    try:
        raw: object = json.loads(data)
        parsed = model.model_validate(raw)
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(part) for part in error["loc"]) or "(top level)"
        raise Invalid(f"{rel} is not a valid record: {where}: {error['msg']}") from exc
    except ValueError as exc:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise Invalid(f"{rel} is not valid UTF-8 JSON: {exc}") from exc
    if canonical_bytes(raw) != data:
        raise Invalid(f"{rel} is not in the canonical form ml8s writes (edited by hand or by another tool)")
    return parsed


def checksum_lines(checksums: dict[str, str]) -> bytes:
    """``sha256sum`` format (``<hex>  <path>``), sorted by path: ``sha256sum -c`` checks it."""
    return "".join(f"{digest}  {path}\n" for path, digest in sorted(checksums.items())).encode("utf-8")


def parse_checksum_lines(rel: str, data: bytes) -> dict[str, str]:
    """Inverse of :func:`checksum_lines`; a malformed, duplicated or unsorted line is an error."""
    out: dict[str, str] = {}
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise Invalid(f"{rel} is not UTF-8 text") from exc
    for number, line in enumerate(text.splitlines(), start=1):
        digest, sep, path = line.partition("  ")
        if not sep or len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest) or not path:
            raise Invalid(f"{rel} line {number} is not '<sha256 hex>  <path>': {line[:80]!r}")
        if path in out:
            raise Invalid(f"{rel} lists {path} twice")
        out[path] = digest
    if checksum_lines(out) != data:
        raise Invalid(f"{rel} is not sorted by path with one trailing newline per line")
    return out
