"""Promotion: which committed version followers serve (docs/chain.md, "Promotion").

Every committed version is a *candidate*; a promotion decision says whether it is served. Decisions form
an append-only, hash-linked log beside the head::

    promotions/{sequence:010d}.json     create-only; each names the previous one's sha256

A decision records the candidate (counter, block hash), the action (``promote`` or ``reject``), the version
served after it (the candidate when promoted; the one served before when rejected), the rule that decided
(the metric comparison under PROMOTE_MIN_DELTA, or ``manual``) and, when the chain has a trust policy, an
ed25519 signature by a key of its newest policy, checked like a block's. Two deciders racing for one
sequence number: the create-only write lets one win; the other reads the winner and retries on top of it.

A reader walks the log from 1 (or from the last decision it verified): every record must follow its
predecessor (sequence, previous sha256, chain name), be signed as the chain's policy requires, and name
versions that are on the chain (their blocks verified through ``ChainVersions.get``). What it serves is the
newest decision's ``served`` version. A chain with no decision has no promotion gate: followers serve its
head, as before promotion existed.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ml8s.chain import revocation, trust
from ml8s.chain.limits import RECORD_MAX_BYTES
from ml8s.chain.models import ChainVersion, Hex64, OptionalHex64
from ml8s.chain.root import TrustRoot
from ml8s.chain.signing import SigningKey, signature_valid
from ml8s.chain.versions import ChainVersions
from ml8s.errors import (
    ChainCorruptionError,
    ChainError,
    NotFoundError,
    ObjectTooLargeError,
    UnsafeObjectError,
    VersionNotFoundError,
)
from ml8s.identity.hashing import canonical_bytes
from ml8s.text import first_problem

PROMOTIONS = "promotions"
_FROZEN = ConfigDict(extra="forbid", frozen=True)
PromotionAction = Literal["promote", "reject"]


class Decision(BaseModel):
    """One promotion decision (module docstring)."""

    model_config = _FROZEN

    chain_name: str
    sequence: int = Field(ge=1)
    action: PromotionAction
    counter: int = Field(ge=1)
    block_hash: Hex64
    served_counter: int = Field(ge=0)  # 0: nothing is served yet (a first candidate rejected)
    served_block_hash: OptionalHex64
    rule: str
    previous_sha256: OptionalHex64
    trust_policy_version: int = Field(ge=0)


class SignedDecision(BaseModel):
    model_config = _FROZEN

    decision: Decision
    signer_key_id: OptionalHex64 = ""
    signature: str = ""


def decision_bytes(decision: Decision) -> bytes:
    """What a signature covers: the decision's canonical JSON."""
    return canonical_bytes(decision.model_dump(mode="json"))


def record_key(chain: ChainVersions, sequence: int) -> str:
    return chain.key(PROMOTIONS, f"{sequence:010d}.json")


