"""Pins of the promotion log: what an anchor or a follower's saved state says the log held.

The promotion log (promotion.py) is append-only and hash-linked, but whoever can write the store can still
delete its tail (a ``promote`` that moved followers, or a ``reject`` that kept a regression off them) or
replace it with another valid-looking tail, and a reader that starts fresh sees a consistent, shorter log.
A pin is the log's head as someone saw it: the newest decision's sequence and the sha256 of its record.
Each record names its predecessor's sha256, so the pinned record fixes the whole log up to it. A log that
no longer reaches the pinned sequence is ``promotion_rollback``; one that holds another record there is
``promotion_fork``. An anchor carries a pin (anchor.py: verify --anchor, a first-start follower,
``predict --chain --anchor``); a follower keeps its own beside its state file (``{state}.promotion.json``,
replaced by rename), so a restarted follower refuses both too (``PromotionReader``).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ml8s.chain._util import save_state
from ml8s.chain.models import ChainVersion, OptionalHex64
from ml8s.chain.promotion import PromotionLog, read_record
from ml8s.chain.promotion_gap import log_gap
from ml8s.chain.root import TrustRoot
from ml8s.chain.trust import TrustPolicy
from ml8s.chain.versions import ChainVersions
from ml8s.errors import ChainCorruptionError, ChainForkError, ChainRollbackError, ConfigError
from ml8s.store.operator_files import read_operator_file

Problems = list[tuple[str, str]]


class PromotionPin(BaseModel):
    """The promotion log's head as seen: ``sequence`` 0 pins nothing (no decision yet, or an older anchor)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    sequence: int = Field(default=0, ge=0)
    sha256: OptionalHex64 = ""


def log_pin(log: PromotionLog) -> PromotionPin:
    """The checked log's head now (ChainCorruptionError when a decision does not check: nothing to pin)."""
    hashes = log.hashes()
    return PromotionPin(sequence=len(hashes), sha256=hashes[-1] if hashes else "")


def pin_problems(hashes: list[str], pin: PromotionPin, chain_name: str, by: str) -> Problems:
    """``promotion_rollback`` / ``promotion_fork`` for a log whose records hash to ``hashes`` (oldest first)
    against ``pin``; ``by`` says who pinned it and how ("the anchor names", "this node saw")."""
    if pin.sequence == 0:
        return []
    if len(hashes) < pin.sequence:
        return [
            (
                "promotion_rollback",
                f"chain {chain_name!r}: the promotion log ends at decision {len(hashes)}, but {by} decision "
                f"{pin.sequence}: decisions were removed (a promotion or a rejection undone)",
            )
        ]
    held = hashes[pin.sequence - 1]
    if pin.sha256 and held != pin.sha256:
        return [
            (
                "promotion_fork",
                f"chain {chain_name!r}: promotion decision {pin.sequence} hashes to {held[:12]}, but {by} "
                f"{pin.sha256[:12]}: the log was rewritten",
            )
        ]
    return []


def raw_hashes(chain: ChainVersions, upto: int) -> list[str]:
    """The sha256 of records 1..``upto`` as stored, unchecked (verify's anchor check: a record that does not
    check is verify's ``promotion`` finding already); stops at the first missing or unreadable one."""
    hashes: list[str] = []
    for sequence in range(1, upto + 1):
        try:
            data = read_record(chain, sequence)
        except ChainCorruptionError:
            break
        if data is None:
            break
        hashes.append(hashlib.sha256(data).hexdigest())
    return hashes


def check_pin(log: PromotionLog, pin: PromotionPin, by: str) -> None:
    """Raise ChainRollbackError (``promotion_rollback``) or ChainForkError (``promotion_fork``) when the checked
    log disagrees with ``pin``."""
    for check, reason in pin_problems(log.hashes(), pin, log.chain.name, by):
        if check == "promotion_fork":
            raise ChainForkError(None, reason, check=check)
        raise ChainRollbackError(None, reason, check=check)


class SeenPromotion(BaseModel):
    """The newest promotion decision a follower saw (``sha256`` is empty in states from before it was kept)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    chain_name: str
    sequence: int = Field(default=0, ge=0)
    sha256: OptionalHex64 = ""


class PromotionReader:
    """The promoted version of a chain for a follower (module docstring)."""

    def __init__(
        self,
        chain: ChainVersions,
        *,
        state_path: str | None = None,
        root: TrustRoot | None = None,
        policies: Callable[[], list[TrustPolicy]] | None = None,
    ) -> None:
        """``policies``: the follower's ``checked_policies`` (PromotionLog), else the store's, checked to ``root``."""
        self.log = PromotionLog(chain, root, policies=policies)
        self.chain = chain
        self._state = f"{state_path}.promotion.json" if state_path else None
        self._seen = self._load()
        self._unsaved = False  # ``_seen`` is not in the state file yet: its save failed (a full disk)
        self._uncut = False  # the log was listed for a record after a missing one (verify's cut log)

    def gated(self, anchor: PromotionPin | None = None) -> bool:
        """Whether the chain has a promotion gate (a decision exists, or this node or ``anchor``, an anchor's
        pin, saw one).

        Raises:
            ChainRollbackError: the log holds fewer decisions than this node saw or the anchor pins.
            ChainForkError: the log holds another decision where this node saw or the anchor pins one.
            ChainCorruptionError: a decision does not verify, or one is missing before a later one (``promotion``).
        """
        check_pin(self.log, self._seen, "this node saw")
        if anchor is not None:
            check_pin(self.log, anchor, "the anchor names")
        if not self._uncut:
            # Read alone, a log cut in the middle ends at the cut, and an older decision's version is served while
            # verify FAILs it; once read whole, the pin (``_seen``) holds it, so it is listed once per reader
            if (gap := log_gap(self.log)) is not None:
                raise ChainCorruptionError(None, f"chain {self.chain.name!r}: {gap}", check="promotion")
            self._uncut = True
        now = log_pin(self.log)
        if now != self._seen:  # grown (the pins above hold), or a state from before sha256s were kept
            self._seen, self._unsaved = now, True
        if self._unsaved:  # also after a save that failed: the next call found _seen current and never saved it
            self._save()
        return now.sequence > 0

    def served(self) -> ChainVersion | None:
        """The promoted version (None: the gate promoted nothing yet)."""
        return self.log.served()

    def _load(self) -> PromotionPin:
        if self._state is None or not os.path.lexists(self._state):
            return PromotionPin()
        try:
            data = read_operator_file(
                self._state, setting="promotion state", expected="a saved decision", max_bytes=64 * 1024
            )
            seen = SeenPromotion.model_validate_json(data)
        except (ConfigError, ValidationError) as exc:
            # Never a silent reset to "saw nothing": that would let a cut log through after any damage here.
            raise ConfigError(
                f"{self._state} is no promotion state of a follower; expected the newest decision it saw "
                "(remove it only if the promotion log is known good)"
            ) from exc
        if seen.chain_name != self.chain.name:
            raise ConfigError(f"{self._state} follows chain {seen.chain_name!r}, not {self.chain.name!r}")
        return PromotionPin(sequence=seen.sequence, sha256=seen.sha256)

    def _save(self) -> None:
        if self._state is not None:
            seen = SeenPromotion(chain_name=self.chain.name, sequence=self._seen.sequence, sha256=self._seen.sha256)
            save_state(self._state, seen.model_dump_json().encode(), "promotion state")
        self._unsaved = False
