"""The artifact layout of seed 001, as keys relative to the pipeline root."""

from __future__ import annotations

from collections.abc import Iterable

from ml8s.identity.variables import CANONICALIZATION_VERSION
from ml8s.identity.versions import records_training_state

RUNS_DIR = "ml8s_training_runs"
INCIDENTS_DIR = "ml8s_incidents"
# A run's records (snapshot, fingerprint, metadata, manifest, an incident) are a few KiB: every reader that
# reads one whole reads at most this, so a sparse 64 GiB file or a link to /dev/zero is refused unread.
RECORD_MAX_BYTES = 16 * 1024 * 1024
# The feature schema lists every feature (a one-hot category is one, ~100 bytes): read whole, it is refused
# above this, far over a million features, rather than filling a reader's memory.
SCHEMA_MAX_BYTES = 256 * 1024 * 1024

CONFIG_SNAPSHOT = "config_snapshot.json"
DATA_FINGERPRINT = "data_fingerprint.json"
SUCCESS_MARKER = "success.marker"
FEATURE_MATRIX = "features/feature_matrix.parquet"
FEATURE_SCHEMA = "features/feature_schema.json"
MODEL_NATIVE = "model/model_native.safetensors"
# Canonicalization 2.1.0 on: the optimizer, RNG and sampler state and the lineage (ml8s.contract.training_state).
MODEL_TRAINING_STATE = "model/training_state.safetensors"
# TRAIN_WORLD_SIZE > 1 (docs/distributed.md): each rank's shard of the trained weights and the metadata rank 0
# writes last, ml8s.shards's layout under the prefix MODEL_SHARD_PREFIX.
MODEL_SHARD_PREFIX = "model/model"
MODEL_SHARD_METADATA = f"{MODEL_SHARD_PREFIX}.metadata.json"
METRICS = "metrics.json"
TRAINING_METADATA = "training_metadata.json"
# Not in seed 001's listing: the run manifest, written by finalization just before the marker so the
# gate can return it byte for byte without touching MLflow (SPEC §4: "identical to the first run's").
MANIFEST = "manifest.json"
TMP_DIR = ".tmp"
LOGS_DIR = "logs"
# Training curves for TensorBoard: a log (wall-clock times inside), never checksummed nor hashed.
TENSORBOARD_EVENTS = f"{LOGS_DIR}/tensorboard/events.out.tfevents.ml8s-train"
# Each epoch's train loss, held-out loss and accuracy and end time (ml8s.training.epochs): a log, as above.
EPOCH_LOG = f"{LOGS_DIR}/epochs.json"
# A run's version in its model chain holds these payload files (names inside the version's payload/, not
# keys of the run): the weights and the manifest, plus what a fleet needs to serve from the chain alone
# (the exported model, the feature schema that turns raw rows into its input, and the training metadata
# that records both checksums). Versions committed before the last three were added hold only the first
# two; verification checks whatever a block lists.
PAYLOAD_WEIGHTS = "model_native.safetensors"
PAYLOAD_MANIFEST = "manifest.json"
PAYLOAD_FEATURE_SCHEMA = "feature_schema.json"
PAYLOAD_TRAINING_METADATA = "training_metadata.json"
PAYLOAD_TRAINING_STATE = "training_state.safetensors"
PAYLOAD_CONFIG_SNAPSHOT = "config_snapshot.json"
PAYLOAD_DATA_FINGERPRINT = "data_fingerprint.json"
# Written by ``ml8s follow`` beside a version's payload files: no payload file may take its name.
SERVED_VERSION_FILE = "ml8s_version.json"


def clashing_names(names: Iterable[str], reserved: Iterable[str]) -> list[str]:
    """The ``names`` (payload paths) that are one of ``reserved`` or lie under one taken as a folder, sorted."""
    taken = tuple(reserved)
    return sorted(n for n in names if any(n == r or n.startswith(f"{r}/") for r in taken))


def model_export(model_format: str) -> str:
    """``model/model.onnx`` or ``model/model.safetensors``."""
    return f"model/model.{model_format}"


def payload_export(model_format: str) -> str:
    """The exported model's name in a chain payload: ``model.onnx`` or ``model.safetensors``."""
    return f"model.{model_format}"


def model_shard(rank: int) -> str:
    """Rank ``rank``'s shard of the trained weights: ``model/model_shard_{rank}.shard``."""
    return f"{MODEL_SHARD_PREFIX}_shard_{rank}.shard"


