"""What a follower serves on a chain with a promotion gate: the newest decision's served version, checked
(``ml8s.chain.PromotionLog``), and never an older decision than one this node saw.

The promotion log is append-only, so a log shorter than the one seen before was cut: a rollback. The
highest sequence seen is kept beside the follower's state file (``{state}.promotion.json``), so a
restarted follower refuses it too.
"""

from __future__ import annotations

import json
import os

from ml8s.chain import ChainVersion, ChainVersions, PromotionLog
from ml8s.errors import ChainRollbackError


class PromotionReader:
    """The promoted version of a chain for a follower (module docstring)."""

    def __init__(self, chain: ChainVersions, *, state_path: str | None = None) -> None:
        self.log = PromotionLog(chain)
        self.chain = chain
        self._state = f"{state_path}.promotion.json" if state_path else None
        self._seen = self._load()

    def gated(self) -> bool:
        """Whether the chain has a promotion gate (a decision exists, or this node saw one).

        Raises:
            ChainRollbackError: the log holds fewer decisions than this node saw.
            ChainCorruptionError: a decision does not verify.
        """
        latest = self.log.latest()
        sequence = latest.decision.sequence if latest is not None else 0
        if sequence < self._seen:
            raise ChainRollbackError(
                None,
                f"chain {self.chain.name!r}: the promotion log ends at decision {sequence}, but this node saw "
                f"decision {self._seen}: decisions were removed",
                check="promotion_rollback",
            )
        if sequence > self._seen:
            self._seen = sequence
            self._save()
        return sequence > 0

    def served(self) -> ChainVersion | None:
        """The promoted version (None: the gate promoted nothing yet)."""
        return self.log.served()

    def _load(self) -> int:
        if self._state is None:
            return 0
        try:
            with open(self._state, "rb") as handle:
                value = json.loads(handle.read()).get("sequence", 0)
        except (OSError, ValueError, AttributeError):
            return 0
        return value if isinstance(value, int) and value >= 0 else 0

    def _save(self) -> None:
        if self._state is None:
            return
        tmp = f"{self._state}.tmp"
        with open(tmp, "wb") as handle:
            handle.write(json.dumps({"chain_name": self.chain.name, "sequence": self._seen}).encode())
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, self._state)
