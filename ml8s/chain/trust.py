"""The chain's trust policy: which ed25519 keys may sign its versions, and how that changes (rotation).

Policies are create-only objects ``trust/policy-{version:010d}.json``, numbered from 1, each a
``SignedPolicy``: the policy, the sha256 of the previous policy's file (a hash chain), and a signature
over the policy's canonical JSON by a key the *previous* policy trusts (version 1: by one of its own
keys: trust on first use, pinned by an anchor or by the operator). Rotation is a new version signed by
a currently trusted key; dropping a key makes later blocks by it untrusted, while blocks signed before
keep verifying against the policy version they name (``BlockHeader.trust_policy_version``).

A chain without any policy is a legacy, unsigned chain: verify says it could not check authenticity.
Once a policy exists, every block from ``signed_from`` on must be signed by a key of the policy it
names; a signed block naming a policy that is gone is a finding too (deleting ``trust/`` is detected).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from ml8s.chain import paths
from ml8s.chain.limits import RECORD_MAX_BYTES
from ml8s.chain.models import ChainVersion
from ml8s.chain.signing import SigningKey, key_id, signature_valid
from ml8s.chain.versions import ChainVersions
from ml8s.chain.wire import header_bytes
from ml8s.errors import (
    ChainCorruptionError,
    ChainError,
    NotFoundError,
    ObjectTooLargeError,
    SigningRequiredError,
    UnsafeObjectError,
)
from ml8s.identity.hashing import canonical_bytes

_FROZEN = ConfigDict(extra="forbid", frozen=True)
_POLICY_KEY = re.compile(r"policy-([0-9]{10})\.json")
Hex64 = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]
Problems = list[tuple[str, str]]
_REQUIRED = "signatures are required (CHAIN_REQUIRE_SIGNED; --allow-unsigned to accept a legacy chain)"


class TrustedKey(BaseModel):
    model_config = _FROZEN

    key_id: Hex64
    public_key: str  # base64 of the raw 32-byte ed25519 public key


class TrustPolicy(BaseModel):
    """Keys trusted to sign blocks; blocks with a counter >= ``signed_from`` must be signed."""

    model_config = _FROZEN

    chain_name: str
    version: int = Field(ge=1)
    keys: tuple[TrustedKey, ...] = Field(min_length=1)
    signed_from: int = Field(ge=0)
    previous_sha256: Annotated[str, StringConstraints(pattern=r"^([0-9a-f]{64})?$")]

    def trusts(self, key_id: str) -> TrustedKey | None:
        return next((k for k in self.keys if k.key_id == key_id), None)


class SignedPolicy(BaseModel):
    model_config = _FROZEN

    policy: TrustPolicy
    signer_key_id: Hex64
    signature: str


def policy_bytes(policy: TrustPolicy) -> bytes:
    """What a policy's signature covers: its canonical JSON."""
    return canonical_bytes(policy.model_dump(mode="json"))


def policy_key(chain: ChainVersions, version: int) -> str:
    return chain.key(paths.TRUST, f"policy-{version:010d}.json")


def load_policies(chain: ChainVersions) -> tuple[list[TrustPolicy], Problems]:
    """The valid policies, version 1 first, and what is wrong with the rest (a broken policy and every
    later one are dropped: a key they add is not trusted)."""
    policies: list[TrustPolicy] = []
    previous = ""
    for info in chain.objects(chain.key(paths.TRUST)):
        name = info.key.rsplit("/", 1)[-1]
        match = _POLICY_KEY.fullmatch(name)
        where = chain.store.uri(info.key)
        if match is None or int(match.group(1)) != len(policies) + 1:
            return policies, [("trust_policy", f"{where}: expected policy-{len(policies) + 1:010d}.json")]
        try:
            data = chain.store.get(info.key, max_bytes=RECORD_MAX_BYTES)
            signed = SignedPolicy.model_validate_json(data)
        except (ValidationError, NotFoundError, ObjectTooLargeError, UnsafeObjectError):
            return policies, [("trust_policy", f"{where} is no valid signed trust policy")]
        policy = signed.policy
        signers = policies[-1] if policies else policy  # version 1 signs itself (trust on first use)
        key = signers.trusts(signed.signer_key_id)
        if (policy.version, policy.chain_name, policy.previous_sha256) != (len(policies) + 1, chain.name, previous):
            return policies, [("trust_policy", f"{where}: version, chain name or previous_sha256 do not follow")]
        if key is None or not signature_valid(key.public_key, signed.signature, policy_bytes(policy)):
            return policies, [("trust_policy", f"{where} is not signed by a key the previous policy trusts")]
        policies.append(policy)
        previous = hashlib.sha256(data).hexdigest()
    return policies, []


