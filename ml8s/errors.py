"""Every failure ml8s raises, in one place.

Each error carries a stable ``code`` (the name the run contract uses, e.g. ``RUN_ID_HASH_COLLISION``)
and a message that says what was expected and where.
"""

from __future__ import annotations


class Ml8sError(Exception):
    """Base class of every ml8s error."""

    code = "ML8S_ERROR"

    def __init__(self, message: str) -> None:
        super().__init__(f"{self.code}: {message}")
        self.message = message


class ConfigError(Ml8sError):
    """A user- or platform-level variable is missing or malformed."""

    code = "CONFIG_ERROR"


class DataError(Ml8sError):
    """The dataset is missing, empty, unreadable or not what the run expects."""

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


class TrainingError(Ml8sError):
    """Training or export failed."""

    code = "TRAINING_ERROR"


class ExportValidationError(TrainingError):
    """The exported model disagrees with the torch model beyond tolerance."""

    code = "EXPORT_VALIDATION_FAILED"


class RegistryError(Ml8sError):
    """MLflow registration failed or found an inconsistent registry."""

    code = "REGISTRY_ERROR"


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
