"""Several ``ml8s`` commands in a row, each its own process forked from the worker's warm interpreter
(forked_cli): ml8s, MLflow and torch are imported once per test worker, not once per command.

Each command runs as the ``ml8s`` console script runs it, its stdout and stderr captured apart, in order: a
command sees what the ones before it wrote. For read-only commands (verify, audit, chain verify) that follow
each other in a test; a command whose process itself is under test (killed, raced) is started with
``subprocess``.
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from forked_cli import forked_ml8s


def ml8s_many(
    commands: Sequence[Sequence[str]], env: Mapping[str, str], cwd: Path | None = None, timeout: float = 600
) -> list[subprocess.CompletedProcess[str]]:
    """Run each command (its arguments after ``ml8s``) in turn; one result per command, in order."""
    return [forked_ml8s(words, env, cwd=cwd, timeout=timeout) for words in commands]
