"""What the task modules share: the cache policy of the compute tasks and their output directories."""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

from flytekit import Cache, current_context

import ml8s


def _source_digest() -> str:
    """sha256 (12 hex) of the ml8s and tasks sources, so that a local edit never reuses stale results."""
    digest = hashlib.sha256()
    for package in (Path(ml8s.__file__).parent, Path(__file__).parent):
        for path in sorted(package.rglob("*.py")):
            digest.update(path.relative_to(package.parent).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:12]


# The image tag is the cache version: a new image (new code or library versions) never reuses results
# computed by another. Read when the workflows are imported, i.e. when `pyflyte package` / `register`
# serializes them; the images set the same value with `ENV IMAGE_VERSION`. Unset (local `pyflyte run`),
# the version is "dev-" + a digest of the sources, so editing the code invalidates the local cache.
IMAGE_VERSION = os.environ.get("IMAGE_VERSION", "") or f"dev-{_source_digest()}"

# Only on the compute tasks (features, train, export): their inputs are the RunSpec (identity, params,
# data fingerprint: no pipeline root, no FORCE_RERUN, no MLflow) and the directories of the compute
# tasks before them, which the RunSpec determines too. A cache hit upstream returns the same directory,
# so the tasks downstream hit as well. serialize=True: identical concurrent runs compute once.
COMPUTE_CACHE = Cache(version=IMAGE_VERSION, serialize=True)


def output_dir(name: str) -> str:
    """A fresh local directory for a compute task's output files (uploaded by Flyte on return)."""
    return os.path.join(tempfile.mkdtemp(prefix="ml8s-", dir=current_context().working_directory), name)
