"""Anchors: a signed head checkpoint kept outside the store, against rollback, freeze and fork.

Hashes make a chain tamper-evident only relative to something the tamperer cannot rewrite: whoever
can write the store can roll the head back, delete the versions after it, or re-hash a whole rewrite,
and the result is a consistent chain. An anchor is that something, as signed tree heads are in
Certificate Transparency and Go's checksum database, and timestamped metadata in TUF: the chain's name,
a head (counter, block hash), the sha256 of the newest trust policy file, an issue time and an expiry,
signed by a trusted committer's ed25519 key. Kept elsewhere (a file the auditor keeps, a second bucket,
a model-registry tag), it lets verify tell:

- ``anchor_rollback``: the head is below the anchored counter (versions after it were dropped);
- ``anchor_fork``: the chain at the anchored counter holds another block (history rewritten);
- ``anchor_expired``: the anchor's expiry has passed (a frozen head: whoever publishes anchors stopped,
  or someone replays an old anchor to hide newer versions); publish a fresh one at least once per TTL;
- ``anchor_future``: the anchor was issued more than ``ISSUE_TOLERANCE`` (5 minutes) after the
  verifier's now: minted by a clock running ahead (or on purpose), its expiry would lie as far ahead,
  and a frozen head would go unnoticed that much longer. Expiry and issue times are wall-clock times,
  so this bounds how far two clocks may disagree; everything about the chain itself is ordered by counter;
- ``anchor_policy``: the trust policy the anchor pinned was replaced;
- ``anchor_signature``: the anchor is not signed by a key of the chain's *newest* trust policy (a key a
  rotation retired signs no anchor after it: re-issue anchors after rotating) or of the pinned root;
- ``anchor_root``: the anchor is bound to another trust root than the one pinned (CHAIN_TRUST_ROOT);
- ``promotion_rollback`` / ``promotion_fork``: the promotion log no longer reaches the decision the anchor
  pinned, or holds another record there (promotion_pin.py): a promotion or a rejection was undone.

Anchors bind the chain name, the trust root's id and the number of trust policies they saw: a policy
file deleted after the anchor was issued is ``anchor_policy``, never a silent undo of the rotation. They
also pin the promotion log's head (its newest decision's sequence and record sha256), so what followers
serve cannot be rolled back either. Anchors from before a field existed leave it out of what they sign,
and verify as they were signed (pinning nothing of what the field adds).
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import hashlib
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ml8s.chain import trust
from ml8s.chain._util import rfc3339
from ml8s.chain.limits import RECORD_MAX_BYTES
from ml8s.chain.models import Block, ChainVersion, Hex64, OptionalHex64, Rfc3339
from ml8s.chain.promotion import PromotionLog
from ml8s.chain.promotion_pin import PromotionPin, log_pin, pin_problems, raw_hashes
from ml8s.chain.root import TrustRoot
from ml8s.chain.signing import SigningKey, key_id, signature_valid
from ml8s.chain.versions import ChainVersions
from ml8s.errors import ChainCorruptionError, ConfigError, NotFoundError, ObjectTooLargeError, UnsafeObjectError
from ml8s.identity.hashing import canonical_bytes
from ml8s.text import first_problem

_FROZEN = ConfigDict(extra="forbid", frozen=True)
ISSUE_TOLERANCE = dt.timedelta(minutes=5)  # how far ahead of the verifier's clock an anchor's issue time may be
Problems = list[tuple[str, str]]


class Checkpoint(BaseModel):
    model_config = _FROZEN

    chain_name: str
    counter: int = Field(ge=0)
    block_hash: Hex64
    policy_sha256: OptionalHex64
    issued_at: Rfc3339
    expires_at: Rfc3339
    policy_version: int = Field(default=0, ge=0)  # how many trust policies the chain had (0: none, or older)
    trust_root_id: OptionalHex64 = ""  # the pinned root the policies chained to ("": none pinned)
    promotion_sequence: int = Field(default=0, ge=0)  # the promotion log's newest decision (0: none, or older)
    promotion_sha256: OptionalHex64 = ""  # ... and the sha256 of its record

    @property
    def promotion(self) -> PromotionPin:
        return PromotionPin(sequence=self.promotion_sequence, sha256=self.promotion_sha256)


class Anchor(BaseModel):
    """A checkpoint and its signature (hex) by ``public_key`` (base64 raw ed25519)."""

    model_config = _FROZEN

    checkpoint: Checkpoint
    public_key: str
    signature: str


def make_anchor(
    chain: ChainVersions, signer: SigningKey, ttl: dt.timedelta, now: dt.datetime, root: TrustRoot | None = None
) -> Anchor:
    """An anchor of the chain's current head, valid for ``ttl``."""
    head = chain.head()
    policies, problems = trust.load_policies(chain, root)
    if problems:
        raise ChainCorruptionError(None, problems[0][1], check=problems[0][0])
    promotions = log_pin(PromotionLog(chain, root))  # a log that does not check is not anchored (ChainCorruptionError)
    checkpoint = Checkpoint(
        chain_name=chain.name,
        counter=head.counter,
        block_hash=head.block_hash,
        policy_sha256=_policy_hashes(chain, len(policies))[-1] if policies else "",
        issued_at=rfc3339(now),
        expires_at=rfc3339(now + ttl),
        policy_version=len(policies),
        trust_root_id=root.root_id if root is not None else "",
        promotion_sequence=promotions.sequence,
        promotion_sha256=promotions.sha256,
    )
    if signature_problems(
        Anchor(checkpoint=checkpoint, public_key=signer.public_key, signature=""), policies, root, verify=False
    ):
        raise ConfigError(
            f"key {signer.key_id} is not in the newest trust policy of {chain.name!r} (nor the root): no anchor"
        )
    return Anchor(checkpoint=checkpoint, public_key=signer.public_key, signature=signer.sign(_bytes(checkpoint)))