def sharded_artifacts(world_size: int) -> tuple[str, ...]:
    """The shard files and their metadata of a run trained by ``world_size`` ranks (none for one rank), sorted."""
    if world_size <= 1:
        return ()
    return tuple(sorted({*(model_shard(rank) for rank in range(world_size)), MODEL_SHARD_METADATA}))


def chain_payload_files(
    model_format: str, canonicalization_version: str = CANONICALIZATION_VERSION, world_size: int = 1
) -> tuple[tuple[str, str], ...]:
    """(payload name, run key) of every file a run's chain version holds, sorted by payload name; the
    manifest is held as ``Manifest.chain_payload`` makes it (identity and digests only, from 2.1.0 on).
    A run of ``world_size`` > 1 ranks adds its shards and their metadata, named as in the run's model/."""
    state = (
        {(PAYLOAD_TRAINING_STATE, MODEL_TRAINING_STATE)} if records_training_state(canonicalization_version) else set()
    )
    shards = {(rel.rsplit("/", 1)[-1], rel) for rel in sharded_artifacts(world_size)}
    return tuple(
        sorted(
            {
                *state,
                *shards,
                (PAYLOAD_CONFIG_SNAPSHOT, CONFIG_SNAPSHOT),
                (PAYLOAD_DATA_FINGERPRINT, DATA_FINGERPRINT),
                (PAYLOAD_FEATURE_SCHEMA, FEATURE_SCHEMA),
                (PAYLOAD_MANIFEST, MANIFEST),
                (PAYLOAD_TRAINING_METADATA, TRAINING_METADATA),
                (PAYLOAD_WEIGHTS, MODEL_NATIVE),
                (payload_export(model_format), model_export(model_format)),
            }
        )
    )


def run_prefix(run_id: str) -> str:
    """Key of ARTIFACT_ROOT relative to PIPELINE_ROOT_URI."""
    return f"{RUNS_DIR}/{run_id}"


def other_root(recorded: str, artifact_root: str, run_id: str) -> str:
    """The pipeline root of ``recorded`` when it is RUN_ID's folder under another root than ``artifact_root``'s
    (the root was copied or moved since ``recorded`` was written), else "" (the same folder, or anything else)."""
    suffix = f"/{run_prefix(run_id)}"
    if recorded == artifact_root or not recorded.endswith(suffix):
        return ""
    return recorded.removesuffix(suffix)


def checksummed_artifacts(
    model_format: str, canonicalization_version: str = CANONICALIZATION_VERSION, world_size: int = 1
) -> tuple[str, ...]:
    """Artifacts whose sha256 ``training_metadata.json`` records (sorted): what the data and the
    training produced. The two identity files are not among them: they name DATA_ROOT, and the
    metadata must be byte-identical whether the same bytes were read from a disk or a bucket.
    Finalization checks those two against the run's identity instead. ``world_size``: TRAIN_WORLD_SIZE
    (``identity.versions.world_size_of`` of a recorded config), whose shards are checksummed too."""
    state = {MODEL_TRAINING_STATE} if records_training_state(canonicalization_version) else set()
    return tuple(
        sorted(
            {
                FEATURE_MATRIX,
                FEATURE_SCHEMA,
                MODEL_NATIVE,
                model_export(model_format),
                METRICS,
                *state,
                *sharded_artifacts(world_size),
            }
        )
    )


def identity_artifacts() -> tuple[str, ...]:
    """The files that record the run's identity (config snapshot and data fingerprint)."""
    return (CONFIG_SNAPSHOT, DATA_FINGERPRINT)


def final_artifacts(
    model_format: str, canonicalization_version: str = CANONICALIZATION_VERSION, world_size: int = 1
) -> tuple[str, ...]:
    """Every final file of a complete run (sorted), the marker excluded."""
    checksummed = checksummed_artifacts(model_format, canonicalization_version, world_size)
    return tuple(sorted({*checksummed, *identity_artifacts(), TRAINING_METADATA, MANIFEST}))


def incident_key(run_id: str, kind: str, full_config_hash: str) -> str:
    """Where an incident record goes: outside every ARTIFACT_ROOT, one object per (run, kind, hash)."""
    return f"{INCIDENTS_DIR}/{run_id}/{kind.lower()}-{full_config_hash}.json"
