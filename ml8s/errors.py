"""Every failure ml8s raises, in one place.

Each error carries a stable ``code`` (the name the run contract uses, e.g. ``RUN_ID_HASH_COLLISION``)
and a message that says what was expected and where.
"""

from __future__ import annotations

from ml8s.text import quoted, without_credentials

__all__ = ["without_credentials"]  # its home was here: importers of ml8s.errors keep it


class Ml8sError(Exception):
    """Base class of every ml8s error. Its message never carries a URL's password (:func:`without_credentials`)."""

    code = "ML8S_ERROR"

    def __init__(self, message: str) -> None:
        message = without_credentials(message)
        super().__init__(f"{self.code}: {message}")
        self.message = message


class ConfigError(Ml8sError):
    """A user- or platform-level variable is missing or malformed."""

    code = "CONFIG_ERROR"


class NoSpaceError(ConfigError):
    """A file could not be written for want of space (ENOSPC, EDQUOT). Unlike a bad argument it heals when space
    is freed, so a polling ``ml8s follow`` retries on its next poll; it keeps ConfigError's code."""

    code = "CONFIG_ERROR"


class DataError(Ml8sError):
    """The dataset is missing, empty, unreadable or not what the run expects."""

    code = "DATA_ERROR"


class CsvRefusedError(DataError):
    """CSV text that parses, or that Python's csv module would read, but that ml8s refuses by a rule of its own
    (a data row repeating the header, a row longer than a parse block). It keeps DataError's code; a reader
    that retries Arrow's refusals with Python's csv module (``ml8s predict``) lets it through unchanged."""

    code = "DATA_ERROR"


class DataChangedError(DataError):
    """The data read differs from the data that was fingerprinted."""

    code = "DATA_CHANGED"


class StoreError(Ml8sError):
    """The artifact store failed or holds something unexpected."""

    code = "STORE_ERROR"


class IntegrityError(StoreError):
    """A written or read object does not have the expected size or checksum."""

    code = "INTEGRITY_ERROR"


class RunIdHashCollisionError(Ml8sError):
    """The RUN_ID exists but its recorded FULL_CONFIG_HASH differs from the computed one."""

    code = "RUN_ID_HASH_COLLISION"


class DataDriftError(Ml8sError):
    """Non-strict identity: the run exists but its data fingerprint differs from the data now."""

    code = "DATA_DRIFT"


class RecordedElsewhereError(Ml8sError):
    """A completed run's records name another pipeline root: the root was copied or moved since the run."""

    code = "RECORDED_AT_ANOTHER_ROOT"


class TrainingError(Ml8sError):
    """Training or export failed."""

    code = "TRAINING_ERROR"


class ExportValidationError(TrainingError):
    """The exported model disagrees with the torch model beyond tolerance."""

    code = "EXPORT_VALIDATION_FAILED"


class RegistryError(Ml8sError):
    """MLflow registration failed or found an inconsistent registry."""

    code = "REGISTRY_ERROR"


class RegistryReplacedError(RegistryError):
    """The registry does not hold the MLflow run (or version) a run recorded: it was recreated or replaced."""

    code = "REGISTRY_REPLACED"


class NotFoundError(StoreError):
    """The object does not exist."""

    code = "NOT_FOUND"


class PreconditionFailedError(StoreError):
    """A conditional write lost: the object changed (or appeared) since it was read."""

    code = "PRECONDITION_FAILED"


class RetryableStoreError(StoreError):
    """A transient store failure (conflicting concurrent request, throttling): safe to retry."""

    code = "STORE_RETRYABLE"


class StoreUnavailableError(RetryableStoreError):
    """The store's endpoint cannot be reached, or the connection broke (after the retries allowed)."""

    code = "STORE_UNAVAILABLE"


class UnsafeObjectError(StoreError):
    """A stored key is no regular file (a symlink, FIFO, device, socket or directory where one was expected):
    reading or deleting through it could hang, never end, or reach outside the store, so nothing is done."""

    code = "STORE_UNSAFE_OBJECT"


class ObjectTooLargeError(StoreError):
    """A stored object is larger than the size its reader was told to expect (a signed block's size or a
    documented cap): it is refused before its bytes are read into memory."""

    code = "STORE_OBJECT_TOO_LARGE"


