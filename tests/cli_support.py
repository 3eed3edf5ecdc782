"""Several ``ml8s`` commands in one process: ml8s, MLflow and torch are imported once, not once per command.

Each command runs as the ``ml8s`` console script runs it (``main(argv)``, its exit code from the return value or
``SystemExit``), its stdout and stderr captured apart (stdout through a byte buffer: predict writes bytes), in
order: a command sees what the ones before it wrote. For read-only commands (verify, audit, chain verify) that
follow each other in a test; a command whose process itself is under test (killed, raced) keeps its own.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

_RUNNER = """
import contextlib, io, json, sys
from ml8s.cli import main
results = []
for argv in json.load(sys.stdin):
    out, err = io.TextIOWrapper(io.BytesIO(), encoding="utf-8"), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 2
    out.flush()
    results.append([argv, code, out.buffer.getvalue().decode("utf-8", "replace"), err.getvalue()])
print(json.dumps(results))
"""


def ml8s_many(
    commands: Sequence[Sequence[str]], env: Mapping[str, str], cwd: Path | None = None, timeout: float = 600
) -> list[subprocess.CompletedProcess[str]]:
    """Run each command (its arguments after ``ml8s``) in one fresh interpreter; one result per command, in order."""
    done = subprocess.run(
        [sys.executable, "-c", _RUNNER],
        input=json.dumps([list(words) for words in commands]),
        cwd=cwd,
        env=dict(env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return [subprocess.CompletedProcess(["ml8s", *a], code, out, err) for a, code, out, err in json.loads(done.stdout)]
