"""The chain's data, validated at every boundary (pydantic; the wire format is protobuf, see wire.py).

Models check shape (hex digests, semver, sorted unique file names); the *consistency* of hashes is
checked where bytes come in (wire.decode_block) and along the chain (verify.py), so that a tampered
block can still be read, and named, rather than failing as a mere validation error.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

from ml8s.chain import paths
from ml8s.identity.settings import worker_id

Hex64 = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]
OptionalHex64 = Annotated[str, StringConstraints(pattern=r"^([0-9a-f]{64})?$")]
SemVer = Annotated[str, StringConstraints(pattern=paths.SEMVER.pattern)]
Rfc3339 = Annotated[
    str, StringConstraints(pattern=r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{6}Z$")
]
PayloadName = Annotated[str, StringConstraints(pattern=paths.PAYLOAD_NAME.pattern, max_length=512)]
_FROZEN = ConfigDict(extra="forbid", frozen=True)


class PayloadKind(enum.StrEnum):
    """What a version holds: FULL (every file whole) or DELTA (its weights as a sparse delta on the parent's)."""

    GENESIS = "genesis"
    FULL = "full"
    DELTA = "delta"


class PayloadFile(BaseModel):
    model_config = _FROZEN

    name: PayloadName
    sha256: Hex64
    size: int = Field(ge=0)


class LocalFile(BaseModel):
    """A payload file committed from local disk, streamed (never read into memory whole): its path and
    the sha256 and size measured once (``local_file``); the upload is checked against them."""

    model_config = _FROZEN

    path: str
    sha256: Hex64
    size: int = Field(ge=0)
    # ``path`` is a private copy staged in the chain's own store, hashed from the buffers written and
    # fsynced (``LocalStore.stage``): the store may link it into place instead of copying it again
    staged: bool = False


# A payload file's bytes, or a local file to stream.
PayloadSource = bytes | LocalFile

MAX_U63 = 2**63 - 1  # uint64 on the wire, but kept within a signed 64-bit int for every reader


class BlockHeader(BaseModel):
    """Everything a block hash covers. Field meanings: proto/ml8s/chain/v1/chain.proto."""

    model_config = _FROZEN

    counter: int = Field(ge=0)
    parent_block_hash: OptionalHex64
    parent_semver: Annotated[str, StringConstraints(pattern=f"^({paths.SEMVER.pattern[1:-1]})?$")]
    content_hash: Hex64
    semver: SemVer
    run_id: Annotated[str, StringConstraints(pattern=r"^([0-9a-f]{12})?$")]
    full_config_hash: OptionalHex64
    artifact_root: str
    payload_kind: PayloadKind
    created_at: Rfc3339
    creator: str
    tensorboard_logdir: str
    global_step: int = Field(ge=0)
    architecture: str
    parameter_count: int = Field(ge=0)
    files: tuple[PayloadFile, ...]
    trust_policy_version: int = Field(default=0, ge=0)
    run_claim_sha256: OptionalHex64 = ""
    weights_hash: OptionalHex64 = ""
    weights_full_counter: int = Field(default=0, ge=0)
    delta_base_counter: int = Field(default=0, ge=0)
    delta_base_block_hash: OptionalHex64 = ""
    chain_name: str = ""
    trust_root_id: OptionalHex64 = ""

    @model_validator(mode="after")
    def _files_sorted_unique(self) -> BlockHeader:
        names = [f.name for f in self.files]
        if names != sorted(set(names)):
            raise ValueError(f"payload files must be sorted by name and unique, got {names}")
        return self

    @property
    def weights(self) -> WeightsFields:
        """The weights fields of this header (all unset when the version carries no weights hash)."""
        return WeightsFields(
            payload_kind=self.payload_kind,
            weights_hash=self.weights_hash,
            weights_full_counter=self.weights_full_counter,
            delta_base_counter=self.delta_base_counter,
            delta_base_block_hash=self.delta_base_block_hash,
        )


class WeightsFields(BaseModel):
    """What a weights payload adds to a header: its kind, the full-weights hash and, for a DELTA, its base."""

    model_config = _FROZEN

    payload_kind: PayloadKind = PayloadKind.FULL
    weights_hash: OptionalHex64 = ""
    weights_full_counter: int = Field(default=0, ge=0)
    delta_base_counter: int = Field(default=0, ge=0)
    delta_base_block_hash: OptionalHex64 = ""


class Block(BaseModel):
    """A header, the sha256 of its deterministic protobuf serialization, and (signed blocks) the
    committer's ed25519 signature over those same bytes, hex, with the signing key's id."""

    model_config = _FROZEN

    header: BlockHeader
    block_hash: Hex64
    signature: Annotated[str, StringConstraints(pattern=r"^([0-9a-f]{128})?$")] = ""
    signer_key_id: OptionalHex64 = ""


class ChainHead(BaseModel):
    """``chain.json``. It carries the counter, so its bytes (and so its ETag/sha256 token) never repeat."""

    model_config = _FROZEN

    chain_name: str
    counter: int = Field(ge=0)
    block_hash: Hex64
    version_dir: str


class ChainVersion(BaseModel):
    """One version of the chain: its block and the directory holding it."""

    model_config = _FROZEN

    block: Block
    version_dir: str

    @property
    def header(self) -> BlockHeader:
        return self.block.header

    @property
    def counter(self) -> int:
        return self.block.header.counter

    @property
    def block_hash(self) -> str:
        return self.block.block_hash

    @property
    def content_hash(self) -> str:
        return self.block.header.content_hash

    @property
    def semver(self) -> str:
        return self.block.header.semver

    @property
    def global_step(self) -> int:
        return self.block.header.global_step


class CommitMeta(BaseModel):
    """What a committer says about the model it commits; the chain adds counter, parent, semver and time.

    ``tensorboard_logdir`` is a *local* directory of TensorBoard logs, uploaded to
    ``tensorboard/v{counter:010d}/`` only once the commit has won (never for a loser).
    """

    model_config = _FROZEN

    run_id: Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{12}$")]
    full_config_hash: Hex64
    artifact_root: str
    architecture: str
    parameter_count: int = Field(ge=0, le=MAX_U63)
    global_step: int | None = Field(default=None, ge=0, le=MAX_U63)
    steps_since_parent: int | None = Field(default=None, ge=0, le=MAX_U63)
    creator: str = Field(default_factory=worker_id)
    tensorboard_logdir: str | None = None

    @model_validator(mode="after")
    def _consistent(self) -> CommitMeta:
        if self.full_config_hash[:12] != self.run_id:
            raise ValueError(f"run_id {self.run_id} is not FULL_CONFIG_HASH[:12] of {self.full_config_hash}")
        if self.global_step is not None and self.steps_since_parent is not None:
            raise ValueError("give global_step (absolute) or steps_since_parent (on top of the parent), not both")
        return self

    def step_after(self, parent_step: int) -> int:
        """The block's global_step on a parent at ``parent_step``.

        ``global_step`` is absolute (a trainer that resumed from the parent knows it; it must not be
        below the parent's: NotFastForwardError). ``steps_since_parent`` is relative and recomputed on
        each attempt, so concurrent trainers who do not know the head's step still get a monotonic chain.
        Neither: the parent's step (no training counted).
        """
        if self.global_step is not None:
            return self.global_step
        return parent_step + (self.steps_since_parent or 0)


# A payload that depends on the version it is committed on (a DELTA on the parent's weights): called with
# the parent on every commit attempt, it returns the files and the weights fields of the new header.
PayloadBuilder = Callable[[ChainVersion], tuple[Mapping[str, PayloadSource], WeightsFields]]