class ChainError(Ml8sError):
    """The model chain refused an operation or holds something unexpected (SPEC §7)."""

    code = "CHAIN_ERROR"


class CommitError(ChainError):
    """A chain commit did not land; the committer's upload was rolled back (or left for GC)."""

    code = "CHAIN_COMMIT_FAILED"


class ConflictError(CommitError):
    """The head moved between reading it and swapping it: another committer won. Retry from the new head."""

    code = "CHAIN_CONFLICT"


class CommitOutcomeUnknownError(ConflictError):
    """The head swap's outcome stayed unknown (store unreachable): the upload is kept, since it may still land.

    Retrying is safe: the run index finds the version if the swap did land, and a late landing of the old
    request fails its precondition once the head has moved.
    """

    code = "CHAIN_COMMIT_OUTCOME_UNKNOWN"


class NotFastForwardError(CommitError):
    """The version would not extend the head: ``expected_parent`` is not the head, or global_step went back."""

    code = "CHAIN_NOT_FAST_FORWARD"


class ChecksumError(IntegrityError, ChainError):
    """Chain bytes do not match their recorded hash; ``check`` names which hash (e.g. ``payload_hash``)."""

    code = "CHAIN_CHECKSUM_MISMATCH"

    def __init__(self, message: str, *, check: str = "checksum") -> None:
        super().__init__(message)
        self.check = check


class VersionNotFoundError(ChainError):
    """The chain, or the requested version of it, does not exist."""

    code = "CHAIN_VERSION_NOT_FOUND"


class ChainCorruptionError(ChainError):
    """The chain violates an integrity rule; ``check`` names the rule, ``version`` the counter (None: chain-wide)."""

    code = "CHAIN_CORRUPTION"

    def __init__(self, version: int | None, reason: str, *, check: str = "corruption") -> None:
        where = f"version {version}" if version is not None else "chain"
        super().__init__(f"{where}: {check}: {reason}")
        self.version, self.reason, self.check = version, reason, check


class ChainRollbackError(ChainCorruptionError):
    """The head is older than a head seen before: history was rolled back."""

    code = "CHAIN_ROLLBACK"


class ChainForkError(ChainCorruptionError):
    """The head does not descend from a head seen before: history was rewritten (forked)."""

    code = "CHAIN_FORK"


class OutputError(Ml8sError):
    """The command's standard output is closed or failed to take its result (a full disk, an I/O error)."""

    code = "OUTPUT_ERROR"


class VerificationFailedError(Ml8sError):
    """A run (or an audit bundle) failed verification; the report names each failed check."""

    code = "VERIFICATION_FAILED"


class AuditBundleError(Ml8sError):
    """An audit bundle cannot be written or read (not a bundle, unsafe member, unwritable output)."""

    code = "AUDIT_BUNDLE_ERROR"


class ResolutionRefusedError(Ml8sError):
    """An operator tool refused to act: the collision is not recorded, or the store is not what was audited."""

    code = "RESOLUTION_REFUSED"


class RecordsError(Ml8sError):
    """The disk-native training history (SPEC §10) refused an operation or holds something unexpected."""

    code = "RECORDS_ERROR"


class RecordsFormatError(RecordsError):
    """Rows, an index, a manifest or a sampler state that is not what the record format says."""

    code = "RECORDS_MALFORMED"


class RecordsSchemaMismatchError(RecordsError):
    """A record schema (or its hash) differs from the one the history was started with."""

    code = "RECORDS_SCHEMA_MISMATCH"


class RecordsAppendError(RecordsError):
    """The history is append-only: a generation may not be rewritten, skipped, or appended concurrently."""

    code = "RECORDS_APPEND_ONLY"


class GenerationMissingError(RecordsError):
    """A generation listed in the history index has no record file (or no manifest)."""

    code = "RECORDS_GENERATION_MISSING"


class RecordsTruncatedError(RecordsError):
    """A record file is shorter than its listed rows × record size."""

    code = "RECORDS_TRUNCATED"


class RecordsExtraBytesError(RecordsError):
    """A record file is longer than its listed rows × record size."""

    code = "RECORDS_EXTRA_BYTES"


class RecordsChecksumError(RecordsError):
    """A record file's bytes do not hash to the sha256 its manifest records."""

    code = "RECORDS_CHECKSUM_MISMATCH"


