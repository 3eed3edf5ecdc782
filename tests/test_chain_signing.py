"""Signed versions and the trust policy (issue 12): who may commit, rotation, and the tamper matrix."""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path

import pytest
from test_chain_support import CHAIN, meta, payload

from ml8s.chain import ChainStore, ChainVersion, Follower, make_root, paths, verify_chain
from ml8s.chain.commit import _seal, payload_files
from ml8s.chain.signing import SigningKey
from ml8s.chain.trust import (
    SignedPolicy,
    TrustedKey,
    TrustPolicy,
    adopt_policy,
    policy_bytes,
    policy_file,
    policy_key,
)
from ml8s.chain.wire import encode_block
from ml8s.errors import ChainCorruptionError, ChainError, ConfigError, SigningRequiredError
from ml8s.store import LocalStore

KEY_A, KEY_B, KEY_C = SigningKey.generate(), SigningKey.generate(), SigningKey.generate()
ROOT_KEY = SigningKey.generate()  # held offline by the operator: it signs policy 1 and re-issues
ROOT = make_root([ROOT_KEY.public_key], 1)


@pytest.fixture(name="signed")
def signed_fixture(tmp_path: Path) -> ChainStore:
    """A chain with genesis and one legacy (unsigned) version, then policy 1 trusting key A, then v2 by A."""
    chain = ChainStore(LocalStore(str(tmp_path)), CHAIN, signer=KEY_A)
    chain.init()
    chain.commit(payload("legacy"), meta("legacy"))
    adopt_policy(chain, KEY_A, [KEY_A.public_key])
    chain.commit(payload("p2"), meta("p2"))
    return chain


def intruder(chain: ChainStore, name: str, *, signer: SigningKey | None, policy: int) -> ChainVersion:
    """Someone with write access to the store appends a version directly, past every commit-time check."""
    head = chain.head()
    version = _seal(head, meta(name), payload_files(payload(name)), policy, signer)
    chain.write_version(version, payload(name), [])
    chain.swap_head(version, chain.store.get_versioned(chain.key(paths.HEAD)).token)
    return version


def test_legacy_chain_verifies_but_says_what_it_could_not_check(tmp_path: Path) -> None:
    chain = ChainStore(LocalStore(str(tmp_path)), CHAIN)
    chain.init()
    chain.commit(payload("p"), meta("p"))
    report = verify_chain(chain)
    assert report.ok and any("no trust policy" in line for line in report.unchecked)


def test_signed_commit(signed: ChainStore) -> None:
    head = signed.head()
    assert head.block.signer_key_id == KEY_A.key_id and head.header.trust_policy_version == 1
    report = verify_chain(ChainStore(signed.store, CHAIN))
    assert report.ok, report.findings
    assert not any("no trust policy" in line for line in report.unchecked)
    assert Follower(ChainStore(signed.store, CHAIN)).poll() == head


def test_commit_needs_a_trusted_key(signed: ChainStore) -> None:
    runs = {i.key for i in signed.store.list(signed.key(paths.RUNS))}
    with pytest.raises(SigningRequiredError, match="requires signed commits"):
        ChainStore(signed.store, CHAIN).commit(payload("p3"), meta("p3"))
    with pytest.raises(SigningRequiredError, match="not in trust policy"):
        ChainStore(signed.store, CHAIN, signer=KEY_B).commit(payload("p3"), meta("p3"))
    assert {i.key for i in signed.store.list(signed.key(paths.RUNS))} == runs  # no claim for a refused commit


@pytest.mark.parametrize(
    ("signer", "policy", "check"),
    [
        (None, 0, "unsigned"),
        (KEY_B, 1, "untrusted_key"),
        (KEY_A, 0, "untrusted_key"),
        (KEY_A, 7, "trust_policy_missing"),
    ],
    ids=["unsigned", "outside-the-policy", "no-policy-named", "policy-that-is-not-there"],
)
def test_intruder_versions_are_named_and_refused(
    signed: ChainStore, signer: SigningKey | None, policy: int, check: str
) -> None:
    follower = Follower(ChainStore(signed.store, CHAIN))
    follower.poll()
    forged = intruder(signed, "evil", signer=signer, policy=policy)
    report = verify_chain(ChainStore(signed.store, CHAIN))
    assert check in report.checks and report.findings[0].counter == forged.counter, report.findings
    with pytest.raises(ChainCorruptionError) as caught:
        follower.poll()
    assert caught.value.check == check


def test_signature_that_does_not_match_its_header(signed: ChainStore) -> None:
    head = signed.head()
    forged = intruder(signed, "evil", signer=KEY_A, policy=1)
    block = forged.block.model_copy(update={"signature": head.block.signature})  # a valid signature, of another header
    signed.store.delete(signed.version_key(forged.version_dir, paths.BLOCK))
    signed.store.put_if_absent(signed.version_key(forged.version_dir, paths.BLOCK), encode_block(block))
    assert "bad_signature" in verify_chain(ChainStore(signed.store, CHAIN)).checks


