"""Which keys are ``ml8s tmp-cleanup``'s: the temporaries ml8s writes, and the folders they are listed from.

Every atomic write stages its bytes at a tmp key first (``put_atomic``/``put_file_atomic``'s ``tmp_key``): a
run's under ``ml8s_training_runs/{RUN_ID}/.tmp/``, an incident's under ``ml8s_incidents/.tmp/``, a quarantine's
under ``ml8s_quarantine/.tmp/``, and a local store's conditional writes under the root's ``.tmp/``. Nothing
else is one (the model chain's ``.tmp/`` is the chain GC's business).
"""

from __future__ import annotations

import re

from ml8s.contract import layout

QUARANTINE_DIR = "ml8s_quarantine"
_RUN_ID = re.compile(r"^[0-9a-f]{12}$")

# the folders tmp entries (and uploads to tmp keys) are listed from, relative to the pipeline root
LISTED = (
    layout.RUNS_DIR,
    f"{layout.INCIDENTS_DIR}/{layout.TMP_DIR}",
    f"{QUARANTINE_DIR}/{layout.TMP_DIR}",
    layout.TMP_DIR,
)


def is_tmp_key(key: str) -> bool:
    """True only for keys inside a run's, the incident log's, the quarantine's or the root's ``.tmp/`` directory."""
    parts = key.split("/")
    if len(parts) >= 2 and parts[0] == layout.TMP_DIR:
        return True
    in_run = len(parts) >= 4 and parts[0] == layout.RUNS_DIR and bool(_RUN_ID.fullmatch(parts[1]))
    if in_run:
        return parts[2] == layout.TMP_DIR
    return len(parts) >= 3 and parts[0] in (layout.INCIDENTS_DIR, QUARANTINE_DIR) and parts[1] == layout.TMP_DIR


def through(prefix: str, keys: frozenset[str]) -> bool:
    """Whether ``prefix`` or a folder on the way to it is one of ``keys``."""
    parts = prefix.split("/")
    return any("/".join(parts[: n + 1]) in keys for n in range(len(parts)))
