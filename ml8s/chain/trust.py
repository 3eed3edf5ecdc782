"""The chain's trust policies: which ed25519 keys may sign its versions, and how that changes (rotation).

Policies are create-only objects ``trust/policy-{version:010d}.json``, numbered from 1 without gaps,
each a ``SignedPolicy``: the policy, the sha256 of the previous policy's file (a hash chain), and
signatures over the policy's canonical JSON. A policy of schema 2 (every policy written now) is valid
only when signed by ``threshold`` of its own keys *and* by a threshold of the keys it takes over from:
the previous policy's, or, for policy 1 and for a re-issue after a compromise, the pinned trust root's
(root.py). Without a pinned root, policy 1 can only sign itself: trust on first use, which verify and
followers say plainly and CHAIN_REQUIRE_SIGNED refuses.

A schema-2 policy also says where it takes effect, ``from_counter`` (the head's counter + 1 when it was
adopted): blocks from there on must name it or a newer one, so a key it dropped signs nothing after the
rotation (revocation.py). Schema-1 policies (one signer, no threshold, written before issue 21) keep
verifying as they did when no root is pinned.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError, model_validator

from ml8s.chain import paths
from ml8s.chain.limits import RECORD_MAX_BYTES
from ml8s.chain.root import KeySignature, TrustedKey, TrustRoot, signers, trusted_key
from ml8s.chain.signing import SigningKey, signature_valid
from ml8s.chain.versions import ChainVersions
from ml8s.errors import ChainError, NotFoundError, ObjectTooLargeError, UnsafeObjectError
from ml8s.identity.hashing import canonical_bytes

_FROZEN = ConfigDict(extra="forbid", frozen=True)
_POLICY_KEY = re.compile(r"policy-([0-9]{10})\.json")
Hex64 = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]
OptionalHex64 = Annotated[str, StringConstraints(pattern=r"^([0-9a-f]{64})?$")]
Problems = list[tuple[str, str]]
MAX_POLICY_BYTES = 1024 * 1024
_SCHEMA_2_FIELDS = ("schema", "threshold", "root_id", "from_counter")

__all__ = [
    "SignedPolicy",
    "TrustPolicy",
    "TrustedKey",
    "adopt_policy",
    "load_policies",
    "load_policy_chain",
    "policy_bytes",
    "policy_key",
]


class TrustPolicy(BaseModel):
    """Keys trusted to sign blocks; blocks with a counter >= ``signed_from`` must be signed."""

    model_config = _FROZEN

    chain_name: str
    version: int = Field(ge=1)
    keys: tuple[TrustedKey, ...] = Field(min_length=1)
    signed_from: int = Field(ge=0)
    previous_sha256: OptionalHex64
    schema_version: int = Field(default=1, ge=1, le=2, alias="schema")
    threshold: int = Field(default=1, ge=1)
    root_id: OptionalHex64 = ""  # the pinned root this policy chains to ("": taken on first use)
    from_counter: int = Field(default=0, ge=0)  # schema 2: blocks from here on name this policy or a newer

    @model_validator(mode="after")
    def _consistent(self) -> TrustPolicy:
        if self.threshold > len(self.keys):
            raise ValueError(f"threshold {self.threshold} exceeds the {len(self.keys)} key(s)")
        legacy = (self.threshold, self.root_id, self.from_counter) == (1, "", 0)
        if self.schema_version == 1 and not legacy:
            raise ValueError("a schema-1 policy has no threshold, root_id or from_counter")
        return self

    def trusts(self, key_id: str) -> TrustedKey | None:
        return next((k for k in self.keys if k.key_id == key_id), None)


class SignedPolicy(BaseModel):
    """A policy and its signatures: ``signatures`` (schema 2), or one legacy ``signer_key_id``/``signature``."""

    model_config = _FROZEN

    policy: TrustPolicy
    signer_key_id: OptionalHex64 = ""
    signature: str = ""
    signatures: tuple[KeySignature, ...] = ()


def policy_bytes(policy: TrustPolicy) -> bytes:
    """What a policy's signatures cover: its canonical JSON (schema 1: without the fields schema 2 added,
    so the policies signed before them still verify)."""
    dumped = policy.model_dump(mode="json", by_alias=True)
    if policy.schema_version == 1:
        for name in _SCHEMA_2_FIELDS:
            dumped.pop(name, None)
    return canonical_bytes(dumped)


def policy_file(signed: SignedPolicy) -> bytes:
    dumped = signed.model_dump(mode="json", by_alias=True)
    if signed.policy.schema_version == 1:
        for name in _SCHEMA_2_FIELDS:
            dumped["policy"].pop(name, None)
        dumped.pop("signatures", None)
    return canonical_bytes(dumped)


def policy_key(chain: ChainVersions, version: int) -> str:
    return chain.key(paths.TRUST, f"policy-{version:010d}.json")


def load_policies(chain: ChainVersions, root: TrustRoot | None = None) -> tuple[list[TrustPolicy], Problems]:
    """The valid policies, version 1 first, and what is wrong with the rest (a broken policy and every
    later one are dropped: a key they add is not trusted). With a ``root``, policy 1 must chain to it."""
    policies, problems, _ = load_policy_chain(chain, root)
    return policies, problems


def load_policy_chain(chain: ChainVersions, root: TrustRoot | None = None) -> tuple[list[TrustPolicy], Problems, str]:
    """``load_policies`` and the sha256 of the newest valid policy's file ("" when none), hashed from the bytes
    read: through every ``previous_sha256`` it names each older policy file too, so a reader that kept it can
    tell a policy replaced by another that still checks (without a root, one self-signed)."""
    policies: list[TrustPolicy] = []
    previous = ""
    for info in chain.objects(chain.key(paths.TRUST)):
        name = info.key.rsplit("/", 1)[-1]
        match = _POLICY_KEY.fullmatch(name)
        where = chain.store.uri(info.key)
        if match is None or int(match.group(1)) != len(policies) + 1:
            return policies, [("trust_policy", f"{where}: expected policy-{len(policies) + 1:010d}.json")], previous
        try:
            data = chain.store.get(info.key, max_bytes=RECORD_MAX_BYTES)
            signed = SignedPolicy.model_validate_json(data)
        except (ValidationError, NotFoundError, ObjectTooLargeError, UnsafeObjectError):
            return policies, [("trust_policy", f"{where} is no valid signed trust policy")], previous
        policy = signed.policy
        if (policy.version, policy.chain_name, policy.previous_sha256) != (len(policies) + 1, chain.name, previous):
            return (
                policies,
                [("trust_policy", f"{where}: version, chain name or previous_sha256 do not follow")],
                previous,
            )
        if (problem := _signature_problem(signed, policies[-1] if policies else None, root)) is not None:
            return policies, [(problem[0], f"{where}: {problem[1]}")], previous
        policies.append(policy)
        previous = hashlib.sha256(data).hexdigest()
    return policies, [], previous


def _signature_problem(
    signed: SignedPolicy, previous: TrustPolicy | None, root: TrustRoot | None
) -> tuple[str, str] | None:
    policy, data = signed.policy, policy_bytes(signed.policy)
    if policy.schema_version == 1:
        if root is not None:
            return (
                "trust_root",
                f"a schema-1 policy (one signer, no root) does not chain to the pinned root {_id(root)}",
            )
        if previous is not None and previous.schema_version == 2:
            # adopt_policy writes schema 2 only: a schema-1 successor is one key's signature sidestepping the
            # previous policy's threshold (rotating the other keys out), never a legacy policy
            return (
                "trust_policy",
                f"a schema-1 policy (one signer, no threshold) cannot follow schema-2 policy {previous.version}; "
                f"expected schema 2, signed by {previous.threshold} of its key(s)",
            )
        key = (previous or policy).trusts(signed.signer_key_id)  # version 1 signs itself (trust on first use)
        if key is None or not signature_valid(key.public_key, signed.signature, data):
            return "trust_policy", "not signed by a key the previous policy trusts"
        return None
    if previous is not None and previous.schema_version == 2 and policy.from_counter < previous.from_counter:
        return "trust_policy", f"takes effect at {policy.from_counter}, before policy {previous.version} does"
    if root is not None and policy.root_id != root.root_id:
        return "trust_root", f"chains to root {policy.root_id or '<none>'}, not the pinned root {_id(root)}"
    own = signers(policy.keys, signed.signatures, data)
    if len(own) < policy.threshold:
        return "trust_policy", f"signed by {len(own)} of its own keys, its threshold is {policy.threshold}"
    by_root = root is not None and len(signers(root.keys, signed.signatures, data)) >= root.threshold
    if previous is None:
        if root is not None and not by_root:
            return "trust_root", f"policy 1 is not signed by {root.threshold} key(s) of the pinned root {_id(root)}"
        return None
    if by_root or len(signers(previous.keys, signed.signatures, data)) >= previous.threshold:
        return None
    return "trust_policy", f"not signed by {previous.threshold} key(s) of policy {previous.version} (nor the root)"


def _id(root: TrustRoot) -> str:
    return root.root_id[:16]


def adopt_policy(
    chain: ChainVersions,
    signer: SigningKey | Sequence[SigningKey],
    public_keys: list[str],
    *,
    threshold: int = 1,
    root: TrustRoot | None = None,
) -> TrustPolicy:
    """Write the next policy (schema 2) trusting ``public_keys`` (base64 raw ed25519) with ``threshold``,
    signed by every key in ``signer``: together a threshold of the new keys and of the current policy's
    (policy 1, or a re-issue: of ``root``'s). It takes effect at the head's counter + 1."""
    keys_given = [signer] if isinstance(signer, SigningKey) else list(signer)
    policies, problems = load_policies(chain, root)
    if problems:
        raise ChainError(f"chain {chain.name!r}: the trust policies are broken ({problems[0][1]}); fix them first")
    keys = tuple(sorted({trusted_key(k) for k in public_keys}, key=lambda k: k.key_id))
    head = chain.head()
    previous_bytes = chain.store.get(policy_key(chain, len(policies)), max_bytes=RECORD_MAX_BYTES) if policies else b""
    try:
        policy = TrustPolicy.model_validate(
            {
                "chain_name": chain.name,
                "version": len(policies) + 1,
                "keys": keys,
                "signed_from": policies[0].signed_from if policies else head.counter + 1,
                "previous_sha256": hashlib.sha256(previous_bytes).hexdigest() if policies else "",
                "schema": 2,
                "threshold": threshold,
                "root_id": root.root_id if root is not None else "",
                "from_counter": head.counter + 1,
            }
        )
    except ValidationError as exc:
        raise ChainError(f"trust policy for {chain.name!r}: {exc.errors()[0]['msg']}") from exc
    data = policy_bytes(policy)
    signed = SignedPolicy(
        policy=policy,
        signatures=tuple(
            sorted({KeySignature(key_id=k.key_id, signature=k.sign(data)) for k in keys_given}, key=lambda s: s.key_id)
        ),
    )
    if (problem := _signature_problem(signed, policies[-1] if policies else None, root)) is not None:
        raise ChainError(f"cannot adopt trust policy {policy.version} of {chain.name!r}: {problem[1]}")
    if not chain.store.put_if_absent(policy_key(chain, policy.version), policy_file(signed)):
        raise ChainError(f"trust policy version {policy.version} of {chain.name!r} was written concurrently; retry")
    return policy
