"""Step 8, chain commit: the run's model becomes the next version of its model line (SPEC §7).

Runs after finalization *and* on the gate's early-exit path, so a crash between the marker and the
commit heals on the next run; the chain's run index makes a second commit of the same run a no-op.
The payload is the run's weights (FULL), its exported model and feature schema (what a fleet needs to
serve raw rows from the chain alone) and its manifest as the chain holds it (without a FORCE_RERUN
audit: ``Manifest.chain_payload``); TensorBoard events are uploaded to the chain only once the commit has won.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict

from ml8s import log
from ml8s.chain import ENV_KEY, ENV_KEY_FILE, ChainStore, ChainVersion, CommitMeta, RetryPolicy, SigningKey, load_root
from ml8s.context.run import RunContext
from ml8s.contract import Manifest, TrainingMetadata, layout, load
from ml8s.contract.layout import PAYLOAD_MANIFEST
from ml8s.errors import NotFastForwardError, NotFoundError, SigningRequiredError, StaleParentError
from ml8s.identity.settings import PlatformSettings
from ml8s.store import Store
from ml8s.tempdirs import owned_tempdir


class ChainCommit(BaseModel):
    """Where the run landed in its chain."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    chain_name: str
    counter: int
    semver: str
    block_hash: str
    content_hash: str
    version_dir: str
    global_step: int

    @classmethod
    def of(cls, chain_name: str, version: ChainVersion) -> ChainCommit:
        return cls(
            chain_name=chain_name,
            counter=version.counter,
            semver=version.semver,
            block_hash=version.block_hash,
            content_hash=version.content_hash,
            version_dir=version.version_dir,
            global_step=version.global_step,
        )


@log.timed("chain_commit")
def chain_commit(ctx: RunContext, store: Store, policy: RetryPolicy | None = None) -> ChainCommit:
    """Commit the completed run (idempotent: an already committed run returns its version)."""
    metadata = load(
        ctx.uri(layout.TRAINING_METADATA), ctx.read_record(store, layout.TRAINING_METADATA), TrainingMetadata
    )
    training = metadata.training
    steps = training.epochs * math.ceil(training.train_rows / training.batch_size)
    payload = {
        name: store.get(ctx.key(rel))
        for name, rel in layout.chain_payload_files(
            ctx.params.model_format, ctx.identity.canonicalization_version, ctx.params.train_world_size
        )
        if name != PAYLOAD_MANIFEST
    }
    manifest = load(ctx.uri(layout.MANIFEST), ctx.read_record(store, layout.MANIFEST), Manifest)
    payload[PAYLOAD_MANIFEST] = manifest.chain_payload()
    # The committer's key comes from this process's environment (a Kubernetes secret on a cluster), never
    # from the run context: the context travels between Flyte tasks and must hold no secret.
    signer, root = require_signing_key(ctx.settings, os.environ), load_root(ctx.settings.chain_trust_root)
    chain = ChainStore(store, ctx.settings.chain_name, signer=signer, trust_root=root)
    with owned_tempdir("ml8s-tb-") as scratch:
        logdir = os.path.join(scratch, "logs")  # uploaded whole: not the scratch's owner file
        os.makedirs(logdir)
        has_logs = _fetch_events(ctx, store, logdir)
        meta = CommitMeta(
            run_id=ctx.run_id,
            full_config_hash=ctx.identity.full_config_hash,
            artifact_root=ctx.artifact_root,
            architecture=metadata.model.architecture,
            parameter_count=metadata.model.parameter_count,
            steps_since_parent=steps,
            tensorboard_logdir=logdir if has_logs else None,
        )
        plan = ctx.spec.lineage
        try:
            version = chain.commit_with_retry(
                payload, meta, policy, expected_parent=plan.parent.block_hash if plan is not None else None
            )
        except NotFastForwardError as exc:
            if plan is None:
                raise
            raise StaleParentError(
                f"run {ctx.run_id} trained from chain {chain.name!r} v{plan.parent.counter} "
                f"({plan.parent.block_hash[:12]}), which is no longer the head: its model is not appended (a "
                "version's parent is always the version it trained from). Run again to train from the new head "
                "(WARM_START=head does so by itself under STALE_PARENT_POLICY=retrain)"
            ) from exc
    ctx.log(
        "chain_commit",
        f"chain {chain.name!r} version {version.counter} ({version.semver}) block {version.block_hash[:12]}",
    )
    return ChainCommit.of(chain.name, version)


def require_signing_key(settings: PlatformSettings, env: Mapping[str, str]) -> SigningKey | None:
    """The committer's key from ``env``; with CHAIN_REQUIRE_SIGNED, SigningRequiredError when there is none.

    Bootstrap calls it too, so a run that could not commit signed fails before anything is written.
    """
    signer = SigningKey.from_env(env)
    if signer is None and settings.chain_require_signed:
        raise SigningRequiredError(
            f"CHAIN_REQUIRE_SIGNED=true: chain {settings.chain_name!r} takes only signed versions; set {ENV_KEY} "
            f"or {ENV_KEY_FILE} to a key its trust policy lists (docs/chain.md, keys)"
        )
    return signer


def _fetch_events(ctx: RunContext, store: Store, directory: str) -> bool:
    """The run's TensorBoard events into ``directory``; False for a run that has none."""
    try:
        store.download(
            ctx.key(layout.TENSORBOARD_EVENTS), os.path.join(directory, os.path.basename(layout.TENSORBOARD_EVENTS))
        )
    except NotFoundError:
        return False
    return True
