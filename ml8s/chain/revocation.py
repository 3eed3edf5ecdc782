"""Whether one block is signed as the chain's trust policies require at its position.

Rules, each a named check (verify reports it; every reader refuses with it):

``unsigned`` / ``untrusted_key`` / ``bad_signature``  the block is not signed by a key of the policy it names
``trust_policy_missing``  it names a policy the chain does not (validly) have: a deleted policy file is a
                  finding, never a rollback of the rotation
``retired_policy``  it names an older policy than the one in force at its counter (the newest schema-2
                  policy whose ``from_counter`` it has reached), or than its parent names: a key a
                  rotation dropped signs nothing after it
``chain_name`` / ``trust_root``  a block under a schema-2 policy binds the chain's name and the root's id
                  in its signed header: a block (or a whole chain) signed for another chain is refused
``trust_root_missing``  with signatures required (CHAIN_REQUIRE_SIGNED) and no pinned root (CHAIN_TRUST_ROOT):
                  the policies were taken on first use, which proves nothing against a store writer
"""

from __future__ import annotations

from ml8s.chain.models import ChainVersion
from ml8s.chain.root import TrustRoot
from ml8s.chain.signing import SigningKey, signature_valid
from ml8s.chain.trust import TrustPolicy, load_policies
from ml8s.chain.versions import ChainVersions
from ml8s.chain.wire import header_bytes
from ml8s.errors import ChainCorruptionError, SigningRequiredError

Problems = list[tuple[str, str]]
REQUIRED = "signatures are required (CHAIN_REQUIRE_SIGNED; --allow-unsigned to accept a legacy chain)"
TOFU = (
    "no trust root is pinned (CHAIN_TRUST_ROOT): the chain's trust policies were taken on first use from the "
    "store, which whoever can write the store could have written"
)


def in_force(policies: list[TrustPolicy], counter: int) -> int:
    """The version of the newest schema-2 policy in force at ``counter`` (0: none)."""
    return max((p.version for p in policies if p.schema_version == 2 and p.from_counter <= counter), default=0)


def block_problems(
    version: ChainVersion, policies: list[TrustPolicy], chain_name: str, parent: ChainVersion | None = None
) -> Problems:
    """What is wrong with a version's signature and bindings under the chain's policies (module docstring);
    the signature's problems first (a reader raises the first)."""
    header, wanted = version.header, version.header.trust_policy_version
    bound: Problems = []
    if header.chain_name and header.chain_name != chain_name:
        bound.append(("chain_name", f"the block is bound to chain {header.chain_name!r}, not {chain_name!r}"))
    if parent is not None and wanted < (named := parent.header.trust_policy_version):
        bound.append(("retired_policy", f"names trust policy {wanted}, its parent already names {named}"))
    if wanted > len(policies):
        return [("trust_policy_missing", f"names trust policy {wanted}, the chain has {len(policies)}"), *bound]
    if (force := in_force(policies, version.counter)) > wanted:
        reason = f"names trust policy {wanted}, but policy {force} is in force from {policies[force - 1].from_counter}"
        bound.append(("retired_policy", reason))
    if wanted == 0 and (not policies or version.counter < policies[0].signed_from):
        return bound  # a legacy chain, or a version from before the first policy: nothing to check against
    policy = policies[wanted - 1] if wanted else None
    if policy is not None and policy.schema_version == 2:
        if header.chain_name != chain_name:
            bound.append(("chain_name", f"policy {wanted} requires the header to bind chain {chain_name!r}"))
        if header.trust_root_id != policy.root_id:
            root = policy.root_id or "<none>"
            bound.append(
                ("trust_root", f"bound to root {header.trust_root_id or '<none>'}, policy {wanted}'s is {root}")
            )
    return _signature(version, policy, policies[0].signed_from) + bound


def _signature(version: ChainVersion, policy: TrustPolicy | None, signed_from: int) -> Problems:
    block = version.block
    if not block.signature:
        return [("unsigned", f"unsigned, but signatures are required from {signed_from}")]
    if policy is None:
        return [("untrusted_key", "signed, but names no trust policy")]
    key = policy.trusts(block.signer_key_id)
    if key is None:
        return [("untrusted_key", f"signed by key {block.signer_key_id}, not in trust policy {policy.version}")]
    if not signature_valid(key.public_key, block.signature, header_bytes(version.header)):
        return [("bad_signature", f"the signature by {block.signer_key_id} does not match the header")]
    return []


def required_problems(version: ChainVersion, policies: list[TrustPolicy], root: TrustRoot | None) -> Problems:
    """With signatures required (CHAIN_REQUIRE_SIGNED): a version above genesis that no policy made sign (the
    chain has none, or it predates ``signed_from``) is ``unsigned``; without a pinned root every one is
    ``trust_root_missing``. Genesis holds no payload; the first signed block's parent links pin it."""
    if version.counter == 0:
        return []
    if root is None:
        return [("trust_root_missing", f"{TOFU}; {REQUIRED}")]
    if not policies:
        return [("unsigned", f"the chain has no trust policy; {REQUIRED}")]
    if version.counter < policies[0].signed_from:
        return [
            ("unsigned", f"committed before the first trust policy (signed from {policies[0].signed_from}); {REQUIRED}")
        ]
    return []


def required_findings(
    walked: list[ChainVersion], policies: list[TrustPolicy], root: TrustRoot | None
) -> list[tuple[str, str, int | None]]:
    """verify's chain-wide finding when signatures are required: no root, no policy, or how many versions
    predate the first policy (at the first of them)."""
    if root is None:
        return [("trust_root_missing", f"{TOFU}; {REQUIRED}", None)]
    if not policies:
        return [("unsigned", f"the chain has no trust policy: no version is signed; {REQUIRED}", None)]
    legacy = sorted(v.counter for v in walked if required_problems(v, policies, root))
    if not legacy:
        return []
    where = f"versions {legacy[0]} to {legacy[-1]} ({len(legacy)})" if len(legacy) > 1 else f"version {legacy[0]}"
    reason = f"{where} predate the first trust policy (signed from {policies[0].signed_from}); {REQUIRED}"
    return [("unsigned", reason, legacy[0])]


def commit_policy(chain: ChainVersions, signer: SigningKey | None, root: TrustRoot | None) -> TrustPolicy | None:
    """The policy a new block names (None: the chain has none); refuses, before anything is written, a
    commit the chain's policy would not trust."""
    policies, problems = load_policies(chain, root)
    if problems:
        raise ChainCorruptionError(None, problems[0][1], check=problems[0][0])
    if not policies:
        return None
    if signer is None:
        raise SigningRequiredError(
            f"chain {chain.name!r} requires signed commits (trust policy {len(policies)}): set ML8S_SIGNING_KEY "
            "or ML8S_SIGNING_KEY_FILE to a trusted ed25519 key"
        )
    if policies[-1].trusts(signer.key_id) is None:
        raise SigningRequiredError(f"key {signer.key_id} is not in trust policy {len(policies)} of {chain.name!r}")
    return policies[-1]


def superseded(chain: ChainVersions, named: int, counter: int, root: TrustRoot | None) -> int:
    """A policy newer than ``named`` that is in force at ``counter`` (0: none): a commit sealed under
    ``named`` that raced a rotation, refused before its head swap."""
    policies, _ = load_policies(chain, root)
    force = in_force(policies, counter)
    return force if force > named else 0