def read_anchor(data: bytes, *, where: str) -> Anchor:
    try:
        return Anchor.model_validate_json(data)
    except ValidationError as exc:
        raise ConfigError(
            f"{where} is no ml8s chain anchor ({first_problem(exc)}); expected what ml8s chain anchor --out writes"
        ) from exc


def anchor_problems(
    chain: ChainVersions,
    anchor: Anchor,
    walked: list[ChainVersion],
    now: dt.datetime,
    root: TrustRoot | None = None,
) -> list[tuple[str, str, int | None]]:
    """(check, reason, counter) for every way the chain read (``walked``, head first) disagrees with ``anchor``."""
    point, found = anchor.checkpoint, list[tuple[str, str, int | None]]()
    if point.chain_name != chain.name:
        found.append(("anchor_chain", f"the anchor is for chain {point.chain_name!r}", None))
    policies, _ = trust.load_policies(chain, root)
    found += [(check, reason, None) for check, reason in signature_problems(anchor, policies, root)]
    found += _position_problems(point, [(v.counter, v.block_hash) for v in walked])
    if issued_in_future(anchor, now):
        found.append(("anchor_future", f"issued at {point.issued_at}, after {rfc3339(now)} + {ISSUE_TOLERANCE}", None))
    if expired(anchor, now):
        found.append(
            ("anchor_expired", f"expired at {point.expires_at} (issued {point.issued_at}): frozen or replayed", None)
        )
    found += [(check, reason, None) for check, reason in pinned_policy_problems(chain, anchor, len(policies))]
    pinned = point.promotion
    held = raw_hashes(chain, pinned.sequence)
    found += [(check, reason, None) for check, reason in pin_problems(held, pinned, chain.name, "the anchor names")]
    return found


def proof_anchor_problems(
    anchor: Anchor, chain_name: str, blocks: Sequence[Block]
) -> list[tuple[str, str, int | None]]:
    """An anchor against a chain known only by its blocks (an audit bundle's proof, genesis first): the
    same checks as verify's but ``anchor_expired`` (a bundle is checked later, the anchor was checked
    live when bundled) and the key's trust (the proof holds no policy): the signature must be valid for
    the anchor's own key, whose id the caller shows so that an auditor can compare it with the one trusted."""
    point = anchor.checkpoint
    found = list[tuple[str, str, int | None]]()
    if point.chain_name != chain_name:
        found.append(("anchor_chain", f"the anchor is for chain {point.chain_name!r}", None))
    found += [(check, reason, None) for check, reason in signature_problems(anchor, [], None)]
    return found + _position_problems(point, [(b.header.counter, b.block_hash) for b in reversed(blocks)])


