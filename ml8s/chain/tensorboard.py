"""Per-version TensorBoard logs, uploaded to ``tensorboard/v{counter:010d}/`` once the version is on the chain."""

from __future__ import annotations

import os

from ml8s.chain.models import ChainVersion
from ml8s.chain.versions import ChainVersions
from ml8s.errors import VersionNotFoundError


def upload_tensorboard(chain: ChainVersions, version: ChainVersion, local_dir: str) -> list[str]:
    """Upload a directory of TensorBoard logs to ``tensorboard/v{counter}/`` of a *committed* version."""
    if chain.get(version.counter).block_hash != version.block_hash:
        raise VersionNotFoundError(f"version {version.version_dir} is not on chain {chain.name!r}")
    keys: list[str] = []
    for directory, dirs, files in os.walk(local_dir):
        dirs.sort()
        for name in sorted(files):
            path = os.path.join(directory, name)
            rel = os.path.relpath(path, local_dir).replace(os.sep, "/")
            key = chain.key(version.header.tensorboard_logdir, rel)
            chain.store.put_file_atomic(key, path, tmp_key=chain.tmp_key())
            keys.append(key)
    return keys
