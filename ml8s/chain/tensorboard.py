"""Per-version TensorBoard logs, uploaded to ``tensorboard/v{counter:010d}/`` once the version is on the chain."""

from __future__ import annotations

import logging
import os

from ml8s.chain.models import ChainVersion
from ml8s.chain.versions import ChainVersions
from ml8s.errors import StoreError, VersionNotFoundError

log = logging.getLogger(__name__)


def upload_tensorboard(
    chain: ChainVersions, version: ChainVersion, local_dir: str, *, missing_only: bool = False
) -> list[str]:
    """Upload a directory of TensorBoard logs to ``tensorboard/v{counter}/`` of a *committed* version; returns the
    keys written. ``missing_only``: only the files not there yet (a re-run's commit, after a process killed
    between the head swap and the upload: each file lands whole or not at all, so one there is complete)."""
    if chain.get(version.counter).block_hash != version.block_hash:
        raise VersionNotFoundError(f"version {version.version_dir} is not on chain {chain.name!r}")
    there = (
        {info.key for info in chain.store.list(chain.key(version.header.tensorboard_logdir, ""))}
        if missing_only
        else set()
    )
    keys: list[str] = []
    for directory, dirs, files in os.walk(local_dir):
        dirs.sort()
        for name in sorted(files):
            path = os.path.join(directory, name)
            rel = os.path.relpath(path, local_dir).replace(os.sep, "/")
            key = chain.key(version.header.tensorboard_logdir, rel)
            if key in there:
                continue
            chain.store.put_file_atomic(key, path, tmp_key=chain.tmp_key())
            keys.append(key)
    return keys


def upload_missing_tensorboard(chain: ChainVersions, version: ChainVersion, local_dir: str) -> list[str]:
    """:func:`upload_tensorboard` of the files not there yet; a store that fails is a warning, as after a win (the
    version stands, the next re-run tries again)."""
    if not version.header.tensorboard_logdir:  # genesis, or a version sealed before logs had a place
        return []
    try:
        return upload_tensorboard(chain, version, local_dir, missing_only=True)
    except (StoreError, OSError) as exc:
        log.warning("chain %s, %s: missing TensorBoard files not uploaded: %s", chain.name, version.version_dir, exc)
        return []