def adopt_policy(chain: ChainVersions, signer: SigningKey, public_keys: list[str]) -> TrustPolicy:
    """Write the next policy version trusting ``public_keys`` (base64 raw ed25519), signed by ``signer``,
    which the current policy must trust (the first policy: ``signer`` must be among the new keys)."""
    policies, problems = load_policies(chain)
    if problems:
        raise ChainError(f"chain {chain.name!r}: the trust policies are broken ({problems[0][1]}); fix them first")
    keys = tuple(sorted({_trusted(k) for k in public_keys}, key=lambda k: k.key_id))
    head = chain.head()
    previous_bytes = chain.store.get(policy_key(chain, len(policies)), max_bytes=RECORD_MAX_BYTES) if policies else b""
    policy = TrustPolicy(
        chain_name=chain.name,
        version=len(policies) + 1,
        keys=keys,
        signed_from=policies[0].signed_from if policies else head.counter + 1,
        previous_sha256=hashlib.sha256(previous_bytes).hexdigest() if policies else "",
    )
    if (policies[-1] if policies else policy).trusts(signer.key_id) is None:
        raise ChainError(f"key {signer.key_id} is not trusted by chain {chain.name!r}'s current policy: cannot sign")
    signed = SignedPolicy(
        policy=policy,
        signer_key_id=signer.key_id,
        signature=signer.sign(policy_bytes(policy)),
    )
    if not chain.store.put_if_absent(policy_key(chain, policy.version), signed.model_dump_json().encode("utf-8")):
        raise ChainError(f"trust policy version {policy.version} of {chain.name!r} was written concurrently; retry")
    return policy


def block_problems(version: ChainVersion, policies: list[TrustPolicy]) -> Problems:
    """What is wrong with a version's signature under the chain's policies (module docstring)."""
    block, wanted = version.block, version.header.trust_policy_version
    if wanted > len(policies):
        return [("trust_policy_missing", f"names trust policy {wanted}, the chain has {len(policies)}")]
    if wanted == 0 and (not policies or version.counter < policies[0].signed_from):
        return []  # a legacy chain, or a version from before the first policy: nothing to check against
    if not block.signature:
        return [("unsigned", f"unsigned, but the chain requires signatures from version {policies[0].signed_from}")]
    if wanted == 0:
        return [("untrusted_key", "signed, but names no trust policy")]
    key = policies[wanted - 1].trusts(block.signer_key_id)
    if key is None:
        return [("untrusted_key", f"signed by key {block.signer_key_id}, not in trust policy {wanted}")]
    if not signature_valid(key.public_key, block.signature, header_bytes(version.header)):
        return [("bad_signature", f"the signature by {block.signer_key_id} does not match the header")]
    return []


def required_problems(version: ChainVersion, policies: list[TrustPolicy]) -> Problems:
    """With signatures required (CHAIN_REQUIRE_SIGNED): a version above genesis that no policy made
    sign (the chain has none, or it predates ``signed_from``) is ``unsigned``. Genesis holds no payload;
    the first signed block's parent links pin it, and every version before it."""
    if version.counter == 0:
        return []
    if not policies:
        return [("unsigned", f"the chain has no trust policy; {_REQUIRED}")]
    if version.counter < policies[0].signed_from:
        return [
            (
                "unsigned",
                f"committed before the first trust policy (signed from {policies[0].signed_from}); {_REQUIRED}",
            )
        ]
    return []


def required_findings(walked: list[ChainVersion], policies: list[TrustPolicy]) -> list[tuple[str, str, int | None]]:
    """verify's ``unsigned`` finding when signatures are required: chain-wide when there is no policy,
    else at the first version committed before the first policy, saying how many such versions there are."""
    if not policies:
        return [("unsigned", f"the chain has no trust policy: no version is signed; {_REQUIRED}", None)]
    legacy = sorted(v.counter for v in walked if required_problems(v, policies))
    if not legacy:
        return []
    where = f"versions {legacy[0]} to {legacy[-1]} ({len(legacy)})" if len(legacy) > 1 else f"version {legacy[0]}"
    reason = f"{where} predate the first trust policy (signed from {policies[0].signed_from}); {_REQUIRED}"
    return [("unsigned", reason, legacy[0])]


def _trusted(public_key: str) -> TrustedKey:
    try:
        raw = base64.b64decode(public_key, validate=True)
    except binascii.Error as exc:
        raise ChainError(f"public key {public_key!r}: not base64") from exc
    if len(raw) != 32:
        raise ChainError(f"public key {public_key!r}: {len(raw)} bytes, expected 32 (raw ed25519)")
    return TrustedKey(key_id=key_id(raw), public_key=public_key)


def commit_policy(chain: ChainVersions, signer: SigningKey | None) -> int:
    """The policy version a new block names (0: the chain has no policy); refuses, before anything is
    written, a commit the chain's policy would not trust."""
    policies, problems = load_policies(chain)
    if problems:
        raise ChainCorruptionError(None, problems[0][1], check=problems[0][0])
    if not policies:
        return 0
    if signer is None:
        raise SigningRequiredError(
            f"chain {chain.name!r} requires signed commits (trust policy {len(policies)}): set ML8S_SIGNING_KEY "
            "or ML8S_SIGNING_KEY_FILE to a trusted ed25519 key"
        )
    if policies[-1].trusts(signer.key_id) is None:
        raise SigningRequiredError(f"key {signer.key_id} is not in trust policy {len(policies)} of {chain.name!r}")
    return len(policies)
