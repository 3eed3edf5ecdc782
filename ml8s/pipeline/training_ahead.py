"""Training's libraries (torch) loaded on a thread while a large run's data steps run, so training starts at once.

Loading torch and the training modules takes about 2.5 s and 4 CPU s on the 2-core machine. A process that trains
next (``ml8s run``, one rank) loaded them after the features step, with nothing else to do meanwhile. Where the
data is large, :class:`TrainingAhead` loads them on a thread of the lowest priority (niceness 19) from the start
of the snapshot step: both cores are busy parsing and typing, about 85% of the time, and the scheduler gives the
loading thread what they leave. At 20M demo rows the run reaches training about 1.2 s sooner (34.2-35.7 s against
35.5-37.1 s, alternating); started at the features step instead, where less is left idle, it gained nothing
(docs/sizing.md).

Only where the data is large: torch adds about 170 MiB, which the data steps then hold beside the rows. From
:data:`AHEAD_BYTES` of data files (1 GiB: 12.5M rows of the demo's 86 bytes a row, whose data steps hold about 1.8
GiB, between the 2M and 20M runs' measured peaks) that is under a tenth; a 2M-row run (173 MB), whose goal is 600
MiB, loads torch after its features step, as before.

Loading changes no value computed: the same modules, imported once, whichever thread imports them first.
"""

from __future__ import annotations

import contextlib
import importlib
import threading

from ml8s.data.fingerprint import Fingerprint
from ml8s.threads import lower_priority

__all__ = ["AHEAD_BYTES", "TrainingAhead", "loads_ahead"]

AHEAD_BYTES = 1 << 30  # data files at least this large load training's libraries beside the data steps
# What training imports first (torch, safetensors, the model families): ml8s.pipeline.train imports it in the step.
_MODULES = ("ml8s.training.fit",)
_NICE = 19  # the loading thread's niceness: the data steps' threads first


def loads_ahead(fingerprint: Fingerprint, world_size: int) -> bool:
    """Whether a run loads training's libraries beside its data steps: it trains in this process (one rank: more
    are processes of their own, which load them themselves) and its data files hold at least
    :data:`AHEAD_BYTES`."""
    return world_size == 1 and sum(entry.size for entry in fingerprint.entries) >= AHEAD_BYTES


class TrainingAhead:
    """Training's modules loading on a daemon thread from construction (``enabled``) until :meth:`wait`.

    A module that fails to load here is left unloaded: training imports it again and fails with its own error,
    in the step that reports it (here it would be a thread's traceback on stderr). A run that fails before
    training does not wait for the thread.
    """

    def __init__(self, enabled: bool) -> None:
        self._thread: threading.Thread | None = None
        if enabled:
            self._thread = threading.Thread(target=_load, name="ml8s-load-training", daemon=True)
            self._thread.start()

    @property
    def enabled(self) -> bool:
        return self._thread is not None

    def wait(self) -> None:
        """Return once the modules are loaded (or failed to load); at once where nothing was started."""
        if self._thread is not None:
            self._thread.join()


def _load() -> None:
    lower_priority(_NICE)
    for name in _MODULES:
        with contextlib.suppress(Exception):
            importlib.import_module(name)
