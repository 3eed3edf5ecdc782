"""The baseline of bench_early_exit: the cheapest `pyflyte run` that still runs a task.

One trivial task inside a workflow, so the baseline pays what every local run pays (interpreter and
flytekit start-up, workflow compilation, one task execution with its literal conversions) and nothing
else; a gate hit of the training pipeline is judged against it.
"""

from __future__ import annotations

from flytekit import task, workflow


@task
def echo(value: int) -> int:
    """Return the input unchanged: the smallest real task."""
    return value


@workflow
def empty_wf(value: int = 0) -> int:
    """A no-op workflow: one trivial task."""
    return echo(value=value)
