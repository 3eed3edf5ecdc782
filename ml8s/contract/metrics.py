"""``metrics.json``: the held-out metrics of training (numpy float64, a pure function of the predictions)."""

from __future__ import annotations

from ml8s.contract._base import ContractFile
from ml8s.identity.hashing import canonical_bytes


class Metrics(ContractFile):
    """Held-out classification metrics, the row counts of the split and the last epoch's training loss."""

    accuracy: float
    final_train_loss: float
    log_loss: float
    macro_f1: float
    majority_class_accuracy: float
    roc_auc: float | None = None  # binary targets only: absent from the file otherwise, never null
    test_rows: int
    train_rows: int

    def scalars(self) -> dict[str, float]:
        """Every metric recorded, by name (what TensorBoard shows under ``heldout/``)."""
        return dict(self.model_dump(exclude_none=True))

    def to_bytes(self) -> bytes:
        return canonical_bytes(self.model_dump(mode="json", exclude_none=True))