def test_rotation(signed: ChainStore) -> None:
    """Policy 2 (signed by A, still trusted) trusts only B: A can no longer commit, its old blocks still verify."""
    adopt_policy(signed, [KEY_A, KEY_B], [KEY_B.public_key])  # the old policy's key and the new one's sign
    with pytest.raises(SigningRequiredError):
        ChainStore(signed.store, CHAIN, signer=KEY_A).commit(payload("p3"), meta("p3"))
    v3 = ChainStore(signed.store, CHAIN, signer=KEY_B).commit(payload("p3"), meta("p3"))
    assert v3.header.trust_policy_version == 2
    assert verify_chain(ChainStore(signed.store, CHAIN)).ok
    with pytest.raises(ChainError, match="not signed by 1 key"):
        adopt_policy(signed, KEY_A, [KEY_A.public_key])  # A was rotated out: it cannot take the chain back


def test_policy_signed_by_an_untrusted_key(signed: ChainStore) -> None:
    """An intruder writes policy 2 trusting its own key C, signed by C: the policy is refused, and so are C's blocks."""
    first = signed.store.get(policy_key(signed, 1))
    policy = TrustPolicy(
        chain_name=CHAIN,
        version=2,
        keys=(TrustedKey(key_id=KEY_C.key_id, public_key=KEY_C.public_key),),
        signed_from=SignedPolicy.model_validate_json(first).policy.signed_from,
        previous_sha256=hashlib.sha256(first).hexdigest(),
    )
    bogus = SignedPolicy(policy=policy, signer_key_id=KEY_C.key_id, signature=KEY_C.sign(policy_bytes(policy)))
    signed.store.put_if_absent(policy_key(signed, 2), bogus.model_dump_json().encode())
    intruder(signed, "evil", signer=KEY_C, policy=2)
    checks = verify_chain(ChainStore(signed.store, CHAIN)).checks
    assert {"trust_policy", "trust_policy_missing"} <= checks


def test_one_key_of_a_threshold_cannot_downgrade_to_a_schema_1_policy(tmp_path: Path) -> None:
    """Policy 1 needs A and B; A alone writes a schema-1 policy 2 (one signer, no threshold) trusting C, and C
    commits: the downgrade is refused, so one leaked key of a threshold rotates nobody out (no root pinned)."""
    chain = ChainStore(LocalStore(str(tmp_path)), CHAIN, signer=KEY_A)
    chain.init()
    adopt_policy(chain, [KEY_A, KEY_B], [KEY_A.public_key, KEY_B.public_key], threshold=2)
    first = chain.store.get(policy_key(chain, 1))
    policy = TrustPolicy(
        chain_name=CHAIN,
        version=2,
        keys=(TrustedKey(key_id=KEY_C.key_id, public_key=KEY_C.public_key),),
        signed_from=1,
        previous_sha256=hashlib.sha256(first).hexdigest(),
    )
    legacy = SignedPolicy(policy=policy, signer_key_id=KEY_A.key_id, signature=KEY_A.sign(policy_bytes(policy)))
    chain.store.put_if_absent(policy_key(chain, 2), policy_file(legacy))
    intruder(chain, "evil", signer=KEY_C, policy=2)
    assert {"trust_policy", "trust_policy_missing"} <= verify_chain(ChainStore(chain.store, CHAIN)).checks
    with pytest.raises(ChainCorruptionError, match="cannot follow schema-2 policy 1") as refused:
        Follower(ChainStore(chain.store, CHAIN)).poll()
    assert refused.value.check == "trust_policy"


def test_deleting_the_trust_policy_is_a_finding(signed: ChainStore) -> None:
    signed.store.delete(policy_key(signed, 1))
    assert "trust_policy_missing" in verify_chain(ChainStore(signed.store, CHAIN)).checks


def test_keys_from_env_and_file(tmp_path: Path) -> None:
    pem = KEY_A.private_pem()
    from_env = SigningKey.from_env({"ML8S_SIGNING_KEY": pem.decode()})
    assert from_env is not None and from_env.key_id == KEY_A.key_id
    (tmp_path / "key.pem").write_bytes(pem)
    loaded = SigningKey.from_env({"ML8S_SIGNING_KEY_FILE": str(tmp_path / "key.pem")})
    assert loaded is not None and loaded.key_id == KEY_A.key_id
    seed = base64.b64encode(b"\x01" * 32).decode()
    assert SigningKey.from_env({"ML8S_SIGNING_KEY": seed}) is not None
    assert SigningKey.from_env({}) is None
    for bad in ({"ML8S_SIGNING_KEY": "nope"}, {"ML8S_SIGNING_KEY": base64.b64encode(b"x" * 31).decode()}):
        with pytest.raises(ConfigError):
            SigningKey.from_env(bad)
    with pytest.raises(ConfigError, match="readable"):
        SigningKey.from_env({"ML8S_SIGNING_KEY_FILE": str(tmp_path / "missing.pem")})


def test_a_key_variable_that_is_not_utf8_is_named_without_its_value() -> None:
    """Bytes that are not UTF-8 reach Python as lone surrogates: encoding them was an INTERNAL_ERROR
    (UnicodeEncodeError) of every chain command and run that reads the key."""
    with pytest.raises(ConfigError, match=r"^CONFIG_ERROR: ML8S_SIGNING_KEY: not an ed25519 private key") as caught:
        SigningKey.from_env({"ML8S_SIGNING_KEY": "secret\udcff"})
    assert "secret" not in str(caught.value)
