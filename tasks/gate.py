"""Step 1 as tasks: the idempotence gate, and the manifest of a run that already completed."""

from __future__ import annotations

from typing import NamedTuple

from flytekit import task

from ml8s import log
from ml8s.context import RunContext
from ml8s.pipeline.gate import GateDecision, gate


class GateOutput(NamedTuple):
    completed: bool
    decision: str


@task
def check_gate(context: str) -> GateOutput:
    """Decide whether the run already completed (success.marker present and consistent).

    Returns:
        ``completed`` for the workflow's branch, and the decision as JSON.
    """
    log.configure()
    decision = gate(RunContext.from_json(context))
    return GateOutput(completed=decision.completed, decision=decision.model_dump_json())


@task
def reuse_manifest(decision: str) -> str:
    """Return the manifest of the completed run, as the gate read it; nothing is written."""
    log.configure()
    return GateDecision.model_validate_json(decision).manifest
