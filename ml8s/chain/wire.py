"""Pydantic <-> protobuf for chain blocks, with every hash checked on the way in.

The block hash is sha256 over ``BlockHeader.SerializeToString(deterministic=True)``: proto3 scalars,
strings and repeated messages (no maps) in field-number order, a canonical encoding. It is recomputed
from the *parsed* message, so fields this version does not know (a newer writer's) are covered too.
"""

from __future__ import annotations

from google.protobuf.message import DecodeError
from pydantic import ValidationError

from ml8s.chain._util import content_hash, sha256_hex
from ml8s.chain.models import Block, BlockHeader, ChainHead, PayloadFile, PayloadKind
from ml8s.chain.signing import SigningKey
from ml8s.errors import ChainCorruptionError, ChecksumError
from ml8s.identity.hashing import canonical_bytes
from ml8s.proto_gen.ml8s.chain.v1 import chain_pb2 as pb
from ml8s.text import first_problem

_KINDS: dict[PayloadKind, pb.PayloadKind.ValueType] = {
    PayloadKind.GENESIS: pb.PAYLOAD_KIND_GENESIS,
    PayloadKind.FULL: pb.PAYLOAD_KIND_FULL,
    PayloadKind.DELTA: pb.PAYLOAD_KIND_DELTA,
}
_KIND_NAMES = {number: kind for kind, number in _KINDS.items()}


def header_to_proto(header: BlockHeader) -> pb.BlockHeader:
    return pb.BlockHeader(
        counter=header.counter,
        parent_block_hash=header.parent_block_hash,
        parent_semver=header.parent_semver,
        content_hash=header.content_hash,
        semver=header.semver,
        run_id=header.run_id,
        full_config_hash=header.full_config_hash,
        artifact_root=header.artifact_root,
        payload_kind=_KINDS[header.payload_kind],
        created_at=header.created_at,
        creator=header.creator,
        tensorboard_logdir=header.tensorboard_logdir,
        global_step=header.global_step,
        architecture=header.architecture,
        parameter_count=header.parameter_count,
        files=[pb.PayloadFile(name=f.name, sha256=f.sha256, size=f.size) for f in header.files],
        trust_policy_version=header.trust_policy_version,
        run_claim_sha256=header.run_claim_sha256,
        weights_hash=header.weights_hash,
        weights_full_counter=header.weights_full_counter,
        delta_base_counter=header.delta_base_counter,
        delta_base_block_hash=header.delta_base_block_hash,
        chain_name=header.chain_name,
        trust_root_id=header.trust_root_id,
    )


def header_from_proto(message: pb.BlockHeader) -> BlockHeader:
    """The validated header; raises pydantic's ValidationError or KeyError (unknown payload kind)."""
    return BlockHeader(
        counter=message.counter,
        parent_block_hash=message.parent_block_hash,
        parent_semver=message.parent_semver,
        content_hash=message.content_hash,
        semver=message.semver,
        run_id=message.run_id,
        full_config_hash=message.full_config_hash,
        artifact_root=message.artifact_root,
        payload_kind=_KIND_NAMES[message.payload_kind],
        created_at=message.created_at,
        creator=message.creator,
        tensorboard_logdir=message.tensorboard_logdir,
        global_step=message.global_step,
        architecture=message.architecture,
        parameter_count=message.parameter_count,
        files=tuple(PayloadFile(name=f.name, sha256=f.sha256, size=f.size) for f in message.files),
        trust_policy_version=message.trust_policy_version,
        run_claim_sha256=message.run_claim_sha256,
        weights_hash=message.weights_hash,
        weights_full_counter=message.weights_full_counter,
        delta_base_counter=message.delta_base_counter,
        delta_base_block_hash=message.delta_base_block_hash,
        chain_name=message.chain_name,
        trust_root_id=message.trust_root_id,
    )


def header_hash(message: pb.BlockHeader) -> str:
    return sha256_hex(message.SerializeToString(deterministic=True))