class DeltaError(Ml8sError):
    """A weights payload (FULL or DELTA, SPEC §8) cannot be encoded, read or applied."""

    code = "DELTA_ERROR"


class DeltaFormatError(DeltaError):
    """Payload bytes are not a well-formed payload: bad magic or version, truncated, garbage, out-of-range index."""

    code = "DELTA_FORMAT"


class DeltaDtypeError(DeltaError):
    """A tensor the codec cannot carry: its dtype is not float32/bfloat16/float16, or it is not a CPU tensor."""

    code = "DELTA_UNSUPPORTED_TENSOR"


class DeltaShapeError(DeltaError):
    """Base and new weights differ in tensor names, shapes or dtypes: a DELTA cannot express that, send a FULL."""

    code = "DELTA_NEEDS_FULL"


class DeltaBaseMismatchError(DeltaError):
    """The weights a DELTA is applied to are not the base it was computed from (names, shapes or weights hash)."""

    code = "DELTA_BASE_MISMATCH"


class DeltaNanError(DeltaError):
    """A DELTA applied where NaN weights are refused (``DeltaConsumer.apply_delta_in_place``) writes a NaN: a model
    with one predicts NaN for every row. Nothing was changed."""

    code = "DELTA_NAN_WEIGHT"


class DeltaIntegrityError(DeltaError):
    """Decoded weights do not have the weights hash the payload records; nothing was changed."""

    code = "DELTA_INTEGRITY"


class UriError(ConfigError):
    """A URI setting is malformed or names something unusable.

    It keeps ConfigError's code (a malformed variable, as before). ``text`` (the value, without credentials),
    ``problem`` and ``expected`` (the phrase after "expected") are there for callers (``--root``,
    ``--mlflow-tracking-uri``) that name the value their own way.
    """

    code = "CONFIG_ERROR"

    def __init__(self, variable: str, text: str, problem: str, expected: str) -> None:
        super().__init__(f"{variable}={quoted(text)} {problem}; expected {expected}")
        self.text = without_credentials(text)  # the value as a message may show it
        self.problem = problem
        self.expected = expected


class RootUriError(UriError):
    """A data or pipeline root is not a local path, ``file://`` path or ``s3://bucket/prefix``."""


class TrackingUriError(UriError):
    """An MLflow tracking URI where a registered model would not last or cannot be registered at all."""


class ShardError(Ml8sError):
    """A multi-rank checkpoint (``ml8s.shards``) cannot be written, read or trusted."""

    code = "SHARD_ERROR"


class ShardInputError(ShardError):
    """A bad argument: world size < 1, rank outside [0, world size), malformed prefix or checkpoint id, bad pieces."""

    code = "SHARD_BAD_INPUT"


class ShardFormatError(ShardError):
    """A shard or metadata file is not what format 1 describes; ``check`` names the rule (e.g. ``bad_magic``)."""

    code = "SHARD_FORMAT_ERROR"

    def __init__(self, message: str, *, check: str = "header_invalid") -> None:
        super().__init__(message)
        self.check = check


class ShardVersionError(ShardFormatError):
    """A shard or metadata file has a format version this ml8s does not know."""

    code = "SHARD_FORMAT_VERSION"


class ShardChecksumError(ShardFormatError):
    """Shard bytes do not match the sha256 recorded for them (header, block, data or file)."""

    code = "SHARD_CHECKSUM_MISMATCH"


class WrongCheckpointError(ShardError):
    """A shard belongs to another checkpoint: its rank, world size or checkpoint id differ from the expected."""

    code = "SHARD_WRONG_CHECKPOINT"


class ShardVerificationError(ShardError):
    """A sharded checkpoint failed verification; the report names every finding."""

    code = "SHARD_VERIFICATION_FAILED"


class ChainHeadMissingError(ChainCorruptionError):
    """The head (``chain.json``) is missing or unreadable while the chain has history: never a new genesis."""

    code = "CHAIN_HEAD_MISSING"


class CommitDeadlineError(CommitError):
    """A commit kept failing (store unreachable, or conflicts) past its RetryPolicy deadline: it gave up."""

    code = "CHAIN_COMMIT_DEADLINE"


