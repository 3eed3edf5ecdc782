"""The run contract's models (ml8s.contract): the bytes a writer produces parse back to the same model,
and anything else (retyped, unknown, reformatted, truncated, not UTF-8) is a named error."""

from __future__ import annotations

import json

import pytest
from pydantic import JsonValue

from ml8s.contract import (
    ArtifactDigest,
    ArtifactRef,
    ConfigSnapshot,
    ContractFile,
    DeterminismRecord,
    ExportRecord,
    FeatureSchema,
    FingerprintRecord,
    Incident,
    IndicatorFeature,
    Invalid,
    Manifest,
    Metrics,
    ModelRecord,
    ModelSpec,
    NumberFeature,
    OneHotFeature,
    RerunAudit,
    RowCounts,
    SplitRecord,
    TargetRecord,
    TrainingMetadata,
    TrainingRecord,
    load,
    parse,
)
from ml8s.data.fingerprint import FileEntry, fingerprint_entries
from ml8s.errors import IntegrityError
from ml8s.identity.hashing import canonical_bytes, compute_identity
from ml8s.identity.variables import canonical_config

HEX = "ab" * 32


def snapshot() -> ConfigSnapshot:
    config = canonical_config({"DATA_ROOT": "/data", "TARGET_COLUMN": "y"})
    return ConfigSnapshot.of(compute_identity(config, HEX))


def schema(*, standardized: bool) -> FeatureSchema:
    scale = {"scale_mean": 2.5, "scale_std": 0.5} if standardized else {}
    return FeatureSchema(
        schema_version=1,
        features=[
            NumberFeature(kind="numeric", name="age", source="age", impute=2.5, train_variance=0.25, **scale),
            IndicatorFeature(kind="indicator", name="age__missing", source="age", train_variance=0.1),
            OneHotFeature(kind="onehot", name="plan=pro", source="plan", category="pro", train_variance=0.2),
        ],
        target=TargetRecord(column="y", classes=["no", "yes"], encoded_as="__target__"),
        split=SplitRecord(column="__split__", train=0, test=1),
        dropped_columns={"id": "identifier: every value distinct"},
        rows=RowCounts(read=10, missing_target_dropped=0, kept=10, train=8, test=2),
        rows_per_file={"a.csv": 10},
    )


def metrics(roc_auc: float | None) -> Metrics:
    return Metrics(
        accuracy=0.5,
        final_train_loss=0.25,
        log_loss=0.75,
        macro_f1=0.5,
        majority_class_accuracy=0.5,
        roc_auc=roc_auc,
        test_rows=2,
        train_rows=8,
    )


def metadata() -> TrainingMetadata:
    return TrainingMetadata(
        artifacts={"metrics.json": ArtifactDigest(sha256=HEX, size=3)},
        canonicalization_version="1.0.0",
        determinism=DeterminismRecord(
            cublas_workspace_config=":4096:8",
            cudnn_benchmark=False,
            cudnn_deterministic=True,
            device="cpu",
            torch_num_threads=1,
            use_deterministic_algorithms=True,
        ),
        export=ExportRecord(format="safetensors", held_out_rows=2, max_abs_diff=0.0, onnx_opset=None, tolerance=1e-4),
        model=ModelRecord(
            architecture="logreg:3-2",
            classes=["no", "yes"],
            feature_names=["a", "b", "c"],
            parameter_count=8,
            spec=ModelSpec(model_type="logreg", n_features=3, n_classes=2, hidden_units=4, hidden_layers=0),
        ),
        training=TrainingRecord(
            batch_size=4,
            epoch_losses=[0.5, 0.25],
            epochs=2,
            learning_rate=0.01,
            optimizer="adam",
            random_seed=1,
            test_rows=2,
            train_rows=8,
        ),
        versions={"python": "3.11.7"},
    )


def manifest() -> Manifest:
    return Manifest(
        run_id="a" * 12,
        full_config_hash=HEX,
        data_fingerprint=HEX,
        canonicalization_version="1.0.0",
        artifact_root="file:///r/ml8s_training_runs/aaaaaaaaaaaa",
        artifacts={"metrics.json": ArtifactRef(uri="file:///r/metrics.json", sha256=HEX, size=3)},
        mlflow={"model_version": "1"},
        force_rerun=RerunAudit(reproduced=False, changed=("metrics.json",), previous_sha256={"metrics.json": HEX}),
    )


def fingerprint() -> FingerprintRecord:
    files = [FileEntry(relative_path="a.csv", checksum=HEX, size=10)]
    digest = fingerprint_entries(files)
    return FingerprintRecord(
        algorithm="sha256", checksum="sha256", data_root="file:///d", fingerprint=digest, files=files
    )


