"""The three files a run's model serves from, read from a run or a model directory and checked.

``features/feature_schema.json`` (the transform and the class order), ``model/model.<fmt>`` (the network)
and ``training_metadata.json`` (the format, and the sha256 of the other two). Whatever they were read from,
the two are checked against the recorded checksums before anything predicts, so a prediction is always
made by the files the run produced.
"""

from __future__ import annotations

import hashlib
import os
import posixpath
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from ml8s.chain import ChainStore, ChainVersion
from ml8s.contract import layout
from ml8s.errors import InferenceError, IntegrityError, NotFoundError, StoreError
from ml8s.store import open_store, read_regular

ModelFormat = Literal["onnx", "safetensors"]


class _Checksum(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    sha256: str
    size: int


class _Export(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)  # validation figures do not matter to serving

    format: ModelFormat


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    classes: tuple[str, ...]
    feature_names: tuple[str, ...]
    spec: dict[str, str | int]  # ModelSpec's fields; only the torch scorer builds one (torch is not imported here)


class ServingMetadata(BaseModel):
    """What serving reads from ``training_metadata.json`` (versions and training figures are left out)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    artifacts: dict[str, _Checksum]
    export: _Export
    model: _Model


class ModelFiles(BaseModel):
    """The serving files of one run, as bytes; ``source`` says where they were read (named in errors)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    source: str
    feature_schema: bytes
    training_metadata: bytes
    model: bytes

    def metadata(self) -> ServingMetadata:
        """The parsed metadata, after checking the schema and model bytes against its checksums.

        Raises:
            InferenceError: ``training_metadata.json`` is not readable as such.
            IntegrityError: the schema or the model differs from what the metadata records.
        """
        metadata = parse_metadata(self.training_metadata, f"{self.source}/{layout.TRAINING_METADATA}")
        model_rel = layout.model_export(metadata.export.format)
        for rel, data in ((layout.FEATURE_SCHEMA, self.feature_schema), (model_rel, self.model)):
            want = metadata.artifacts.get(rel)
            digest = hashlib.sha256(data).hexdigest()
            if want is None:
                raise InferenceError(f"{self.source}/{layout.TRAINING_METADATA} records no checksum of {rel}")
            if (digest, len(data)) != (want.sha256, want.size):
                raise IntegrityError(
                    f"{self.source}: {posixpath.basename(rel)} has sha256 {digest} ({len(data)} bytes); expected "
                    f"{want.sha256} ({want.size} bytes) as {layout.TRAINING_METADATA} records"
                )
        return metadata

    def by_name(self, model_format: ModelFormat) -> dict[str, bytes]:
        """The files under their own names (how a model directory holds them)."""
        return {
            posixpath.basename(layout.FEATURE_SCHEMA): self.feature_schema,
            posixpath.basename(layout.TRAINING_METADATA): self.training_metadata,
            posixpath.basename(layout.model_export(model_format)): self.model,
        }


def parse_metadata(data: bytes, where: str) -> ServingMetadata:
    try:
        return ServingMetadata.model_validate_json(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise InferenceError(
            f"{where} is not training metadata: {'.'.join(str(p) for p in first['loc'])}: {first['msg']}"
        ) from exc


def read_chain_files(chain: ChainStore, version: ChainVersion) -> ModelFiles:
    """The serving files of a chain version's payload, each checked against its block as it is fetched
    (then against the training metadata, by ``ModelFiles.metadata``).

    Raises:
        InferenceError: the version holds no exported model (committed before the payload carried one,
            or by ``ml8s chain commit`` of bare weights).
    """
    source = f"chain {chain.name!r} v{version.counter}"
    listed = {f.name for f in version.header.files}
    wanted = (layout.PAYLOAD_FEATURE_SCHEMA, layout.PAYLOAD_TRAINING_METADATA)
    missing = [name for name in wanted if name not in listed]
    if missing:
        raise InferenceError(
            f"{source} holds no {', '.join(missing)}; expected a version committed by the pipeline with its "
            "exported model (older versions and bare `ml8s chain commit` payloads cannot predict raw rows)"
        )
    metadata_bytes = chain.fetch_payload(version, layout.PAYLOAD_TRAINING_METADATA)
    metadata = parse_metadata(metadata_bytes, f"{source}/{layout.PAYLOAD_TRAINING_METADATA}")
    model_name = layout.payload_export(metadata.export.format)
    if model_name not in listed:
        raise InferenceError(f"{source} holds no {model_name}; expected the exported model its metadata names")
    return ModelFiles(
        source=source,
        feature_schema=chain.fetch_payload(version, layout.PAYLOAD_FEATURE_SCHEMA),
        training_metadata=metadata_bytes,
        model=chain.fetch_payload(version, model_name),
    )


def read_run_files(root_uri: str, run_id: str, *, require_marker: bool = True) -> ModelFiles:
    """The serving files of a complete run under a pipeline root (``file://`` or ``s3://``).

    Args:
        root_uri: the pipeline root.
        run_id: the run.
        require_marker: False only for registration, which runs before finalization writes the marker.

    Raises:
        InferenceError: the run is not complete (no ``success.marker``) or a file is missing.
    """
    store, prefix = open_store(root_uri), layout.run_prefix(run_id)
    source = store.uri(prefix)
    if require_marker and not store.exists(f"{prefix}/{layout.SUCCESS_MARKER}"):
        raise InferenceError(
            f"run {run_id} at {source} is not complete (no {layout.SUCCESS_MARKER}); expected a finished run "
            "(`ml8s runs list` shows each run's status)"
        )

    def read(rel: str, max_bytes: int | None) -> bytes:
        try:
            return store.get(f"{prefix}/{rel}", max_bytes=max_bytes)
        except NotFoundError as exc:
            raise InferenceError(f"{source}/{rel} is missing; expected it in a complete run") from exc

    metadata_bytes = read(layout.TRAINING_METADATA, layout.RECORD_MAX_BYTES)
    metadata = parse_metadata(metadata_bytes, f"{source}/{layout.TRAINING_METADATA}")
    model_rel = layout.model_export(metadata.export.format)
    # at most the size the metadata records: a larger model fails ModelFiles.metadata's check anyway
    recorded = metadata.artifacts.get(model_rel)
    return ModelFiles(
        source=source,
        feature_schema=read(layout.FEATURE_SCHEMA, layout.SCHEMA_MAX_BYTES),
        training_metadata=metadata_bytes,
        model=read(model_rel, recorded.size if recorded is not None else None),
    )


def read_model_dir(directory: str, model_format: ModelFormat) -> ModelFiles:
    """The serving files kept side by side in a directory (an MLflow model's ``artifacts/``).

    Raises:
        InferenceError: a file is missing, or no regular file (a directory, a FIFO), or unreadable.
    """
    names = {
        "feature_schema": posixpath.basename(layout.FEATURE_SCHEMA),
        "training_metadata": posixpath.basename(layout.TRAINING_METADATA),
        "model": posixpath.basename(layout.model_export(model_format)),
    }
    found: dict[str, bytes] = {}
    for field, name in names.items():
        path = os.path.join(directory, name)
        try:  # never blocks on a FIFO, never reads a device: a regular file or a named error
            found[field] = read_regular(path, path, max_bytes=None)
        except NotFoundError as exc:
            raise InferenceError(f"{path} is missing; expected the model's {name}") from exc
        except StoreError as exc:
            raise InferenceError(f"{exc.message}; expected the model's {name}") from exc
    return ModelFiles(
        source=directory,
        feature_schema=found["feature_schema"],
        training_metadata=found["training_metadata"],
        model=found["model"],
    )
