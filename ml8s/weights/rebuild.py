"""A version's weights: read a FULL, rebuild a DELTA hop by hop, each hop checked against its block.

A weights payload is a safetensors file of float32/bfloat16/float16 tensors. A FULL version stores it
whole (``model_native.safetensors``, the committed bytes); a DELTA version stores ``weights.delta``
(ml8s.deltas: the changed elements' positions and new values) computed on its *parent's* weights. Every
block of either kind records the full-weights hash of its version (``BlockHeader.weights_hash``), so any
rebuild, however many hops long, is proved equal to what the committer had, or refused with a named error.

``rebuild_weights`` walks from a version down to a version whose weights the caller already holds
(``known``: the fast path, one DELTA per hop) or else to the nearest FULL (the slow path), then applies
the DELTAs upwards. A walk that meets genesis, or a FULL without float weights, before an anchor raises
WeightsMissingError.
"""

from __future__ import annotations

import safetensors.torch
import torch
from pydantic import BaseModel, ConfigDict

from ml8s.chain import WEIGHTS_DELTA, WEIGHTS_FULL, ChainVersion, ChainVersions, PayloadKind
from ml8s.deltas import apply_delta_in_place, read_delta_header, weights_hash
from ml8s.errors import DeltaFormatError, WeightsMismatchError, WeightsMissingError

FLOAT_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


class VersionWeights(BaseModel):
    """A version's full weights, as CPU tensors by name, and their (verified) weights hash."""

    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True)

    version: ChainVersion
    tensors: dict[str, torch.Tensor]
    weights_hash: str

    def cloned(self) -> VersionWeights:
        """The same weights in fresh memory (a DELTA applied to the copy leaves these untouched)."""
        tensors = {name: tensor.clone(memory_format=torch.contiguous_format) for name, tensor in self.tensors.items()}
        return VersionWeights(version=self.version, tensors=tensors, weights_hash=self.weights_hash)


def weights_file(version: ChainVersion) -> str | None:
    """The payload file holding ``version``'s weights (whole or as a DELTA), None when it has none."""
    names = {f.name for f in version.header.files}
    if version.header.payload_kind is PayloadKind.DELTA:
        return WEIGHTS_DELTA
    return WEIGHTS_FULL if version.header.payload_kind is PayloadKind.FULL and WEIGHTS_FULL in names else None


def load_full(chain: ChainVersions, version: ChainVersion) -> VersionWeights:
    """A FULL version's weights, checked against the block's sha256 and (when recorded) its weights hash.

    A FULL committed before weights hashes were recorded (``weights_hash`` unset) is hashed here; its
    bytes are still proved by the block's sha256.

    Raises:
        WeightsMissingError: the version is no FULL weights payload (genesis, or other files only).
        DeltaDtypeError: it holds tensors other than float32/bfloat16/float16 (no weights hash exists).
        WeightsMismatchError: the tensors do not have the recorded weights hash.
        ChecksumError: the payload file differs from its block.
    """
    name = weights_file(version)
    if name != WEIGHTS_FULL:
        raise WeightsMissingError(
            f"chain {chain.name!r} version {version.counter} ({version.version_dir}) holds no FULL weights "
            f"({WEIGHTS_FULL}); expected an anchor to rebuild from"
        )
    where = chain.store.uri(chain.version_key(version.version_dir, "payload", name))
    tensors = load_tensors(chain.fetch_payload(version, name), where)
    actual = weights_hash(tensors)
    recorded = version.header.weights_hash
    if recorded and actual != recorded:
        raise WeightsMismatchError(f"{where}: the tensors hash to {actual}, the block records weights hash {recorded}")
    return VersionWeights(version=version, tensors=tensors, weights_hash=actual)


def apply_hop(
    chain: ChainVersions, current: VersionWeights, version: ChainVersion, *, refuse_nan: bool = False
) -> VersionWeights:
    """``version``'s weights from its parent's (``current``), by its DELTA, in place: all or nothing.
    ``refuse_nan``: a DELTA writing a NaN is refused (DeltaNanError) before any write.

    Raises:
        WeightsMismatchError: ``version`` is no DELTA on ``current``'s version, or its DELTA's hashes are
            not those the blocks record (``current`` is untouched).
        DeltaError: the DELTA payload is malformed or does not apply (``current`` is untouched).
        ChecksumError: the payload file differs from its block.
    """
    header = version.header
    base = current.version
    where = f"chain {chain.name!r} version {version.counter} ({version.version_dir})"
    if header.payload_kind is not PayloadKind.DELTA:
        raise WeightsMismatchError(f"{where} is a {header.payload_kind} version, not a DELTA")
    if (header.delta_base_counter, header.delta_base_block_hash) != (base.counter, base.block_hash) or (
        header.parent_block_hash != base.block_hash
    ):
        raise WeightsMismatchError(
            f"{where} is a DELTA on version {header.delta_base_counter} ({header.delta_base_block_hash or '-'}), "
            f"parent {header.parent_block_hash}; the weights held are version {base.counter} ({base.block_hash})"
        )
    delta = chain.fetch_payload(version, WEIGHTS_DELTA)
    recorded = read_delta_header(delta)
    if (recorded.base_hash, recorded.result_hash) != (current.weights_hash, header.weights_hash):
        raise WeightsMismatchError(
            f"{where}: its DELTA turns weights {recorded.base_hash} into {recorded.result_hash}; the blocks record "
            f"{current.weights_hash} (base) and {header.weights_hash or '-'} (this version)"
        )
    apply_delta_in_place(current.tensors, delta, base_hash=current.weights_hash, refuse_nan=refuse_nan)
    return VersionWeights(version=version, tensors=current.tensors, weights_hash=header.weights_hash)


def rebuild_weights(
    chain: ChainVersions, target: ChainVersion, *, known: VersionWeights | None = None
) -> VersionWeights:
    """``target``'s full weights, from ``known`` (left untouched) when it is an ancestor reached by DELTAs
    only, else from the nearest FULL below ``target``; every hop is checked (``apply_hop``).

    Raises:
        WeightsMissingError: no FULL weights below a DELTA (a missing anchor).
        WeightsMismatchError, DeltaError, ChecksumError: a hop does not verify.
    """
    hops: list[ChainVersion] = []
    for version in chain.walk(target):
        if known is not None and version.block_hash == known.version.block_hash:
            current = known.cloned()
            break
        if version.header.payload_kind is not PayloadKind.DELTA:
            current = load_full(chain, version)
            break
        hops.append(version)
    else:  # walk always ends at genesis, which is no DELTA: unreachable, but say so rather than assume
        raise WeightsMissingError(f"chain {chain.name!r}: no weights below version {target.counter}")
    for version in reversed(hops):
        current = apply_hop(chain, current, version)
    return current


def is_float_weights(tensors: dict[str, torch.Tensor]) -> bool:
    """Whether every tensor is a CPU tensor of a dtype weights hashes and DELTAs carry."""
    return all(t.dtype in FLOAT_DTYPES and t.device.type == "cpu" for t in tensors.values())


def load_tensors(data: bytes, where: str) -> dict[str, torch.Tensor]:
    """The tensors of safetensors bytes, by name (sorted).

    Raises:
        DeltaFormatError: not a safetensors file.
    """
    try:
        loaded = safetensors.torch.load(data)
    except Exception as exc:  # the Rust parser raises its own SafetensorError, or ValueError/KeyError
        raise DeltaFormatError(f"{where} is not valid safetensors: {exc}") from None
    return {name: loaded[name] for name in sorted(loaded)}
