"""Where a sharded checkpoint lives: ``{prefix}_shard_{rank}.shard`` per rank, ``{prefix}.metadata.json``.

A save over a checkpoint already there names each shard by its generation, ``{prefix}_shard_{rank}.shard.{h}``
(``h``: the first 16 hex digits of its header's sha256), unless the old metadata lists that very shard under its
plain name, and the metadata lists the names it holds: the old set stays whole until the new metadata replaces
the old one (the commit), so a save cut short anywhere leaves the old set or the new one, never a mix of both.

``prefix`` is a store key without its suffix, e.g. ``runs/abc/ckpt/step_100/model``: the shards and the
metadata sit in its directory (``runs/abc/ckpt/step_100``), temporary uploads in that directory's ``.tmp``.
"""

from __future__ import annotations

import hashlib
import os
import re

from ml8s.errors import ShardInputError

# The metadata is read whole: bounded, so a planted multi-GB object is refused unread. It lists each tensor's
# pieces per rank (~200 bytes each): 64 MiB is far over 10,000 tensors on 32 ranks.
METADATA_MAX_BYTES = 64 * 1024 * 1024
_HEX64 = re.compile(r"[0-9a-f]{64}")
_SHARD_NAME = re.compile(r"(?P<base>.+)_shard_(?P<rank>[^/]*)\.shard")
_GENERATION_NAME = re.compile(r"(?P<base>.+)_shard_(?P<rank>[0-9]+)\.shard\.[0-9a-f]{16}")


def split_prefix(prefix: str) -> tuple[str, str]:
    """(directory key, base name) of a checkpoint prefix; ShardInputError for a malformed one."""
    parts = prefix.split("/")
    if not prefix or any(p in ("", ".", "..") for p in parts):
        raise ShardInputError(f"checkpoint prefix {prefix!r}: expected a key like 'dir/name', no empty, '.' or '..'")
    return "/".join(parts[:-1]), parts[-1]


def shard_name(prefix: str, rank: int) -> str:
    return f"{split_prefix(prefix)[1]}_shard_{rank}.shard"


def shard_key(prefix: str, rank: int) -> str:
    split_prefix(prefix)
    return f"{prefix}_shard_{rank}.shard"


def generation_name(prefix: str, rank: int, header_sha256: str) -> str:
    """Rank ``rank``'s shard written over an existing checkpoint, named by its header (module docstring)."""
    return f"{shard_name(prefix, rank)}.{header_sha256[:16]}"


def shard_names(prefix: str, rank: int, header_sha256: str) -> tuple[str, str]:
    """The names a metadata may list for rank ``rank``'s shard: the plain one, or its generation's."""
    return shard_name(prefix, rank), generation_name(prefix, rank, header_sha256)


def file_key(prefix: str, name: str) -> str:
    """The store key of a file the metadata lists by ``name`` (a name checked by ``shard_names``)."""
    directory, _ = split_prefix(prefix)
    return f"{directory}/{name}" if directory else name


def is_generation(prefix: str, key: str) -> bool:
    """Whether ``key`` is named like a generation of one of this prefix's shards."""
    directory, base = split_prefix(prefix)
    rel = key.removeprefix(f"{directory}/") if directory else key
    match = _GENERATION_NAME.fullmatch(rel)
    return match is not None and match["base"] == base


def metadata_key(prefix: str) -> str:
    split_prefix(prefix)
    return f"{prefix}.metadata.json"


def tmp_key(prefix: str, name: str) -> str:
    """A temporary upload key for ``name`` (rank and pid in it, so concurrent writers never share one)."""
    directory, _ = split_prefix(prefix)
    tmp = f"{name}-{os.getpid()}.tmp"
    return f"{directory}/.tmp/{tmp}" if directory else f".tmp/{tmp}"


def shard_rank_of(prefix: str, key: str) -> str | None:
    """The rank text of a key named like one of this prefix's shards (``model_shard_7.shard`` -> ``"7"``)."""
    directory, base = split_prefix(prefix)
    rel = key.removeprefix(f"{directory}/") if directory else key
    match = _SHARD_NAME.fullmatch(rel)
    return match["rank"] if match and match["base"] == base else None


def check_checkpoint_id(checkpoint_id: str) -> str:
    """The id itself when it is 64 lowercase hex digits (a sha256); ShardInputError otherwise."""
    if not _HEX64.fullmatch(checkpoint_id):
        raise ShardInputError(
            f"checkpoint id {checkpoint_id!r}: expected 64 lowercase hex digits (e.g. checkpoint_id_for(identity))"
        )
    return checkpoint_id


def checkpoint_id_for(identity: str) -> str:
    """A checkpoint id from any identity text the caller names a checkpoint by (run id, step, content hash)."""
    return hashlib.sha256(identity.encode()).hexdigest()