def incident() -> Incident:
    stored: dict[str, JsonValue] = {"full_config_hash": "f" * 64, "nested": {"list": [1, 2.5, None, True]}}
    return Incident(
        kind="RUN_ID_HASH_COLLISION",
        run_id="a" * 12,
        artifact_root="file:///r",
        stored=stored,
        computed=snapshot(),
        worker={"worker_id": "w", "hostname": "h"},
        recorded_at="2026-01-01T00:00:00+00:00",
    )


FILES: list[ContractFile] = [
    snapshot(),
    fingerprint(),
    schema(standardized=True),
    schema(standardized=False),
    metrics(0.75),
    metrics(None),
    metadata(),
    manifest(),
    incident(),
]


@pytest.mark.parametrize("record", FILES, ids=lambda r: type(r).__name__)
def test_written_bytes_parse_back_to_the_same_model(record: ContractFile) -> None:
    data = record.to_bytes()
    assert data == canonical_bytes(json.loads(data))  # canonical: sorted keys, indent 2, newline
    assert parse("f.json", data, type(record)) == record


def test_optional_fields_are_absent_never_null() -> None:
    assert "roc_auc" not in json.loads(metrics(None).to_bytes())
    assert json.loads(metrics(0.75).to_bytes())["roc_auc"] == 0.75
    numeric = json.loads(schema(standardized=False).to_bytes())["features"][0]
    assert sorted(numeric) == ["impute", "kind", "name", "source", "train_variance"]
    assert json.loads(schema(standardized=True).to_bytes())["features"][0]["scale_std"] == 0.5
    assert json.loads(metadata().to_bytes())["export"]["onnx_opset"] is None  # a recorded "none" stays null


def test_the_config_snapshot_is_the_identity() -> None:
    ident = compute_identity(canonical_config({"DATA_ROOT": "/data", "TARGET_COLUMN": "y"}), HEX)
    record = ConfigSnapshot.of(ident)
    assert (record.run_id, record.full_config_hash, record.canonical_config) == (
        ident.run_id,
        ident.full_config_hash,
        ident.canonical_config,
    )


def edit(record: ContractFile, change: dict[str, object]) -> bytes:
    raw = json.loads(record.to_bytes())
    raw.update(change)
    return canonical_bytes(raw)


@pytest.mark.parametrize(
    ("record", "change", "where"),
    [
        (metrics(0.5), {"test_rows": "2"}, "test_rows"),
        (metrics(0.5), {"test_rows": 2.0}, "test_rows"),
        (metrics(0.5), {"accuracy": "0.5"}, "accuracy"),
        (metrics(0.5), {"extra": 1}, "extra"),
        (snapshot(), {"run_id": None}, "run_id"),
        (manifest(), {"artifacts": {"x": {"sha256": HEX, "size": 1}}}, "artifacts.x.uri"),
        (schema(standardized=True), {"features": [{"kind": "spline", "name": "a"}]}, "features.0"),
        (metadata(), {"versions": {"python": 3}}, "versions.python"),
    ],
)
def test_a_retyped_or_unknown_field_is_invalid(record: ContractFile, change: dict[str, object], where: str) -> None:
    with pytest.raises(Invalid, match=f"f.json is not a valid record: {where}"):
        parse("f.json", edit(record, change), type(record))


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "not valid UTF-8 JSON"),
        (metrics(0.5).to_bytes()[:-20], "not valid UTF-8 JSON"),  # truncated
        (b"\xff\xfe{}", "not valid UTF-8 JSON"),
        (metrics(0.5).to_bytes().replace(b"0.5", b"NaN", 1), "canonical form"),
        (metrics(0.5).to_bytes().replace(b"  ", b"    "), "canonical form"),
        (metrics(0.5).to_bytes().rstrip(b"\n"), "canonical form"),
        (b"[1, 2]\n", "not a valid record"),
    ],
)
def test_malformed_bytes_are_invalid(data: bytes, message: str) -> None:
    with pytest.raises(Invalid, match=message):
        parse("f.json", data, Metrics)


def test_a_pipeline_step_reads_a_malformed_file_as_an_integrity_error() -> None:
    flipped = bytearray(metadata().to_bytes())
    flipped[flipped.index(b'"epochs": 2') + 10] = ord("x")
    with pytest.raises(IntegrityError, match=r"file:///r/training_metadata\.json is not valid UTF-8 JSON"):
        load("file:///r/training_metadata.json", bytes(flipped), TrainingMetadata)
    assert load("u", metadata().to_bytes(), TrainingMetadata) == metadata()


def test_a_writer_cannot_coerce_a_value_into_another_json_type() -> None:
    with pytest.raises(ValueError, match="test_rows"):
        Metrics.model_validate({**metrics(0.5).model_dump(), "test_rows": 2.0})