def _position_problems(point: Checkpoint, walked: list[tuple[int, str]]) -> list[tuple[str, str, int | None]]:
    """``anchor_rollback`` or ``anchor_fork`` for a chain of (counter, block hash), head first."""
    head = walked[0][0] if walked else None
    at = next((block for counter, block in walked if counter == point.counter), None)
    if head is None or head < point.counter:
        return [
            (
                "anchor_rollback",
                f"head {'<none>' if head is None else head} is below the anchored {point.counter}",
                None,
            )
        ]
    if at != point.block_hash:
        held = at or "<nothing>"
        return [
            ("anchor_fork", f"version {point.counter} is {held}, the anchor says {point.block_hash}", point.counter)
        ]
    return []


def pinned_policy_problems(chain: ChainVersions, anchor: Anchor, count: int) -> Problems:
    """``anchor_policy`` when no policy file of the chain's ``count`` valid ones hashes to the one the anchor pinned
    (a policy replaced by another that still checks: without a root, one self-signed that adds a key)."""
    pinned = anchor.checkpoint.policy_sha256
    if pinned and pinned not in _policy_hashes(chain, count):
        return [("anchor_policy", "the trust policy the anchor pinned is no longer in the chain")]
    return []


def signature_problems(
    anchor: Anchor, policies: list[trust.TrustPolicy], root: TrustRoot | None, *, verify: bool = True
) -> Problems:
    """``anchor_root`` when the anchor names another root than the pinned one; ``anchor_policy`` when it saw
    more policies than the chain holds (one was deleted); ``anchor_signature`` unless it is validly signed by a
    key of the newest policy or of the pinned root (any key on a chain with neither: there the anchor only
    pins the head, it cannot vouch for authors)."""
    point, found = anchor.checkpoint, Problems()
    if root is not None and point.trust_root_id != root.root_id:
        found.append(("anchor_root", f"bound to root {point.trust_root_id or '<none>'}, not the pinned {root.root_id}"))
    if point.policy_version > len(policies):
        found.append(
            (
                "anchor_policy",
                f"issued under trust policy {point.policy_version}, the chain has "
                f"{len(policies)} valid: a policy was deleted or broken since",
            )
        )
    signer = key_id(_raw(anchor.public_key))
    newest = policies[-1] if policies else None
    trusted = (newest is None and root is None) or (newest is not None and newest.trusts(signer) is not None)
    trusted = trusted or (root is not None and any(k.key_id == signer for k in root.keys))
    if not trusted:
        where = f"trust policy {newest.version}" if newest is not None else "the pinned root"
        found.append(("anchor_signature", f"key {signer} is not in {where}: a retired or unknown key signs no anchor"))
    elif verify and not signature_valid(anchor.public_key, anchor.signature, _bytes(anchor.checkpoint)):
        found.append(("anchor_signature", f"not validly signed by key {signer}"))
    return found


def expired(anchor: Anchor, now: dt.datetime) -> bool:
    return rfc3339(now) > anchor.checkpoint.expires_at


def issued_in_future(anchor: Anchor, now: dt.datetime) -> bool:
    """Issued later than ``now`` plus the clock tolerance (fixed-width RFC 3339: string order is time order)."""
    return anchor.checkpoint.issued_at > rfc3339(now + ISSUE_TOLERANCE)


def _bytes(checkpoint: Checkpoint) -> bytes:
    dumped = checkpoint.model_dump(mode="json")
    for name in ("policy_version", "trust_root_id", "promotion_sequence", "promotion_sha256"):
        # unset in anchors from before them: they verify as signed
        if not dumped[name]:
            del dumped[name]
    return canonical_bytes(dumped)


def _raw(public_key: str) -> bytes:
    try:
        return base64.b64decode(public_key, validate=True)
    except binascii.Error:
        return b""


def _policy_hashes(chain: ChainVersions, count: int) -> list[str]:
    hashes = []
    for version in range(1, count + 1):
        try:
            data = chain.store.get(trust.policy_key(chain, version), max_bytes=RECORD_MAX_BYTES)
            hashes.append(hashlib.sha256(data).hexdigest())
        except (NotFoundError, ObjectTooLargeError, UnsafeObjectError):
            break
    return hashes
