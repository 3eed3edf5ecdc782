"""Follower: track a chain's head and refuse any head that does not extend the last one seen.

An inference node (or an auditor) polls the head; a head that moved must descend from the head it
saw before, proved by walking parent hashes back to it. A head with a lower counter is a rollback
(ChainRollbackError), a different block at or below the last counter is a fork (ChainForkError):
either means the chain's history was rewritten, and the follower keeps serving what it had.

Every version new to the follower must also be
- signed as the chain's trust policy requires, and with ``require_signed`` (CHAIN_REQUIRE_SIGNED) the
  chain must have a policy at all (UntrustedVersionError naming ``unsigned``, ``untrusted_key``, ...:
  trusted.py, which also serves the payloads: ``fetch_payload``);
- backed by its run claim and an audit event, as its header records (ChainEvidenceError naming
  ``run_index`` or ``audit_missing``: the index or trail was deleted or edited).
With an ``anchor`` (a signed checkpoint kept outside the store), a poll after the anchor expired is
refused (ChainFrozenError, ``anchor_expired``): nothing proves the head read is still the newest, so a
frozen or replayed store is not followed; ``renew`` takes a fresh anchor.

The last head seen is kept in memory and, with ``state_path``, in a small JSON file (written by
rename, so a crash leaves the old or the new state), so a restarted node still refuses a rollback.

Example::

    follower = Follower(ChainStore(store, "churn-model"), state_path="/var/lib/ml8s/churn.head.json")
    if (new := follower.poll()) is not None:
        swap_model(follower.fetch_payload(new, "model.onnx"))
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Callable

from pydantic import BaseModel, ConfigDict, ValidationError

from ml8s.chain import evidence
from ml8s.chain._util import utc_now
from ml8s.chain.anchor import Anchor, expired, issued_in_future, signature_problems
from ml8s.chain.models import ChainVersion
from ml8s.chain.trusted import TrustedReader
from ml8s.chain.versions import ChainVersions
from ml8s.errors import (
    ChainEvidenceError,
    ChainForkError,
    ChainFrozenError,
    ChainRollbackError,
    ConfigError,
    UntrustedVersionError,
)


class SeenHead(BaseModel):
    """The last head a follower accepted."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    chain_name: str
    counter: int
    block_hash: str


class Follower:
    """Follows ``chain``'s head (tracking mode); ``last`` is the head it accepted most recently."""

    def __init__(
        self,
        chain: ChainVersions,
        *,
        state_path: str | None = None,
        anchor: Anchor | None = None,
        require_signed: bool = False,
        clock: Callable[[], dt.datetime] = utc_now,
    ) -> None:
        """``anchor``: where a follower with no state yet starts, so even its first poll refuses a head
        that does not extend the anchored one; ``require_signed``: refuse unsigned chains and versions
        (CHAIN_REQUIRE_SIGNED); ``clock``: the current time, for the anchor's expiry."""
        self.chain, self.state_path, self.clock = chain, state_path, clock
        self.reader = TrustedReader(chain, require_signed=require_signed)
        self.last: SeenHead | None = None
        self.anchor: Anchor | None = None
        if state_path and os.path.exists(state_path):
            with open(state_path, "rb") as handle:
                try:
                    self.last = SeenHead.model_validate_json(handle.read())
                except ValidationError as exc:
                    raise ConfigError(f"{state_path} is no follower state; expected a saved head") from exc
        if anchor is not None:
            self.renew(anchor)
        if self.last is not None and self.last.chain_name != chain.name:
            raise ConfigError(
                f"{state_path or 'the anchor'} follows chain {self.last.chain_name!r}, not {chain.name!r}"
            )

    def renew(self, anchor: Anchor) -> None:
        """Rely on ``anchor`` from now on (a fresh one, before the last expires); the newer of the head it
        names and the last head seen is what the next poll must extend."""
        point = anchor.checkpoint
        if point.chain_name != self.chain.name:
            raise ConfigError(f"the anchor is for chain {point.chain_name!r}, not {self.chain.name!r}")
        self.anchor = anchor
        if self.last is None or point.counter > self.last.counter:
            self.last = SeenHead(chain_name=point.chain_name, counter=point.counter, block_hash=point.block_hash)

    def poll(self) -> ChainVersion | None:
        """The new head if it moved (and extends the last one), None if unchanged; raises on rollback,
        fork, an expired anchor, or a new version that is not signed or backed as required."""
        if self.anchor is not None:
            self._check_anchor(self.anchor)
        head = self.chain.head()
        last = self.last
        if last is not None and head.block_hash == last.block_hash:
            return None
        if last is not None:
            self._check_extends(head, last)
        self._check_new(head, last.counter if last is not None else -1)
        self._remember(head)
        return head

    def fetch_payload(self, version: ChainVersion, name: str) -> bytes:
        """A payload file of ``version``, sha256-checked, once its signature checks (TrustedReader)."""
        return self.reader.fetch_payload(version, name)

    def _check_anchor(self, anchor: Anchor) -> None:
        point = anchor.checkpoint
        if issued_in_future(anchor, self.clock()):
            raise ChainFrozenError(
                point.counter,
                f"chain {self.chain.name!r}: the anchor (v{point.counter}) was issued at {point.issued_at}, in the "
                "future (a clock running ahead minted it): its expiry would not show a frozen head in time",
                check="anchor_future",
            )
        if expired(anchor, self.clock()):
            raise ChainFrozenError(
                point.counter,
                f"chain {self.chain.name!r}: the anchor (v{point.counter}, issued {point.issued_at}) expired at "
                f"{point.expires_at}; a frozen or replayed head cannot be told from the newest: renew the anchor",
                check="anchor_expired",
            )
        for check, reason in signature_problems(anchor, self.reader.policies()):
            raise UntrustedVersionError(point.counter, f"the anchor of {self.chain.name!r}: {reason}", check=check)

    def _check_new(self, head: ChainVersion, seen: int) -> None:
        """Every version new to this follower: signed as required, and backed by the run index and trail."""
        new = []
        for version in self.chain.walk(head):
            if version.counter <= seen:
                break
            new.append(self.reader.check(version))
        named, problems = evidence.named_versions(self.chain)
        for check, reason in problems:
            raise ChainEvidenceError(None, reason, check=check)
        for check, reason, version in evidence.index_problems(self.chain, new, named):
            raise ChainEvidenceError(version.counter, f"{version.version_dir}: {reason}", check=check)

    def _check_extends(self, head: ChainVersion, last: SeenHead) -> None:
        name = self.chain.name
        if head.counter < last.counter:
            raise ChainRollbackError(
                head.counter, f"chain {name!r}: head at {head.counter} after {last.counter} ({last.block_hash})"
            )
        for version in self.chain.walk(head):
            if version.counter == last.counter:
                if version.block_hash != last.block_hash:
                    raise ChainForkError(
                        last.counter,
                        f"chain {name!r}: head {head.version_dir} descends from {version.block_hash} at "
                        f"{last.counter}, not from {last.block_hash} seen before",
                    )
                return

    def _remember(self, head: ChainVersion) -> None:
        self.last = SeenHead(chain_name=self.chain.name, counter=head.counter, block_hash=head.block_hash)
        if self.state_path:
            tmp = f"{self.state_path}.{os.getpid()}.tmp"
            with open(tmp, "wb") as handle:
                handle.write(self.last.model_dump_json().encode("utf-8"))
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, self.state_path)
