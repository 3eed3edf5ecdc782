"""verify_chain's weights rules: every version's weights rebuilt from genesis up and checked by hash.

``weights_hash``  a FULL's tensors, or a DELTA applied to its parent's rebuilt weights, do not give the
                  weights hash the block records (or the payload does not parse, or cannot be rebuilt)
``delta_base``    a DELTA names a base other than its parent, or its FULL counter is not its parent's
``weights_nan``   a version's rebuilt weights hold a NaN (committed by an older ml8s, or by hand: a commit refuses
                  one, a follower will not serve it); infinities pass (a mask buffer holds -inf by design). A FULL
                  an older ml8s recorded without a weights hash has nothing to be checked against, but its tensors
                  are still read for a NaN; where they cannot be (no safetensors), WEIGHTS_UNCHECKED says so

Memory: one set of weights at a time (each DELTA is applied in place to the set rebuilt for its parent),
plus the payload bytes being read; a FULL is read into memory whole.
"""

from __future__ import annotations

import torch

from ml8s.chain import WEIGHTS_UNCHECKED, ChainVersion, ChainVersions, PayloadKind
from ml8s.errors import ChainError, DeltaError
from ml8s.weights.nan import first_nan
from ml8s.weights.rebuild import VersionWeights, apply_hop, load_full, load_tensors, weights_file

Problem = tuple[str, str, ChainVersion]


def weights_problems(chain: ChainVersions, walked: list[ChainVersion]) -> list[Problem]:
    """The weights findings of the chain ``walked`` (head first, as verify walks it)."""
    found: list[Problem] = []
    current: VersionWeights | None = None
    parent: ChainVersion | None = None
    for version in reversed(walked):
        header = version.header
        unhashed: dict[str, torch.Tensor] | None = None
        if header.payload_kind is PayloadKind.DELTA:
            current = _delta(chain, version, parent, current, found)
        elif (name := weights_file(version)) is not None and header.weights_hash:
            if header.weights_full_counter != version.counter:
                found.append(("delta_base", f"a FULL records FULL counter {header.weights_full_counter}", version))
            current = _full(chain, version, found)
        else:
            current = None  # no recorded weights hash: nothing to check them against, no DELTA may follow
            # but an older ml8s's FULL holds weights all the same, which a NaN makes as unservable
            unhashed = _unhashed(chain, version, name, found) if name is not None else None
        # the weights just rebuilt, so nothing is read again; each version holding one is reported, as each is
        # one a follower refuses
        tensors = current.tensors if current is not None else unhashed
        nan = first_nan(tensors) if tensors is not None else None
        if nan is not None:
            found.append(("weights_nan", _nan_reason(*nan), version))
        parent = version
    return found


def _nan_reason(tensor: str, element: int) -> str:
    return (
        f"tensor {tensor!r} holds NaN (element {element}) in the rebuilt weights; expected no NaN weight (a model "
        "with one predicts NaN; a follower refuses to serve it)"
    )


def _unhashed(
    chain: ChainVersions, version: ChainVersion, name: str, found: list[Problem]
) -> dict[str, torch.Tensor] | None:
    """The tensors of a FULL recorded without a weights hash, its bytes proved by the block's sha256; None, and
    a WEIGHTS_UNCHECKED line, when they cannot be read (a payload that differs from its block is a finding of the
    file checks already)."""
    where = chain.store.uri(chain.version_key(version.version_dir, "payload", name))
    try:
        return load_tensors(chain.fetch_payload(version, name), where)
    except (DeltaError, ChainError) as exc:
        found.append((WEIGHTS_UNCHECKED, f"weights_nan not checked: {exc.message}", version))
        return None


def _full(chain: ChainVersions, version: ChainVersion, found: list[Problem]) -> VersionWeights | None:
    try:
        return load_full(chain, version)
    except (DeltaError, ChainError) as exc:
        found.append(("weights_hash", exc.message, version))
        return None


def _delta(
    chain: ChainVersions,
    version: ChainVersion,
    parent: ChainVersion | None,
    current: VersionWeights | None,
    found: list[Problem],
) -> VersionWeights | None:
    header = version.header
    if parent is None or (header.delta_base_counter, header.delta_base_block_hash) != (
        parent.counter,
        parent.block_hash,
    ):
        found.append(("delta_base", f"a DELTA on version {header.delta_base_counter}, not on its parent", version))
        return None
    if header.weights_full_counter != parent.header.weights_full_counter:
        found.append(
            (
                "delta_base",
                f"records FULL counter {header.weights_full_counter}, its parent {parent.header.weights_full_counter}",
                version,
            )
        )
    if current is None:
        found.append(("weights_hash", "its parent's weights could not be rebuilt, so neither can its own", version))
        return None
    try:
        return apply_hop(chain, current, version)
    except (DeltaError, ChainError) as exc:
        found.append(("weights_hash", exc.message, version))
        return None
