"""What the task modules share: the cache policy of the compute tasks and their output directories."""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

from flytekit import Cache, current_context
from flytekit.core.local_cache import LocalTaskCache
from flytekit.models.literals import Literal, LiteralMap

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


def _local_files_remain(outputs: LiteralMap) -> bool:
    """Whether every local file or directory that task outputs name is still there (a remote URI counts as there)."""
    pending: list[Literal] = list(outputs.literals.values())
    while pending:
        literal = pending.pop()
        if literal.collection is not None:
            pending += literal.collection.literals
        elif literal.map is not None:
            pending += literal.map.literals.values()
        elif literal.scalar is not None and literal.scalar.blob is not None:
            uri = literal.scalar.blob.uri
            local = uri.startswith("file://") or "://" not in uri
            if local and not os.path.exists(uri.removeprefix("file://")):
                return False
    return True


_cached_outputs = LocalTaskCache.get


def _cached_outputs_whose_files_remain(
    task_name: str, cache_version: str, input_literal_map: LiteralMap, cache_ignore_input_vars: tuple[str, ...]
) -> LiteralMap | None:
    """flytekit's local cache lookup, missing when the entry's files are gone.

    A local execution's outputs stay in its sandbox under TMPDIR (``flyte-*``), while the cache that names
    them lives in ~/.flyte: once that sandbox was cleaned (a reboot, tmp cleaning), every later run of the
    configuration under another root, or after a failed registration, got the dead path from the cache and
    died in flytekit's input conversion with a traceback, on every retry. Such an entry is a miss now: the
    task computes again and its new result replaces the entry. Remote executions never use this cache.
    """
    found = _cached_outputs(task_name, cache_version, input_literal_map, cache_ignore_input_vars)
    return found if found is None or _local_files_remain(found) else None


LocalTaskCache.get = staticmethod(_cached_outputs_whose_files_remain)  # type: ignore[method-assign]


def output_dir(name: str) -> str:
    """A fresh local directory for a compute task's output files (uploaded by Flyte on return)."""
    return os.path.join(tempfile.mkdtemp(prefix="ml8s-", dir=current_context().working_directory), name)
