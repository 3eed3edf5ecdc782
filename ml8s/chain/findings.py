"""What verify_chain reports: each violated rule as a ``Finding``, all of them in a ``VerifyReport``."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from ml8s.errors import ChainCorruptionError

_FROZEN = ConfigDict(extra="forbid", frozen=True)


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


def unchecked_limits(signed_from: int | None, known_head: str | None) -> tuple[str, ...]:
    """What a verification could not establish (docs/chain.md, "What verify detects"): ``signed_from`` is
    the first policy's (None: the chain has no trust policy), ``known_head`` a head seen before, if any."""
    missing = []
    if signed_from is None:
        missing.append(
            "authenticity: the chain has no trust policy, so its versions are not signed (anyone with write "
            "access to the store could have appended or rewritten them)"
        )
    elif signed_from > 0:
        missing.append(f"authenticity of versions below {signed_from}: committed before the first trust policy")
    if known_head is None:
        missing.append("rollback, freeze and a forged head: give --known-head or --anchor (a head seen before)")
    return tuple(missing)
