"""What verify_chain reports: each violated rule as a ``Finding``, all of them in a ``VerifyReport``."""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict

from ml8s.chain.models import ChainVersion
from ml8s.errors import ChainCorruptionError, ConfigError

_FROZEN = ConfigDict(extra="forbid", frozen=True)
_KNOWN_HEAD = re.compile(r"[0-9A-Fa-f]{12,64}")


class Finding(BaseModel):
    """One violated rule: its name, where (counter, version directory) and why."""

    model_config = _FROZEN

    check: str
    reason: str
    counter: int | None = None
    version_dir: str = ""


class VerifyReport(BaseModel):
    """What verify_chain found. ``chain``: the version directories from genesis to the head read;
    ``orphans``: complete versions off it; ``ahead``: versions committed on top of it while verifying;
    ``incomplete``: directories without block.pb (uploads in flight, or cut short); ``unchecked``: what
    could not be checked (no trust policy, no known head or anchor)."""

    model_config = _FROZEN

    chain_name: str
    head_counter: int | None
    chain: tuple[str, ...]
    findings: tuple[Finding, ...]
    orphans: tuple[str, ...]
    ahead: tuple[str, ...]
    incomplete: tuple[str, ...]
    unchecked: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.findings

    @property
    def checks(self) -> set[str]:
        return {f.check for f in self.findings}

    def raise_for_findings(self) -> None:
        """ChainCorruptionError naming the first finding (lowest counter) when the chain is not intact."""
        if self.findings:
            first = self.findings[0]
            more = f" (+{len(self.findings) - 1} more)" if len(self.findings) > 1 else ""
            raise ChainCorruptionError(first.counter, f"{first.reason}{more}", check=first.check)


# The check name a WeightsCheck gives what it could not check (a version's weights that cannot be read as
# tensors): verify_chain lists it under ``unchecked``, no finding, as it proves nothing wrong with the chain.
WEIGHTS_UNCHECKED = "weights_unchecked"


def unchecked_limits(signed_from: int | None, anchored: bool) -> tuple[str, ...]:
    """What a verification could not establish (docs/chain.md, "What verify detects"): ``signed_from`` is
    the first policy's (None: the chain has no trust policy); ``anchored``: a known head or anchor was given."""
    missing = []
    if signed_from is None:
        missing.append(
            "authenticity: the chain has no trust policy, so its versions are not signed (anyone with write "
            "access to the store could have appended or rewritten them)"
        )
    elif signed_from > 0:
        missing.append(f"authenticity of versions below {signed_from}: committed before the first trust policy")
    if not anchored:
        missing.append("rollback, freeze and a forged head: give --known-head or --anchor (a head seen before)")
    return tuple(missing)


def normalize_known_head(known_head: str | None) -> str | None:
    """A block hash or a prefix of it (>= 12 hex digits, any case) in lower case; ConfigError otherwise."""
    if known_head is None:
        return None
    if not _KNOWN_HEAD.fullmatch(known_head):
        raise ConfigError(f"known head {known_head!r}: expected 12 to 64 hex digits of a block hash")
    return known_head.lower()


def known_head_problems(
    known: str, parsed: list[ChainVersion], head: ChainVersion | None
) -> list[tuple[str, str, ChainVersion | None]]:
    """Why a known head (prefix, lower case) that is not on the chain walked from ``head`` is a finding:
    ambiguous, nowhere in the store, rolled back (above the head) or forked off."""
    matches = {v.block_hash: v for v in parsed if v.block_hash.startswith(known)}
    if len(matches) > 1:
        return [("known_head", f"known head prefix {known} matches {len(matches)} blocks: give more digits", None)]
    seen = next(iter(matches.values()), None)
    now = f"the head is {head.version_dir}" if head else "there is no head"
    if seen is None:
        return [("known_head", f"known head {known} is nowhere in the chain's store; {now}", None)]
    if head is not None and seen.counter > head.counter:
        return [("known_head", f"rolled back: known head {seen.version_dir} is off the chain; {now}", seen)]
    return [("known_head", f"forked: known head {seen.version_dir} is off the chain; {now}", seen)]
