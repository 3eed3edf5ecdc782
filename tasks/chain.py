"""Step 8 as a task: commit the completed run to its model chain (on both branches of the gate)."""

from __future__ import annotations

from flytekit import task

from ml8s import log
from ml8s.pipeline.context import RunContext


# Never cached: it swaps the chain head (a side effect), and on a re-run it must still check that the
# run is in the chain, healing a crash between success.marker and the commit.
@task(cache=False)
def commit_to_chain(run: RunContext, manifest: str) -> str:
    """Commit the run's weights and manifest as the next chain version (idempotent per run).

    Returns:
        The manifest, unchanged, so the workflow's output stays the run manifest.
    """
    log.configure()
    from ml8s.pipeline.chain_commit import chain_commit

    chain_commit(run, run.open_store())
    return manifest