def header_bytes(header: BlockHeader) -> bytes:
    """The bytes a block hash and a block signature cover: the header's deterministic serialization."""
    return header_to_proto(header).SerializeToString(deterministic=True)


def block_hash_of(header: BlockHeader) -> str:
    """The block hash that seals ``header``: it covers every header field (module docstring)."""
    return header_hash(header_to_proto(header))


def make_block(header: BlockHeader, signer: SigningKey | None = None) -> Block:
    """Seal a header into a block, signed over the same header bytes when a ``signer`` is given."""
    data = header_bytes(header)
    if signer is None:
        return Block(header=header, block_hash=sha256_hex(data))
    return Block(header=header, block_hash=sha256_hex(data), signature=signer.sign(data), signer_key_id=signer.key_id)


def encode_block(block: Block) -> bytes:
    """``block.pb``: the Block message, deterministic bytes."""
    message = pb.Block(
        header=header_to_proto(block.header),
        block_hash=block.block_hash,
        signature=bytes.fromhex(block.signature),
        signer_key_id=block.signer_key_id,
    )
    return message.SerializeToString(deterministic=True)


def decode_block(data: bytes, *, where: str, verify: bool = True) -> Block:
    """Parse ``block.pb`` and (``verify``) recompute its block hash and content hash.

    Raises ChainCorruptionError(check="invalid_block") for bytes that are no valid block, and
    ChecksumError(check="header_hash" | "content_hash") for a hash that does not match.
    ``verify=False`` still validates the shape: verify.py uses it to name the version it reports.
    """
    message = pb.Block()
    try:
        message.ParseFromString(data)
        block = Block(
            header=header_from_proto(message.header),
            block_hash=message.block_hash,
            signature=message.signature.hex(),
            signer_key_id=message.signer_key_id,
        )
    except (DecodeError, ValidationError, KeyError) as exc:
        # a validation error by its first problem: pydantic's text runs over lines and echoes the block's values
        why = first_problem(exc) if isinstance(exc, ValidationError) else str(exc)
        raise ChainCorruptionError(None, f"{where} is not a valid block: {why}", check="invalid_block") from exc
    if not verify:
        return block
    if (computed := header_hash(message.header)) != block.block_hash:
        raise ChecksumError(
            f"{where}: header hashes to {computed}, the block records {block.block_hash}", check="header_hash"
        )
    files = ((f.name, f.sha256, f.size) for f in block.header.files)
    if (content := content_hash(files)) != block.header.content_hash:
        raise ChecksumError(
            f"{where}: the file list hashes to {content}, the header records {block.header.content_hash}",
            check="content_hash",
        )
    return block


def metadata_json(block: Block) -> bytes:
    """``metadata.json``: a human-readable rendering of block.pb (derived, checked against it by verify)."""
    rendered = block.model_dump(mode="json")
    # Fields added later are left out while unset, so blocks written before them render as they did.
    for key in ("signature", "signer_key_id"):
        if not rendered[key]:
            del rendered[key]
    for key in _LATER_HEADER_FIELDS:
        if not rendered["header"][key]:
            del rendered["header"][key]
    return canonical_bytes(rendered)


_LATER_HEADER_FIELDS = (
    "trust_policy_version",
    "run_claim_sha256",
    "weights_hash",
    "weights_full_counter",
    "delta_base_counter",
    "delta_base_block_hash",
    "chain_name",
    "trust_root_id",
)


def content_hash_txt(block: Block) -> bytes:
    return f"{block.header.content_hash}\n".encode("ascii")


def head_to_proto(head: ChainHead) -> pb.ChainHead:
    return pb.ChainHead(
        chain_name=head.chain_name, counter=head.counter, block_hash=head.block_hash, version_dir=head.version_dir
    )


def head_from_proto(message: pb.ChainHead) -> ChainHead:
    return ChainHead(
        chain_name=message.chain_name,
        counter=message.counter,
        block_hash=message.block_hash,
        version_dir=message.version_dir,
    )


def head_json(head: ChainHead) -> bytes:
    """``chain.json``: canonical JSON of the head."""
    return canonical_bytes(head.model_dump(mode="json"))
