"""``ml8s chain commit --payload FILE``: a checkpoint trained outside ml8s committed to a chain."""

from __future__ import annotations

import os

from ml8s.chain import (
    ChainStore,
    ChainVersion,
    CheckpointBuilder,
    CommitMeta,
    PayloadBuilder,
    RetryPolicy,
    check_safetensors,
    commit_with_retry,
    hashed_checkpoint,
    to_stderr,
)
from ml8s.errors import ConfigError
from ml8s.text import is_utf8

MAX_STEPS = 2**63 - 1


def commit_external(chain: ChainStore, path: str, steps: int, interval: int) -> ChainVersion:
    """An externally trained checkpoint: its identity is its bytes (FULL_CONFIG_HASH = sha256 of the file).

    Everything is checked before anything is written (no run claim for a bad payload). The file is read once
    for both its sha256 and its weights hash (no torch); on a local store that read also stages the copy a
    FULL links into place (``hashed_checkpoint``); a DELTA (DELTA_BASE_INTERVAL, the rule of
    ml8s.weights.commit_weights) encodes its tensors on the parent's one tensor at a time.
    """
    if not 0 <= steps <= MAX_STEPS:
        raise ConfigError(f"--steps {steps}: expected an integer in [0, {MAX_STEPS}]")
    if interval < 1:
        raise ConfigError(f"DELTA_BASE_INTERVAL={interval}: expected a whole number >= 1")
    artifact_root = os.path.abspath(path)
    if not is_utf8(artifact_root):  # the block records it: such a path used to fail only after the run was claimed
        raise ConfigError(f"--payload {path!r}: its absolute path is not UTF-8; expected a UTF-8 path")
    summary = check_safetensors(path)
    with hashed_checkpoint(chain, path, summary, interval) as (source, weights_hash):
        meta = CommitMeta(
            run_id=source.sha256[:12],
            full_config_hash=source.sha256,
            artifact_root=artifact_root,
            architecture=summary.architecture,
            parameter_count=summary.parameter_count,
            steps_since_parent=steps,
        )

        def make_delta() -> PayloadBuilder:
            from ml8s.weights import checkpoint_builder  # torch: only when the parent makes a DELTA due

            return checkpoint_builder(chain, path, source, weights_hash=weights_hash, interval=interval)

        builder = CheckpointBuilder(source, weights_hash, interval, make_delta)
        return commit_with_retry(chain, builder, meta, RetryPolicy(), notify=to_stderr)
