"""``ml8s tmp-cleanup``'s local part: the ``$TMPDIR`` scratch directories of ml8s processes that have ended.

A run killed by SIGKILL (or a lost node's OOM killer) cannot remove its ``ml8s-<RUN_ID>-*``,
``ml8s-ranks-*``, ``ml8s-mlflow-model-*`` or ``ml8s-pyfunc-*`` directories. Each holds an owner file its
process keeps locked (:mod:`ml8s.tempdirs`); a free lock means the process is gone, whatever the clock or
the directory's age says, so a live run's directory is never removed.
"""

from __future__ import annotations

import os
import shutil

from ml8s.tempdirs import dead_tempdirs


def cleanup_local_tmp(directory: str | None = None, *, dry_run: bool = False) -> tuple[list[str], list[str]]:
    """Remove (unless ``dry_run``) the ml8s temp directories in ``directory`` (default ``$TMPDIR``) whose
    processes have ended; returns the paths removed (in a dry run: found) and those that could not be removed
    (another user's directory in a shared ``$TMPDIR``, a file the filesystem keeps), each sorted."""
    found = dead_tempdirs(directory)
    if dry_run:
        return found, []
    for path in found:
        shutil.rmtree(path, ignore_errors=True)
    # the report claims only what happened: rmtree says nothing of what it could not remove
    left = [path for path in found if os.path.lexists(path)]
    return [path for path in found if path not in left], left
