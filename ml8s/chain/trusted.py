"""TrustedReader: read a chain's head and payloads only once the version is signed as its trust policy says.

``ChainVersions.head()`` and ``fetch_payload`` prove integrity (every byte hashes to its block, the
block to the head pointer) but not authenticity: anyone who can write the store can append a block
that hashes fine. A reader serving a model checks, before it returns a byte, that the version is
signed by a key its trust policy lists (``untrusted_key``, ``bad_signature``, ``unsigned`` from the
policy's ``signed_from``, ``trust_policy_missing``), and with ``require_signed`` (CHAIN_REQUIRE_SIGNED)
also refuses a chain without a policy and the versions before its first (``unsigned``). A refusal is
an ``UntrustedVersionError`` whose ``check`` names the finding verify would report.

Example::

    reader = TrustedReader(ChainStore(store, "churn-model"), require_signed=True)
    head = reader.head()
    weights = reader.fetch_payload(head, "model_native.safetensors")
"""

from __future__ import annotations

from ml8s.chain import trust
from ml8s.chain.models import ChainVersion
from ml8s.chain.trust import TrustPolicy
from ml8s.chain.versions import ChainVersions
from ml8s.errors import UntrustedVersionError


class TrustedReader:
    """Verified reads of ``chain`` (module docstring). Policies are create-only, so they are cached and
    read again only when a version names one this reader has not seen (a rotation since)."""

    def __init__(self, chain: ChainVersions, *, require_signed: bool = False) -> None:
        self.chain, self.require_signed = chain, require_signed
        self._policies: list[TrustPolicy] | None = None

    def policies(self, at_least: int = 0) -> list[TrustPolicy]:
        """The chain's valid trust policies; UntrustedVersionError (``trust_policy``) when one is broken."""
        if self._policies is None or len(self._policies) < at_least:
            policies, problems = trust.load_policies(self.chain)
            if problems:
                raise UntrustedVersionError(None, problems[0][1], check=problems[0][0])
            self._policies = policies
        return self._policies

    def check(self, version: ChainVersion) -> ChainVersion:
        """``version`` itself when it is signed as required; UntrustedVersionError naming the check otherwise."""
        policies = self.policies(version.header.trust_policy_version)
        problems = trust.block_problems(version, policies)
        if self.require_signed:
            problems += trust.required_problems(version, policies)
        for check, reason in problems:
            raise UntrustedVersionError(
                version.counter, f"{self.chain.name!r} {version.version_dir}: {reason}", check=check
            )
        return version

    def head(self) -> ChainVersion:
        """The head version, its block verified against the head pointer and its signature checked."""
        return self.check(self.chain.head())

    def fetch_payload(self, version: ChainVersion, name: str) -> bytes:
        """One payload file's bytes, sha256-checked against the block, of a version whose signature checks."""
        return self.chain.fetch_payload(self.check(version), name)
