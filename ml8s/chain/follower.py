"""Follower: track a chain's head and refuse any head that does not extend the last one seen.

An inference node (or an auditor) polls the head; a head that moved must descend from the head it
saw before, proved by walking parent hashes back to it. A head with a lower counter is a rollback
(ChainRollbackError), a different block at or below the last counter is a fork (ChainForkError):
either means the chain's history was rewritten, and the follower keeps serving what it had.

Every version new to the follower must also pass the one checked path (trusted.py): signed by a
key of the policy in force at its position, policies chained to the pinned root, the chain's name bound,
and with ``require_signed`` a root and a policy at all (UntrustedVersionError naming the check); and be
backed by its run claim and an audit event (ChainEvidenceError naming ``run_index`` or ``audit_missing``).
No version the run index or audit trail records as committed may be above the head or off it
(ChainRollbackError, ``committed_off_chain``), so even a first start with no saved state refuses a
rolled-back head. A trust policy the follower saw must stay (``trust_policy_missing``): a deleted policy
file never undoes a rotation; and stay the file it saw (``trust_policy_replaced``, by the sha256 kept).
With an ``anchor`` (a signed checkpoint kept outside the store), a poll after the anchor expired is refused
(ChainFrozenError, ``anchor_expired``): nothing proves the head read is still the newest, so a frozen or
replayed store is not followed; ``renew`` takes a fresh anchor.

What a poll accepted is ``current``: the version checked, from the one head read of that poll. Readers
serve ``current``, never a head read again (which a store writer could have flipped in between).

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
from ml8s.chain._util import save_state, utc_now
from ml8s.chain.anchor import Anchor, expired, issued_in_future, pinned_policy_problems, signature_problems
from ml8s.chain.limits import RECORD_MAX_BYTES
from ml8s.chain.models import ChainVersion
from ml8s.chain.trust import TrustPolicy
from ml8s.chain.trusted import ReadTrust, TrustedReader
from ml8s.chain.versions import ChainVersions
from ml8s.errors import (
    ChainEvidenceError,
    ChainForkError,
    ChainFrozenError,
    ChainRollbackError,
    ConfigError,
    UntrustedVersionError,
    VersionNotFoundError,
)
from ml8s.store.operator_files import read_operator_file


class SeenHead(BaseModel):
    """The last head a follower accepted."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    chain_name: str
    counter: int
    block_hash: str
    policy_version: int = 0  # the trust policies seen by then: one that disappears is a finding
    # sha256 of policy ``policy_version``'s file (through previous_sha256 it fixes the older ones): a policy
    # replaced by another that still checks is a finding. "" in state saved before it: the next poll records it.
    policy_sha256: str = ""