class CommitDamagedError(CommitError):
    """A commit won its head swap, but the version it uploaded is no longer intact in the store (files
    deleted after the upload, e.g. by a GC judging age by a clock ahead of the store's) and restoring
    them failed: the head names a damaged version, so the commit is not reported as a success."""

    code = "CHAIN_COMMIT_DAMAGED"


class GcRefusedError(ChainError):
    """Garbage collection refused to run: something under the chain is no regular file or directory (a
    symlink could steer deletions elsewhere), or the chain has findings."""

    code = "CHAIN_GC_REFUSED"


class SigningRequiredError(ChainError):
    """The chain's trust policy requires a signature by a trusted key, and the committer has none."""

    code = "CHAIN_SIGNING_REQUIRED"


class RegistrySchemaError(RegistryError):
    """The MLflow database holds a schema that is incomplete or older than this MLflow expects."""

    code = "REGISTRY_SCHEMA_INCOMPLETE"


class ModelCodeChangedError(ConfigError):
    """A plug-in model's code differs from the code identity its run recorded at bootstrap."""

    code = "MODEL_CODE_CHANGED"


class InferenceError(Ml8sError):
    """A run's model cannot serve predictions: incomplete run, missing or unreadable model files."""

    code = "INFERENCE_ERROR"


class PredictionInputError(InferenceError):
    """Rows to predict on are not what the model's feature rules expect (a column, a value, the format)."""

    code = "PREDICTION_INPUT_INVALID"


class LineageError(Ml8sError):
    """A warm start cannot continue from its parent: no training state, an unknown parent, another architecture."""

    code = "LINEAGE_ERROR"


class WarmStartNotFoundError(LineageError):
    """WARM_START names a version, block hash or content hash that is not on the chain."""

    code = "WARM_START_NOT_FOUND"


class LineageDataError(LineageError):
    """DATA_ROOT lost or changed a file the parent trained on, or a new generation does not fit the lineage."""

    code = "LINEAGE_DATA_CHANGED"


class LineageDriftError(LineageError):
    """DRIFT_POLICY=fail and a new generation drifted from the lineage's features (docs/continuous.md)."""

    code = "LINEAGE_DRIFT"


class StaleParentError(LineageError):
    """A warm-started run's parent is no longer the chain's head: its model must not be appended."""

    code = "LINEAGE_STALE_PARENT"


class NothingNewError(LineageError):
    """WARM_START=head on a DATA_ROOT whose every generation the head already trained on, by another run."""

    code = "LINEAGE_NOTHING_NEW"


class UntrustedVersionError(ChainCorruptionError):
    """A version is unsigned where signatures are required (a trust policy, or CHAIN_REQUIRE_SIGNED), or not
    validly signed by a key its trust policy lists: a follower or a trusted reader refuses it (``check`` says why)."""

    code = "CHAIN_UNTRUSTED"


class ChainFrozenError(ChainCorruptionError):
    """The anchor a follower relies on has expired: nothing proves the head it reads is still the newest."""

    code = "CHAIN_FROZEN"


class ChainEvidenceError(ChainCorruptionError):
    """A version's run claim or audit events are missing or edited: the store's index or trail was tampered with."""

    code = "CHAIN_EVIDENCE_MISSING"


class WeightsError(ChainError):
    """A version's weights (FULL or DELTA payload, ml8s/chain/weights.py) cannot be committed or rebuilt."""

    code = "CHAIN_WEIGHTS"


class WeightsMissingError(WeightsError):
    """A version has no weights to rebuild from: no FULL anchor below a DELTA, or not a weights payload."""

    code = "CHAIN_WEIGHTS_MISSING"


class WeightsMismatchError(WeightsError, IntegrityError):
    """Rebuilt weights do not have the weights hash their block records, or a DELTA names another base."""

    code = "CHAIN_WEIGHTS_MISMATCH"


class ServingError(Ml8sError):
    """An inference client or ``ml8s follow`` cannot serve a version (ml8s.serving)."""

    code = "SERVING_ERROR"


class NoModelGraphError(ServingError):
    """``predict`` was asked of a version whose payload holds weights but no model graph and feature schema."""

    code = "SERVING_NO_MODEL_GRAPH"


class RankError(TrainingError):
    """A rank of a distributed training (TRAIN_WORLD_SIZE > 1) could not start, failed, or disagreed."""

    code = "TRAINING_RANK_ERROR"
