"""Verifying a sharded checkpoint: every problem reported, each as a named :class:`ShardFinding`.

Checks (``ShardFinding.check``):

``metadata_missing`` / ``metadata_invalid``  no metadata file, or one that is not valid metadata JSON
``format_version``      a shard or the metadata has a format version this ml8s does not know
``metadata_ranks`` / ``metadata_tensors``  the metadata contradicts itself (ranks, shard names, tensor map)
``shard_missing``       a shard the metadata lists is not in the store
``stray_shard``         a ``{prefix}_shard_*.shard`` file the metadata does not list (a rank it does not list, or
                        an old set's shard left by a save cut short after its commit; the next save removes it)
``unsafe_object``       a shard's or the metadata's name holds no regular file but a symbolic link, FIFO or device
                        (local stores; not read: it would block, never end, or lead outside the store)
``shard_size``          a shard's size differs from the metadata's, and the shard is damaged (or is larger
                        than the metadata lists: then it is not read)
``metadata_size``       the metadata lists a wrong size for a shard that is intact (header, data, length)
``shard_checksum``      a shard's sha256 differs from the metadata's
``bad_magic`` / ``header_invalid`` / ``header_checksum``  the header is not a valid, intact format-1 header
``truncated`` / ``trailing_bytes``  the file is shorter / longer than its header says
``data_checksum`` / ``block_checksum`` / ``padding``  the data section does not match the header's hashes
``header_rank`` / ``header_world_size`` / ``header_checkpoint_id`` / ``header_tensors`` / ``header_metadata``
                        the header disagrees with the metadata (another checkpoint's shard, an edited map)

Works on any ``Store``: it lists the prefix's directory, reads the metadata with ``get`` and each shard in
place (local) or through ``download`` (S3), one at a time. Reads are bounded by the size the metadata lists;
with no metadata, by the size a shard's own fixed header makes (read alone with ``get_range``): a file of
another size is ``truncated`` / ``trailing_bytes`` (or its header's problem) and not read further.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from ml8s.errors import (
    NotFoundError,
    ObjectTooLargeError,
    ShardFormatError,
    ShardVerificationError,
    UnsafeObjectError,
    WrongCheckpointError,
)
from ml8s.shards import layout
from ml8s.shards.format import FIXED_SIZE, align, decode_fixed
from ml8s.shards.metadata import (
    CheckpointMetadata,
    ShardFileInfo,
    ShardReceipt,
    decode_metadata,
    header_disagreements,
    metadata_problems,
)
from ml8s.shards.plan import check_world
from ml8s.shards.reader import ShardScan, local_shard, scan_shard
from ml8s.store import Store
from ml8s.tempdirs import owned_tempdir

_FROZEN = ConfigDict(extra="forbid", frozen=True)
_UNSAFE = "no regular file: a symbolic link, FIFO or device (not read)"


class ShardFinding(BaseModel):
    """One violated rule: its name, why, and the file (store key) it is about."""

    model_config = _FROZEN

    check: str
    reason: str
    file: str


class ShardVerifyReport(BaseModel):
    """What verify_checkpoint found; ``files``: the shard and metadata keys it examined."""

    model_config = _FROZEN

    prefix: str
    checkpoint_id: str | None
    world_size: int | None
    files: tuple[str, ...]
    findings: tuple[ShardFinding, ...]

    @property
    def ok(self) -> bool:
        return not self.findings

    @property
    def checks(self) -> set[str]:
        return {f.check for f in self.findings}

    def raise_for_findings(self) -> None:
        """ShardVerificationError listing the findings, when there are any."""
        if self.findings:
            listed = "; ".join(f"{f.check} ({f.file}): {f.reason}" for f in self.findings[:5])
            more = f" (+{len(self.findings) - 5} more)" if len(self.findings) > 5 else ""
            raise ShardVerificationError(f"checkpoint {self.prefix}: {listed}{more}")


def verify_checkpoint(store: Store, prefix: str, *, read_data: bool = True) -> ShardVerifyReport:
    """Check the checkpoint at ``prefix`` (module docstring). ``read_data=False`` only lists: metadata,
    existence, sizes and strays, without reading shard bytes."""
    directory, _ = layout.split_prefix(prefix)
    listing = {info.key: info.size for info in store.list(directory)}
    mkey = layout.metadata_key(prefix)
    # a link, FIFO or device where a shard or the metadata belongs: named as such, not as an absent file
    odd = {
        k
        for k in store.irregular(directory)
        if k == mkey or layout.shard_rank_of(prefix, k) is not None or layout.is_generation(prefix, k)
    }
    findings = [ShardFinding(check="unsafe_object", reason=_UNSAFE, file=key) for key in sorted(odd)]
    meta = _metadata(store, prefix, mkey in listing, findings) if mkey not in odd else None
    found = sorted(key for key in listing if layout.shard_rank_of(prefix, key) is not None)
    listed = {layout.file_key(prefix, s.file): s for s in meta.shards} if meta else {}
    for key in (k for k in found if meta is not None and k not in listed):
        findings.append(ShardFinding(check="stray_shard", reason="a shard file the metadata does not list", file=key))
    with owned_tempdir("ml8s-verify-") as scratch:
        for key in listed or dict.fromkeys(found):
            info = listed.get(key)
            if key in odd:
                continue  # reported above, and never read
            if key not in listing:
                findings.append(
                    ShardFinding(check="shard_missing", reason="listed in the metadata, not stored", file=key)
                )
            elif info is not None and listing[key] > info.size:
                # never read (off a LocalStore: downloaded) past what the metadata records: a planted 64 GiB
                # object would fill the temp directory
                why = f"{listing[key]} bytes stored, more than the {info.size} the metadata lists (not read)"
                findings.append(ShardFinding(check="shard_size", reason=why, file=key))
            elif not read_data:
                if info is not None and listing[key] != info.size:
                    why = f"{listing[key]} bytes stored, the metadata lists {info.size}"
                    findings.append(ShardFinding(check="shard_size", reason=why, file=key))
            elif info is None and (unread := _off_its_header(store, key, listing[key])):
                findings += unread
            else:
                findings += _check_shard(store, key, scratch, meta, info)
    return ShardVerifyReport(
        prefix=prefix,
        checkpoint_id=meta.checkpoint_id if meta else None,
        world_size=meta.world_size if meta else None,
        files=tuple(sorted({*found, *listed, *([mkey] if mkey in listing else [])})),
        findings=tuple(sorted(findings, key=lambda f: (f.file, f.check, f.reason))),
    )


def _metadata(store: Store, prefix: str, present: bool, findings: list[ShardFinding]) -> CheckpointMetadata | None:
    key = layout.metadata_key(prefix)
    try:
        if not present:
            raise NotFoundError(f"{store.uri(key)} does not exist")
        meta = decode_metadata(store.get(key, max_bytes=layout.METADATA_MAX_BYTES), store.uri(key))
    except NotFoundError:
        findings.append(
            ShardFinding(check="metadata_missing", reason="no metadata file (rank 0 writes it last)", file=key)
        )
        return None
    except ShardFormatError as exc:
        findings.append(ShardFinding(check=exc.check, reason=exc.message, file=key))
        return None
    problems = metadata_problems(meta, prefix)
    findings += [ShardFinding(check=check, reason=reason, file=key) for check, reason in problems]
    # shards are judged against the metadata only where its shard list is sound
    return None if any(check == "metadata_ranks" for check, _ in problems) else meta


def _off_its_header(store: Store, key: str, size: int) -> list[ShardFinding]:
    """With no metadata to bound a shard's size, its fixed header does: findings, the rest left unread, when
    the header is not one or the stored size is not what it makes ([] when it is: then the shard is read).
    A planted 64 GiB file of any bytes was read whole, and off a LocalStore downloaded whole first."""
    try:
        problem = _header_size_problem(store, key, size)
    except NotFoundError:
        return [ShardFinding(check="shard_missing", reason="vanished while verifying", file=key)]
    except UnsafeObjectError:  # replaced by a FIFO or a link since the listing
        return [ShardFinding(check="unsafe_object", reason=_UNSAFE, file=key)]
    return [ShardFinding(check=problem[0], reason=problem[1], file=key)] if problem else []


def _header_size_problem(store: Store, key: str, size: int) -> tuple[str, str] | None:
    """(check, reason) when the shard's fixed header, read alone, is no header or makes another size than
    ``size``; None when the shard may be read whole."""
    where = store.uri(key)
    try:
        head_len, data_len = decode_fixed(store.get_range(key, 0, min(FIXED_SIZE, size)), size, where)
    except ShardFormatError as exc:
        return exc.check, f"{exc.message} (not read further)"
    if size == (makes := align(head_len) + data_len):
        return None
    why = f"{where}: {size} bytes stored, its header makes {makes}; no metadata lists its size (not read further)"
    return ("truncated" if size < makes else "trailing_bytes"), why


def _check_shard(
    store: Store, key: str, scratch: str, meta: CheckpointMetadata | None, info: ShardFileInfo | None
) -> list[ShardFinding]:
    try:
        with local_shard(store, key, scratch) as (path, _):
            scan = scan_shard(path, store.uri(key))
    except NotFoundError:
        return [ShardFinding(check="shard_missing", reason="vanished while verifying", file=key)]
    except UnsafeObjectError:  # replaced by a FIFO or a link since the listing
        return [ShardFinding(check="unsafe_object", reason=_UNSAFE, file=key)]
    problems = list(scan.problems)
    if meta is not None and info is not None:
        problems += _against_metadata(scan, meta, info)
    return [ShardFinding(check=check, reason=reason, file=key) for check, reason in problems]


def _against_metadata(scan: ShardScan, meta: CheckpointMetadata, info: ShardFileInfo) -> list[tuple[str, str]]:
    problems: list[tuple[str, str]] = []
    if scan.sha256 != info.sha256:
        problems.append(("shard_checksum", f"sha256 {scan.sha256}, the metadata lists {info.sha256}"))
    if scan.size != info.size:
        check = "metadata_size" if scan.intact else "shard_size"
        state = "is intact" if scan.intact else "is damaged"
        problems.append((check, f"{scan.size} bytes stored (the shard {state}), the metadata lists {info.size}"))
    if scan.header is not None:
        problems += header_disagreements(scan.header, meta, info.rank)
    return problems


def collect_receipts(store: Store, prefix: str, world_size: int, checkpoint_id: str) -> list[ShardReceipt]:
    """Every rank's receipt recovered from the stored shards, for a rank 0 that could not gather them.

    Reads each shard fully, once its fixed header (read alone) makes its stored size; ShardFormatError (naming
    the first problem) for a damaged one, WrongCheckpointError for one of another world size or checkpoint id.
    """
    layout.check_checkpoint_id(checkpoint_id)
    check_world(0, world_size)
    receipts = []
    directory = layout.split_prefix(prefix)[0]
    odd = set(store.irregular(directory))  # a link is listed with its target's size: local_shard refuses it
    sizes = {info.key: info.size for info in store.list(directory) if info.key not in odd}
    listed = _listed(store, prefix)
    with owned_tempdir("ml8s-receipts-") as scratch:
        for rank in range(world_size):
            key = _fresh_shard(store, prefix, rank, sorted(sizes), listed)
            # no metadata bounds its size: the header's must match before it is read (or downloaded) whole;
            # one not in ``sizes`` is refused by local_shard (absent, a link, a FIFO)
            if key in sizes and (problem := _header_size_problem(store, key, sizes[key])):
                raise ShardFormatError(problem[1], check=problem[0])
            with local_shard(store, key, scratch) as (path, _):
                scan = scan_shard(path, store.uri(key))
            if scan.header is None or scan.problems:
                check, reason = scan.problems[0]
                raise ShardFormatError(reason, check=check)
            h = scan.header
            if (h.rank, h.world_size, h.checkpoint_id) != (rank, world_size, checkpoint_id):
                raise WrongCheckpointError(
                    f"{store.uri(key)}: rank {h.rank} of {h.world_size}, checkpoint {h.checkpoint_id}; expected "
                    f"rank {rank} of {world_size}, checkpoint {checkpoint_id}"
                )
            shard = ShardFileInfo(
                rank=rank,
                file=key.rsplit("/", 1)[-1],
                size=scan.size,
                sha256=scan.sha256,
                header_sha256=h.header_sha256,
                data_sha256=h.data_sha256,
                tensor_count=len(h.entries),
            )
            receipts.append(
                ShardReceipt(checkpoint_id=checkpoint_id, world_size=world_size, shard=shard, entries=h.entries)
            )
    return receipts


def _listed(store: Store, prefix: str) -> set[str]:
    """The keys of the shards the checkpoint's metadata lists now (none where it has none, or none that reads)."""
    key = layout.metadata_key(prefix)
    try:
        meta = decode_metadata(store.get(key, max_bytes=layout.METADATA_MAX_BYTES), store.uri(key))
    except (NotFoundError, ShardFormatError, UnsafeObjectError, ObjectTooLargeError):
        return set()
    return {layout.file_key(prefix, s.file) for s in meta.shards}