class PromotionLog:
    """The checked promotion log of one chain; verified records are cached (they are immutable). Signatures
    are checked against the policies that chain to ``root`` (default: the chain's own ``trust_root``)."""

    def __init__(
        self,
        chain: ChainVersions,
        root: TrustRoot | None = None,
        *,
        policies: Callable[[], list[trust.TrustPolicy]] | None = None,
    ) -> None:
        """``policies``: where a follower's reader takes the policies from (``Follower.checked_policies``), so a
        decision is checked against the very policies the follower holds to what it saw before."""
        self.chain = chain
        # A reader's pinned root, not only a committer's: without it a rewritten trust/ whose self-signed
        # policy 1 trusts a store writer's key passes as trust on first use, and that key's decisions with it
        self.root = root if root is not None else chain.trust_root
        self._policies = policies
        self._records: list[SignedDecision] = []
        self._hashes: list[str] = []  # the sha256 of each record's bytes, as checked
        self._last_sha256 = ""

    def decisions(self) -> list[SignedDecision]:
        """Every decision, oldest first, each checked (module docstring).

        Raises:
            ChainCorruptionError: a record is malformed, out of sequence, unsigned or forged, or names a
                version that is not on the chain (``check``: ``promotion``).
        """
        while True:
            sequence = len(self._records) + 1
            key = record_key(self.chain, sequence)
            data = read_record(self.chain, sequence)
            if data is None:
                break
            self._records.append(self._checked(data, sequence, key))
            self._last_sha256 = hashlib.sha256(data).hexdigest()
            self._hashes.append(self._last_sha256)
        return list(self._records)

    def hashes(self) -> list[str]:
        """The sha256 of every checked record, oldest first (what an anchor or a follower's state pins)."""
        self.decisions()
        return list(self._hashes)

    def appended_after(self, count: int) -> bool:
        """Whether a decision exists after the first ``count``: one read, nothing checked (a writer's cue that what
        it read is no longer the newest, never a reason to trust anything)."""
        return read_record(self.chain, count + 1) is not None

    def latest(self) -> SignedDecision | None:
        """The newest decision (None: the chain has no promotion gate)."""
        found = self.decisions()
        return found[-1] if found else None

    def served(self) -> ChainVersion | None:
        """The version followers serve under the gate; None when there is no decision or none promoted yet."""
        latest = self.latest()
        if latest is None or latest.decision.served_counter == 0:
            return None
        return self.chain.get(latest.decision.served_counter)

    def decide(
        self,
        action: PromotionAction,
        candidate: ChainVersion,
        rule: str,
        signer: SigningKey | None,
        *,
        first: bool = False,
    ) -> SignedDecision:
        """Append a decision on ``candidate`` (retrying on top of a decision that won the race); ``first``: only
        as the log's first decision (else the newest one is returned and nothing is written).

        Raises:
            SigningRequiredError: the chain has a trust policy and ``signer`` is missing or not in it.
            ChainError: ``candidate`` is genesis.
        """
        if candidate.counter == 0:
            raise ChainError(f"chain {self.chain.name!r}: genesis (version 0) holds no model to {action}")
        in_force = revocation.commit_policy(self.chain, signer, self.chain.trust_root)
        policy = in_force.version if in_force is not None else 0
        for _ in range(100):
            previous = self.latest()
            if first and previous is not None:
                return previous
            sequence = previous.decision.sequence + 1 if previous is not None else 1
            served = (candidate.counter, candidate.block_hash)
            if action == "reject":
                served = (
                    (previous.decision.served_counter, previous.decision.served_block_hash)
                    if previous is not None
                    else (0, "")
                )
            decision = Decision(
                chain_name=self.chain.name,
                sequence=sequence,
                action=action,
                counter=candidate.counter,
                block_hash=candidate.block_hash,
                served_counter=served[0],
                served_block_hash=served[1],
                rule=rule,
                previous_sha256=self._last_sha256 if previous is not None else "",
                trust_policy_version=policy,
            )
            signed = SignedDecision(decision=decision)
            if policy and signer is not None:
                signed = SignedDecision(
                    decision=decision, signer_key_id=signer.key_id, signature=signer.sign(decision_bytes(decision))
                )
            if self.chain.store.put_if_absent(record_key(self.chain, sequence), signed.model_dump_json().encode()):
                return signed
        raise ChainError(f"chain {self.chain.name!r}: 100 promotion decisions raced this one; try again")

    def keep_head_served(self, head: ChainVersion | None, signer: SigningKey | None) -> None:
        """Before a chain's first decision is a ``reject``: followers of a chain with no decision serve its head, and
        a first reject serves nothing (``served_counter`` 0), so it would stop serving instead of keeping what was
        served. The head is recorded as promoted first (only as the first decision: a racer's stands)."""
        if head is not None and head.counter > 0:
            rule = f"the promotion gate opens on v{head.counter}, the head that followers served without one"
            self.decide("promote", head, rule, signer, first=True)

    def _checked(self, data: bytes, sequence: int, key: str) -> SignedDecision:
        where = self.chain.store.uri(key)
        try:
            signed = SignedDecision.model_validate_json(data)
        except ValidationError as exc:
            raise _corrupt(f"{where} is no promotion decision ({first_problem(exc)})") from exc
        decision = signed.decision
        expected = (self.chain.name, sequence, self._last_sha256)
        if (decision.chain_name, decision.sequence, decision.previous_sha256) != expected:
            raise _corrupt(
                f"{where} names chain {decision.chain_name!r}, sequence {decision.sequence}, previous "
                f"{decision.previous_sha256 or '-'}; expected {expected[0]!r}, {sequence}, {expected[2] or '-'}",
            )
        self._check_signature(signed, where)
        named = [self._check_on_chain(decision.counter, decision.block_hash, where, "decides on")]
        if decision.action == "promote" and (decision.served_counter, decision.served_block_hash) != (
            decision.counter,
            decision.block_hash,
        ):
            raise _corrupt(f"{where} promotes v{decision.counter} but serves v{decision.served_counter}")
        if decision.action == "reject":
            before = self._records[-1].decision if self._records else None
            kept = (before.served_counter, before.served_block_hash) if before is not None else (0, "")
            if (decision.served_counter, decision.served_block_hash) != kept:
                raise _corrupt(f"{where} rejects v{decision.counter} but changes the served version")
        if decision.served_counter:
            named.append(self._check_on_chain(decision.served_counter, decision.served_block_hash, where, "serves"))
        _check_not_retired(decision, named, where)
        return signed

    def _check_signature(self, signed: SignedDecision, where: str) -> None:
        if self._policies is not None:
            policies, problems = self._policies(), list[tuple[str, str]]()
        else:
            policies, problems = trust.load_policies(self.chain, self.root)
        wanted = signed.decision.trust_policy_version
        if problems:
            raise _corrupt(problems[0][1])
        if not policies:
            if signed.signature or wanted:
                raise _corrupt(f"{where} is signed under trust policy {wanted}, but the chain has none")
            return
        if wanted == 0 or wanted > len(policies):
            raise _corrupt(f"{where} names trust policy {wanted}; the chain has {len(policies)}")
        key = policies[wanted - 1].trusts(signed.signer_key_id)
        if key is None or not signature_valid(key.public_key, signed.signature, decision_bytes(signed.decision)):
            raise _corrupt(
                f"{where} is not signed by a key of trust policy {wanted} (signer {signed.signer_key_id or '-'})",
            )
        previous = self._records[-1].decision.trust_policy_version if self._records else 0
        if wanted < previous:
            raise _corrupt(f"{where} names trust policy {wanted}, older than its predecessor's {previous}")

    def _check_on_chain(self, counter: int, block_hash: str, where: str, what: str) -> ChainVersion:
        try:
            version = self.chain.get(counter)
        except VersionNotFoundError as exc:
            raise _corrupt(f"{where} {what} v{counter}, which is not on the chain") from exc
        if version.block_hash != block_hash:
            raise _corrupt(
                f"{where} {what} v{counter} block {block_hash[:12]}; the chain holds {version.block_hash[:12]}"
            )
        return version


def _check_not_retired(decision: Decision, named: list[ChainVersion], where: str) -> None:
    """A decision on a version committed under trust policy N is signed under N or newer: a key a rotation
    retired decides nothing on the versions committed after it (as it signs no block or anchor after it)."""
    newest = max(named, key=lambda v: v.header.trust_policy_version)
    if decision.trust_policy_version < newest.header.trust_policy_version:
        raise _corrupt(
            f"{where} is signed under trust policy {decision.trust_policy_version}, but v{newest.counter} it names "
            f"was committed under policy {newest.header.trust_policy_version}: a retired key decides nothing after "
            "the rotation"
        )


def read_record(chain: ChainVersions, sequence: int) -> bytes | None:
    """Record ``sequence``'s bytes, bounded like every chain record (None: there is none); a record that is no
    regular file or is over the bound is a ``promotion`` finding, never followed, waited on or read whole."""
    try:
        return chain.store.get(record_key(chain, sequence), max_bytes=RECORD_MAX_BYTES)
    except NotFoundError:
        return None
    except (ObjectTooLargeError, UnsafeObjectError) as exc:
        raise _corrupt(exc.message) from exc


def _corrupt(reason: str) -> ChainCorruptionError:
    return ChainCorruptionError(None, reason, check="promotion")
