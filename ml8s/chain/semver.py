"""Semantic version of a new block, from its parent's: deterministic, so verify can recompute it.

major when the architecture string changes, minor when the parameter count changes, patch otherwise;
genesis is 0.0.0 and the first model after it 1.0.0.
"""

from __future__ import annotations

from ml8s.chain.models import BlockHeader, PayloadKind

GENESIS_SEMVER = "0.0.0"
FIRST_SEMVER = "1.0.0"


def bump(parent: BlockHeader, architecture: str, parameter_count: int) -> str:
    """The semver of a block with ``architecture``/``parameter_count`` whose parent is ``parent``.

    Example: ``bump(parent_1_4_2, parent.architecture, parent.parameter_count) == "1.4.3"``.
    """
    if parent.payload_kind is PayloadKind.GENESIS:
        return FIRST_SEMVER
    major, minor, patch = (int(part) for part in parent.semver.split("."))
    if architecture != parent.architecture:
        return f"{major + 1}.0.0"
    if parameter_count != parent.parameter_count:
        return f"{major}.{minor + 1}.0"
    return f"{major}.{minor}.{patch + 1}"
