"""Step 1 as tasks: the idempotence gate, and the manifest of a run that already completed."""

from __future__ import annotations

from typing import NamedTuple

from flytekit import task

from ml8s import log
from ml8s.context.run import RunContext
from ml8s.pipeline.gate import GateDecision, gate


class GateOutput(NamedTuple):
    completed: bool
    decision: GateDecision


# Never cached: the answer is the state of the store (success.marker), not a function of the inputs,
# and under FORCE_RERUN the gate deletes the run's artifacts.
@task(cache=False)
def check_gate(run: RunContext) -> GateOutput:
    """Decide whether the run already completed (success.marker present and consistent).

    Returns:
        ``completed`` for the workflow's branch, and the decision.
    """
    log.configure()
    decision = gate(run, run.open_store())
    return GateOutput(completed=decision.completed, decision=decision)


# Pure (the decision holds the manifest), so caching it would be correct, but it only unpacks a
# field: a cache lookup (a catalog round trip on a cluster) would cost more than running it.
@task(cache=False)
def reuse_manifest(decision: GateDecision) -> str:
    """Return the manifest of the completed run, as the gate read it; nothing is written."""
    log.configure()
    return decision.manifest