def _fresh_shard(store: Store, prefix: str, rank: int, keys: list[str], listed: set[str]) -> str:
    """Rank ``rank``'s shard of the save being recovered: a save over a checkpoint writes a shard under its
    generation name unless the metadata there lists that very shard (:mod:`ml8s.shards.layout`), so the one
    the metadata does not list is the new save's; else the plain name (a first save, or this shard unchanged).

    Raises:
        WrongCheckpointError: several generations of this rank that the metadata does not list (a save cut short
            before this one left its own): which is this save's cannot be told.
    """
    plain = layout.shard_key(prefix, rank)
    generations = [k for k in keys if layout.is_generation(prefix, k) and _rank_of(k) == rank]
    fresh = [k for k in (plain, *generations) if k in keys and k not in listed]
    if len(fresh) > 1:
        shown = ", ".join(store.uri(k) for k in fresh[:5])
        raise WrongCheckpointError(
            f"rank {rank} has {len(fresh)} shards the metadata at {store.uri(layout.metadata_key(prefix))} does not "
            f"list ({shown}): expected one, this save's; remove the ones a save cut short left, or save again"
        )
    return fresh[0] if fresh else plain


def _rank_of(key: str) -> int:
    """The rank in a generation name (``..._shard_{rank}.shard.{h}``, matched by ``layout.is_generation``)."""
    return int(key.rsplit("_shard_", 1)[1].split(".", 1)[0])
