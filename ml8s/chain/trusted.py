"""The one checked path every reader of a chain goes through: what it returns is exactly what it checked.

``ChainVersions.head()`` and ``fetch_payload`` prove integrity (every byte hashes to its block, the
block to the head pointer) but not authenticity: anyone who can write the store can append a block
that hashes fine. ``TrustedReader`` checks each version before anything of it is returned: signed by
a key of the policy in force at its position, policies chained to the pinned root, the chain's name
and root bound in its header (revocation.py names every check), and with ``require_signed``
(CHAIN_REQUIRE_SIGNED) a pinned root, a policy and no version before it. A refusal is an
``UntrustedVersionError`` whose ``check`` names the finding verify would report. The ``Follower``
(follower.py) adds rollback, fork, anchor, freshness and evidence rules on top, and every consumer
(``ml8s follow``, the inference client, ``predict --chain``, warm starts) reads through a Follower:
its ``current`` version, never a second read of the head.

``ReadTrust`` is what a reader is given: the pinned root and whether signatures are required, from
platform settings (``CHAIN_TRUST_ROOT``, ``CHAIN_REQUIRE_SIGNED``) so that every reader honours them alike.

Example::

    trust = ReadTrust.from_settings(PlatformSettings.load())
    reader = TrustedReader(ChainStore(store, "churn-model"), trust=trust)
    head = reader.head()
    weights = reader.fetch_payload(head, "model_native.safetensors")
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from ml8s.chain import _checks, revocation, trust
from ml8s.chain.models import ChainVersion
from ml8s.chain.root import TrustRoot, load_root
from ml8s.chain.trust import TrustPolicy
from ml8s.chain.versions import ChainVersions
from ml8s.errors import UntrustedVersionError
from ml8s.identity.settings import PlatformSettings


class ReadTrust(BaseModel):
    """How a reader checks authenticity: the pinned ``root`` (None: trust on first use) and ``require_signed``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    root: TrustRoot | None = None
    require_signed: bool = False

    @classmethod
    def from_settings(cls, settings: PlatformSettings, require_signed: bool | None = None) -> ReadTrust:
        """CHAIN_TRUST_ROOT and CHAIN_REQUIRE_SIGNED (``require_signed``, when given, overrides the latter)."""
        required = settings.chain_require_signed if require_signed is None else require_signed
        return cls(root=load_root(settings.chain_trust_root), require_signed=required)

    def notes(self, chain: ChainVersions) -> tuple[str, ...]:
        """What a reader without a pinned root says plainly of a chain with trust policies: they were taken on
        first use (it still reads; CHAIN_REQUIRE_SIGNED refuses)."""
        if self.root is not None or not trust.load_policies(chain)[0]:
            return ()
        return (revocation.TOFU,)


class TrustedReader:
    """Checked reads of ``chain`` (module docstring). Policies are create-only, so they are cached and read
    again only when a version names one this reader has not seen (a rotation since)."""

    def __init__(self, chain: ChainVersions, *, require_signed: bool = False, trust: ReadTrust | None = None) -> None:
        self.trust = trust or ReadTrust(require_signed=require_signed)
        self.chain = chain
        self._policies: list[TrustPolicy] | None = None
        self.policy_sha256 = ""  # of the newest cached policy's file (trust.load_policy_chain)
        self._checked: dict[str, ChainVersion] = {}  # block hash -> a version this reader checked

    @property
    def require_signed(self) -> bool:
        return self.trust.require_signed

    def policies(self, at_least: int = 0) -> list[TrustPolicy]:
        """The chain's valid trust policies; UntrustedVersionError (``trust_policy``...) when one is broken."""
        if self._policies is None or len(self._policies) < at_least:
            policies, problems, newest = trust.load_policy_chain(self.chain, self.trust.root)
            if problems:
                raise UntrustedVersionError(None, problems[0][1], check=problems[0][0])
            if self._policies:
                self._extends(self._policies, policies, newest)
            self._policies, self.policy_sha256 = policies, newest
        return self._policies

    def _extends(self, held: list[TrustPolicy], policies: list[TrustPolicy], newest: str) -> None:
        """A reload for a version naming a newer policy only adds policies to those held: a follower checked the
        held ones against what it saw (fresh_policies), and a ``trust/`` rewritten in between (without a root,
        a self-signed policy 1, then a policy 2 trusting a store writer's key) would otherwise be taken as is."""
        seen, name = len(held), self.chain.name
        if len(policies) < seen:
            raise UntrustedVersionError(
                None,
                f"chain {name!r}: trust policy {seen} was read before, the chain now has {len(policies)} valid: a "
                "deleted policy never undoes a rotation",
                check="trust_policy_missing",
            )
        found = newest if len(policies) == seen else policies[seen].previous_sha256
        if found != self.policy_sha256:
            raise UntrustedVersionError(
                None,
                f"chain {name!r}: trust policy {seen} (or one before it) is not the file read before: sha256 "
                f"{found}, expected {self.policy_sha256}; a policy replaced in the store, even by one that checks, "
                "is refused",
                check="trust_policy_replaced",
            )

    def fresh_policies(self) -> list[TrustPolicy]:
        """The policies read again (a follower's poll: a rotation since, or a policy deleted)."""
        self._policies = None
        return self.policies()

    def check(self, version: ChainVersion, parent: ChainVersion | None = None) -> ChainVersion:
        """``version`` itself when it is signed as required (``parent``: also that it names no older policy
        than its parent); UntrustedVersionError naming the check otherwise."""
        policies = self.policies(version.header.trust_policy_version)
        # Genesis needs no signature because it holds nothing: a head forged at counter 0 with files would
        # otherwise be served unsigned (predict --chain reads the head it checked).
        problems = _checks.genesis(version) if version.counter == 0 else []
        problems += revocation.block_problems(version, policies, self.chain.name, parent)
        if self.trust.require_signed:
            problems += revocation.required_problems(version, policies, self.trust.root)
        for check, reason in problems:
            raise UntrustedVersionError(
                version.counter, f"{self.chain.name!r} {version.version_dir}: {reason}", check=check
            )
        self._checked[version.block_hash] = version
        return version

    def check_down_to(self, head: ChainVersion, seen: int) -> list[ChainVersion]:
        """Check ``head`` and every version below it down to counter ``seen`` + 1, each against its parent;
        the versions checked, head first."""
        checked: list[ChainVersion] = []
        child: ChainVersion | None = None
        for version in self.chain.walk(head):
            if child is not None:
                checked.append(self.check(child, version))
            if version.counter <= seen:
                return checked
            child = version
        if child is not None:
            checked.append(self.check(child))  # genesis
        return checked

    def head(self) -> ChainVersion:
        """The head version, its block verified against the head pointer and its signature checked."""
        return self.check(self.chain.head())

    def fetch_payload(self, version: ChainVersion, name: str) -> bytes:
        """One payload file's bytes, sha256-checked against the block, of a version this reader checked."""
        checked = self._checked.get(version.block_hash)
        return self.chain.fetch_payload(checked if checked is not None else self.check(version), name)
