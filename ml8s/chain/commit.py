"""The commit protocol: upload an immutable version, then swap the head by compare-and-swap.

One attempt (``commit``):
1. read the head and its token (ETag on S3, sha256 locally; ``chain.json`` carries the counter, so a
   token never comes back: no ABA);
2. the run index: a run already in the chain is returned, never committed twice (runindex.py);
3. fast-forward check: ``expected_parent`` must be the head, and an absolute global_step must not go
   back (``steps_since_parent`` instead counts from whatever the head is);
4. seal the header (counter + 1, parent hash, semver bump, content hash) and upload the version
   directory, ``block.pb`` last;
5. check the upload is intact (landed.py: restored if deleted meanwhile), read the head again: moved ->
   lost, without sending a swap that cannot win (radosgw answers racing conditional PUTs with 500s);
6. ``put_if_match(chain.json, new head, token)``. Lost (precondition failed, or step 5): delete the
   upload and raise ConflictError (NotFastForwardError when the caller named an expected parent).
   Won: check the version is intact again before reporting success (CommitDamagedError if not).

Unknown outcome (the store raised RetryableStoreError on the swap: the request may or may not have
landed, and may still land later): rolling back at once could delete a version the head is about to
name. So re-read the head: ours -> won. Moved to another block -> our request names a token that can
never match again, so it can never land: roll back, ConflictError. Unchanged -> our request has not
landed; send the same swap again (a late landing of the first then fails its precondition, as the
token has changed), and look again. If the store stays unreachable the upload is kept (GC removes it
if it never became reachable) and CommitOutcomeUnknownError says a retry is safe.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Mapping
from typing import NoReturn

from ml8s.chain import landed, paths, revocation, runindex
from ml8s.chain._util import content_hash, rfc3339, utc_now
from ml8s.chain.models import (
    MAX_U63,
    BlockHeader,
    ChainVersion,
    CommitMeta,
    PayloadBuilder,
    PayloadFile,
    PayloadKind,
    PayloadSource,
    WeightsFields,
)
from ml8s.chain.payload import payload_files
from ml8s.chain.semver import GENESIS_SEMVER, bump
from ml8s.chain.signing import SigningKey
from ml8s.chain.tensorboard import upload_missing_tensorboard, upload_tensorboard
from ml8s.chain.versions import ChainVersions
from ml8s.chain.wire import make_block
from ml8s.errors import (
    CommitOutcomeUnknownError,
    ConfigError,
    ConflictError,
    NotFastForwardError,
    PreconditionFailedError,
    RetryableStoreError,
    StoreError,
)
from ml8s.identity.settings import worker_id

log = logging.getLogger(__name__)
RESOLVE_ATTEMPTS = 5  # looks at the head after an unknown outcome
RESOLVE_DELAY_S = 0.1  # before look n: uniform(0.5, 2) * RESOLVE_DELAY_S * 2**n, ~3 s in all


def commit(
    chain: ChainVersions,
    payload: Mapping[str, PayloadSource] | PayloadBuilder,
    meta: CommitMeta,
    expected_parent: str | None = None,
    files: tuple[PayloadFile, ...] | None = None,
    check_record: bool = True,
) -> ChainVersion:
    """One commit attempt (module docstring). A retry loop passes the ``files`` it hashed once, and
    ``check_record=False`` after its first attempt (the walk from the claim's counter finds the run anyway).
    A ``PayloadBuilder`` is called with the parent once the attempt knows it (weights.py: FULL or DELTA)."""
    if files is None and isinstance(payload, Mapping):
        files = payload_files(payload)
    if check_record and (done := runindex.committed(chain, meta.full_config_hash)) is not None:
        return _already(chain, done, files, meta.tensorboard_logdir)
    pointer = chain.read_head()
    while pointer is None:  # a new chain: create genesis (idempotent), then read the head with its token
        init(chain)
        pointer = chain.read_head()
    head, token = pointer
    parent = chain.at(head)
    if meta.step_after(parent.global_step) > MAX_U63:  # before the claim: nothing written for a bad commit
        raise ConfigError(
            f"global_step {meta.step_after(parent.global_step)} exceeds {MAX_U63} (the head's is {parent.global_step})"
        )
    # Before the claim: a commit the policy refuses writes nothing.
    policy = revocation.commit_policy(chain, chain.signer, chain.trust_root)
    since, fresh, claim_sha256 = runindex.claim(chain, meta, head.counter)
    # A fresh claim: the run was never claimed, or runs/ was deleted; only the whole chain can tell.
    if (found := runindex.find(chain, parent, meta.full_config_hash, -1 if fresh else since)) is not None:
        runindex.record(chain, found)
        return _already(chain, found, files, meta.tensorboard_logdir, repaired=True)
    if expected_parent is not None and parent.block_hash != expected_parent:
        _refuse(chain, parent, meta, f"expected parent {expected_parent}, the head is {parent.block_hash}")
    if meta.step_after(parent.global_step) < parent.global_step:
        _refuse(chain, parent, meta, f"global_step {meta.global_step} < the head's {parent.global_step}")
    payload, weights = (payload, WeightsFields()) if isinstance(payload, Mapping) else payload(parent)
    files = files if files is not None else payload_files(payload)
    number, root_id = (policy.version, policy.root_id) if policy is not None else (0, "")
    version = _seal(parent, meta, files, number, chain.signer, claim_sha256, weights, chain.name, root_id)
    written: list[str] = []
    try:
        chain.write_version(version, payload, written)
        _audit(chain, "sealed", version)  # before the swap: a version on the chain always has an event
        landed.ensure_intact(chain, version, payload, "before the head swap")
    except BaseException:
        chain.discard(written)
        raise
    named = version.header.trust_policy_version
    if newer := revocation.superseded(chain, named, version.counter, chain.trust_root):
        # A rotation raced this commit: its block would name a retired policy. Lose, as to a racing
        # commit; the retry seals under the new policy (or refuses a key the rotation dropped).
        _lost(chain, version, written, expected_parent is not None, f"trust policy {newer} replaced {named}")
    swap(chain, version, token, written, named_parent=expected_parent is not None)
    # Won: only a damaged version (the head names it) is an error now; a record or TensorBoard upload is not.
    restored = landed.ensure_intact(chain, version, payload, "after the head swap")
    notes = [f"restored {restored} file(s) deleted after the upload"] if restored else []
    try:
        runindex.record(chain, version)
        if meta.tensorboard_logdir:
            upload_tensorboard(chain, version, meta.tensorboard_logdir)
    except (StoreError, OSError) as exc:
        notes.append(f"after the win: {exc}")
        log.warning("chain %s, %s committed, but: %s", chain.name, version.version_dir, exc)
    _audit(chain, "committed", version, "; ".join(notes))
    return version


def init(chain: ChainVersions) -> ChainVersion:
    """The head, after creating genesis if there is no chain yet (racing inits: one genesis wins)."""
    if (pointer := chain.read_head()) is not None:
        return chain.at(pointer[0])
    if (missing := chain.missing_head()) is not None:
        raise missing
    header = BlockHeader(
        counter=0,
        parent_block_hash="",
        parent_semver="",
        content_hash=content_hash([]),
        semver=GENESIS_SEMVER,
        run_id="",
        full_config_hash="",
        artifact_root="",
        payload_kind=PayloadKind.GENESIS,
        created_at=rfc3339(utc_now()),
        creator=worker_id(),
        tensorboard_logdir="",
        global_step=0,
        architecture="",
        parameter_count=0,
        files=(),
        chain_name=chain.name,
    )
    genesis = _version(header)
    written: list[str] = []
    try:
        chain.write_version(genesis, {}, written)
    except BaseException:
        chain.discard(written)
        raise
    try:
        swap(chain, genesis, None, written, named_parent=False)
    except ConflictError:
        return chain.head()  # another init won; ours was rolled back
    _audit(chain, "init", genesis)
    return genesis


def swap(
    chain: ChainVersions, version: ChainVersion, token: str | None, written: list[str], *, named_parent: bool
) -> None:
    """Point the head at ``version`` if the head still has ``token``; else roll back and raise."""
    try:
        now = chain.read_head()
    except BaseException:
        chain.discard(written)  # the swap was never sent: the upload can go
        raise
    if (now[1] if now else None) != token:  # moved while we uploaded: lose without sending a doomed swap
        _lost(chain, version, written, named_parent, "the head moved while uploading")
    try:
        chain.swap_head(version, token)
        return
    except PreconditionFailedError:
        _lost(chain, version, written, named_parent, "the head moved before the swap")
    except RetryableStoreError as exc:
        _audit(chain, "unknown_outcome", version, exc.message)
        _resolve(chain, version, token, written, named_parent, exc)


def _resolve(
    chain: ChainVersions,
    version: ChainVersion,
    token: str | None,
    written: list[str],
    named_parent: bool,
    cause: RetryableStoreError,
) -> None:
    """Make an unknown swap outcome known (module docstring); returns when the swap is ours."""
    for attempt in range(RESOLVE_ATTEMPTS):
        if attempt:
            time.sleep(random.uniform(0.5, 2.0) * RESOLVE_DELAY_S * 2**attempt)
        try:
            pointer = chain.read_head()
            if pointer is not None and pointer[0].block_hash == version.block_hash:
                _audit(chain, "unknown_outcome_resolved", version, "the head is ours: won")
                return
            if (pointer[1] if pointer else None) != token:
                _lost(chain, version, written, named_parent, "unknown outcome: the head moved to another block")
            chain.swap_head(version, token)
            _audit(chain, "unknown_outcome_resolved", version, "the head was unchanged: swapped again, won")
            return
        except (RetryableStoreError, PreconditionFailedError):
            continue  # unreachable again, or the head just changed (maybe to ours): look again
    raise CommitOutcomeUnknownError(
        f"swapping the head of {chain.name!r} to {version.version_dir}: outcome still unknown after "
        f"{RESOLVE_ATTEMPTS} looks ({cause.message}); the upload is kept (GC removes it if it never became "
        "the head) and a retry is safe"
    ) from cause


def _lost(chain: ChainVersions, version: ChainVersion, written: list[str], named_parent: bool, why: str) -> NoReturn:
    rolled_back = chain.discard(written)
    _audit(chain, "not_fast_forward" if named_parent else "conflict", version, why, rolled_back=rolled_back)
    message = f"{version.version_dir} of chain {chain.name!r} lost: {why} (parent {version.header.parent_block_hash})"
    raise NotFastForwardError(message) if named_parent else ConflictError(message)


def _refuse(chain: ChainVersions, head: ChainVersion, meta: CommitMeta, why: str) -> NoReturn:
    chain.audit.append(
        "not_fast_forward", counter=head.counter, block_hash=head.block_hash, run_id=meta.run_id, detail=why
    )
    raise NotFastForwardError(f"not a fast-forward of chain {chain.name!r} at version {head.counter}: {why}")


def _already(
    chain: ChainVersions,
    version: ChainVersion,
    files: tuple[PayloadFile, ...] | None,
    tensorboard: str | None,
    *,
    repaired: bool = False,
) -> ChainVersion:
    """The run's existing version. A plain re-run writes nothing (idempotence includes the audit trail);
    what is news is recorded: a payload that differs (a determinism audit for free), a repaired record,
    TensorBoard files a crash after the swap kept from the chain (uploaded now)."""
    mine = content_hash((f.name, f.sha256, f.size) for f in files) if files is not None else version.content_hash
    notes = [f"this payload differs: content hash {mine}"] if mine != version.content_hash else []
    notes += ["the run record was missing (a crash after the swap): rewritten"] if repaired else []
    if tensorboard and (uploaded := upload_missing_tensorboard(chain, version, tensorboard)):
        notes.append(f"{len(uploaded)} TensorBoard file(s) missing (a crash after the swap): uploaded")
    if notes:
        _audit(chain, "already_committed", version, "; ".join(notes))
    return version


def _seal(
    parent: ChainVersion,
    meta: CommitMeta,
    files: tuple[PayloadFile, ...],
    policy: int = 0,
    signer: SigningKey | None = None,
    claim_sha256: str = "",
    weights: WeightsFields | None = None,
    chain_name: str = "",
    root_id: str = "",
) -> ChainVersion:
    counter = parent.counter + 1
    weights = weights or WeightsFields()
    header = BlockHeader(
        counter=counter,
        parent_block_hash=parent.block_hash,
        parent_semver=parent.semver,
        content_hash=content_hash((f.name, f.sha256, f.size) for f in files),
        semver=bump(parent.header, meta.architecture, meta.parameter_count),
        run_id=meta.run_id,
        full_config_hash=meta.full_config_hash,
        artifact_root=meta.artifact_root,
        payload_kind=weights.payload_kind,
        created_at=rfc3339(utc_now()),
        creator=meta.creator,
        tensorboard_logdir=paths.tensorboard_dir(counter),
        global_step=meta.step_after(parent.global_step),
        architecture=meta.architecture,
        parameter_count=meta.parameter_count,
        files=files,
        trust_policy_version=policy,
        run_claim_sha256=claim_sha256,
        **weights.model_dump(exclude={"payload_kind"}),
        chain_name=chain_name,
        trust_root_id=root_id,
    )
    return _version(header, signer)


def _version(header: BlockHeader, signer: SigningKey | None = None) -> ChainVersion:
    block = make_block(header, signer)
    return ChainVersion(block=block, version_dir=paths.version_dir(header.counter, header.semver, block.block_hash))


def _audit(
    chain: ChainVersions, event: str, version: ChainVersion, detail: str = "", *, rolled_back: bool | None = None
) -> None:
    chain.audit.append(
        event,
        counter=version.counter,
        block_hash=version.block_hash,
        version_dir=version.version_dir,
        run_id=version.header.run_id,
        detail=detail,
        rolled_back=rolled_back,
    )