class Follower:
    """Follows ``chain``'s head (tracking mode); ``last`` is the head it accepted most recently."""

    def __init__(
        self,
        chain: ChainVersions,
        *,
        state_path: str | None = None,
        anchor: Anchor | None = None,
        require_signed: bool = False,
        trust: ReadTrust | None = None,
        clock: Callable[[], dt.datetime] = utc_now,
    ) -> None:
        """``anchor``: where a follower with no state yet starts, so even its first poll refuses a head
        that does not extend the anchored one; ``trust``: the pinned root and CHAIN_REQUIRE_SIGNED
        (``require_signed`` alone: no root); ``clock``: the current time, for the anchor's expiry."""
        self.chain, self.state_path, self.clock = chain, state_path, clock
        self.reader = TrustedReader(chain, trust=trust or ReadTrust(require_signed=require_signed))
        self.current: ChainVersion | None = None  # the version the last poll checked (module docstring)
        self.last: SeenHead | None = None
        self._unsaved = False  # ``last`` is not in ``state_path`` yet: its save failed (a full disk)
        self.anchor: Anchor | None = None
        if state_path and os.path.lexists(state_path):
            # Bounded and non-blocking: a FIFO here hung the follower before its first poll.
            data = read_operator_file(
                state_path, setting="follower state", expected="a saved head", max_bytes=RECORD_MAX_BYTES
            )
            try:
                self.last = SeenHead.model_validate_json(data)
            except ValidationError as exc:
                raise ConfigError(f"{state_path} is no follower state; expected a saved head") from exc
            # Before renew: a newer anchor would replace the foreign head, and the next poll overwrite its file
            if self.last.chain_name != chain.name:
                raise ConfigError(f"{state_path} follows chain {self.last.chain_name!r}, not {chain.name!r}")
        if anchor is not None:
            self.renew(anchor)

    def renew(self, anchor: Anchor) -> None:
        """Rely on ``anchor`` from now on (a fresh one, before the last expires); the newer of the head it
        names and the last head seen is what the next poll must extend."""
        point = anchor.checkpoint
        if point.chain_name != self.chain.name:
            raise ConfigError(f"the anchor is for chain {point.chain_name!r}, not {self.chain.name!r}")
        self.anchor = anchor
        if self.last is None or point.counter > self.last.counter:
            count, sha = (self.last.policy_version, self.last.policy_sha256) if self.last is not None else (0, "")
            if point.policy_version > count or (point.policy_version == count > 0 and point.policy_sha256):
                count, sha = point.policy_version, point.policy_sha256  # signed: the anchor's word wins a tie
            self.last = SeenHead(
                chain_name=point.chain_name,
                counter=point.counter,
                block_hash=point.block_hash,
                policy_version=count,
                policy_sha256=sha,
            )

    def poll(self) -> ChainVersion | None:
        """The new head if it moved (and extends the last one), None if unchanged; raises on rollback,
        fork, an expired anchor, or a version that is not signed or backed as required. Either way
        ``current`` is then the head this poll read and checked. A poll that checked a head but could not
        save it (ConfigError: a full disk) raised: the next one that finds it unchanged saves it and returns it."""
        head = self.chain.head()  # the one head read: everything below checks this version
        # unchanged, unless ``renew`` took a newer anchor since: the head must then extend the anchored one
        # (a store rolled back below it, unnoticed while it stays put, was served on as if fresh)
        last_hash = self.last.block_hash if self.last is not None else head.block_hash
        if self.current is not None and head.block_hash == self.current.block_hash == last_hash:
            if self.anchor is not None:
                self._check_anchor(self.anchor)
            if self._unsaved:
                # the poll that took this head raised at its save, so its caller never got it: it does now
                self._save()
                return head
            return None
        policies = self.reader.fresh_policies()
        last = self.last
        if last is not None:
            self._check_missing(policies, last)
        if self.anchor is not None:
            self._check_anchor(self.anchor)  # first: what it finds is named as verify --anchor names it
        if last is not None:
            self._check_replaced(policies, last)
        moved = last is None or head.block_hash != last.block_hash
        if last is not None and moved:
            self._check_extends(head, last)
        seen = last.counter if last is not None and moved else head.counter - 1
        if self.current is None and last is None:
            seen = -1  # a first start: check the whole chain, so evidence of a rollback is checked in full
        self._check_new(head, self.reader.check_down_to(head, seen), seen)
        self.current = head
        self._remember(head, len(policies), self.reader.policy_sha256)
        return head if moved else None

    def checked_policies(self) -> list[TrustPolicy]:
        """The trust policies read again and held to what this follower saw (``trust_policy_missing``,
        ``trust_policy_replaced``): what a promotion decision is checked against. A poll whose head did not move
        checks no policy, yet a decision appended meanwhile can move what is served: checked against a
        ``trust/`` rewritten since (without a root, a self-signed policy 1 adding a store writer's key), it
        would serve that writer's choice, which a restarted follower refuses."""
        policies = self.reader.fresh_policies()
        if self.last is not None:
            self._check_missing(policies, self.last)
            self._check_replaced(policies, self.last)
        return policies

    def fetch_payload(self, version: ChainVersion, name: str) -> bytes:
        """A payload file of ``version``, sha256-checked, once its signature checks (TrustedReader)."""
        return self.reader.fetch_payload(version, name)

    def version(self, counter: int, block_hash: str = "") -> ChainVersion:
        """Version ``counter`` of the chain ``current`` heads, checked: reached from it by hash links; with
        ``block_hash`` (a promotion decision's), ChainForkError unless it is that block."""
        if self.current is None:
            raise VersionNotFoundError(f"chain {self.chain.name!r}: nothing polled yet; expected poll() first")
        for version in self.chain.walk(self.current):
            if version.counter == counter:
                if block_hash and version.block_hash != block_hash:
                    # the decision was checked against another read of the head: a head flipped in between
                    raise ChainForkError(
                        counter,
                        f"chain {self.chain.name!r}: v{counter} is block {version.block_hash[:12]} on the head checked "
                        f"({self.current.version_dir}), the promotion decision names {block_hash[:12]}",
                    )
                return self.reader.check(version)
            if version.counter < counter:
                break
        raise VersionNotFoundError(f"chain {self.chain.name!r} has no version {counter} (head v{self.current.counter})")

    def fresh_version(self, counter: int, block_hash: str = "") -> ChainVersion:
        """:meth:`version`, after one more poll when ``counter`` is above ``current``: a version committed (and
        promoted) since the poll read the head is then found, where the walk from the older head said "has no
        version". The head read again passes every check of a poll (it extends ``current``, signed and backed as
        required), so this reads nothing around them; a counter above that head too is VersionNotFoundError."""
        if self.current is not None and counter > self.current.counter:
            self.poll()
        return self.version(counter, block_hash)

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
        policies = self.reader.policies()
        # verify's anchor_policy too: the policies may have been replaced since the last head moved
        problems = signature_problems(anchor, policies, self.reader.trust.root)
        for check, reason in problems + pinned_policy_problems(self.chain, anchor, len(policies)):
            raise UntrustedVersionError(point.counter, f"the anchor of {self.chain.name!r}: {reason}", check=check)

    def _check_missing(self, policies: list[TrustPolicy], last: SeenHead) -> None:
        if len(policies) < last.policy_version:
            raise UntrustedVersionError(
                None,
                f"chain {self.chain.name!r}: trust policy {last.policy_version} was seen before, the chain now has "
                f"{len(policies)} valid: a deleted policy never undoes a rotation",
                check="trust_policy_missing",
            )

    def _check_replaced(self, policies: list[TrustPolicy], last: SeenHead) -> None:
        """Every policy seen is still the file seen (verify's ``anchor_policy``, without an anchor)."""
        seen, name = last.policy_version, self.chain.name
        if not seen or not last.policy_sha256:
            return
        # the newest file's own hash, or the one its successor names (checked by load_policy_chain)
        found = self.reader.policy_sha256 if len(policies) == seen else policies[seen].previous_sha256
        if found != last.policy_sha256:
            raise UntrustedVersionError(
                None,
                f"chain {name!r}: trust policy {seen} (or one before it) is not the file seen before: sha256 {found}, "
                f"expected {last.policy_sha256}; a policy replaced in the store, even by one that checks, is refused",
                check="trust_policy_replaced",
            )

    def _check_new(self, head: ChainVersion, new: list[ChainVersion], seen: int) -> None:
        """Every version new to this follower is backed by the run index and trail, and nothing recorded as
        committed lies above the head or off the versions walked."""
        named, problems = evidence.named_versions(self.chain)
        for check, reason in problems:
            raise ChainEvidenceError(None, reason, check=check)
        walked = {v.counter: v.block_hash for v in new}
        for item in named:
            if item.intent or item.counter <= seen:
                continue
            off = item.counter > head.counter or walked.get(item.counter, item.block_hash) != item.block_hash
            if off and not evidence.reachable_now(self.chain, item, head):  # not a commit that landed since the read
                raise ChainRollbackError(
                    item.counter,
                    f"chain {self.chain.name!r}: {item.version_dir} was committed ({item.source}) but is not on the "
                    f"chain headed by {head.version_dir}: the head was rolled back or history rewritten",
                    check="committed_off_chain",
                )
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

    def _remember(self, head: ChainVersion, policy_version: int, policy_sha256: str) -> None:
        self.last = SeenHead(
            chain_name=self.chain.name,
            counter=head.counter,
            block_hash=head.block_hash,
            policy_version=policy_version,
            policy_sha256=policy_sha256,
        )
        self._unsaved = bool(self.state_path)
        self._save()

    def _save(self) -> None:
        """``last`` into ``state_path`` if it is not there yet (ConfigError: it cannot be written; the next
        poll tries again)."""
        if self._unsaved and self.last is not None and self.state_path:
            save_state(self.state_path, self.last.model_dump_json().encode("utf-8"), "follower state")
            self._unsaved = False
