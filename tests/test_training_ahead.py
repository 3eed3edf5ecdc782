"""Training's libraries loaded beside a large run's data steps (ml8s.pipeline.training_ahead): when, at what
priority, and that a failure there is training's own, later, never a thread's traceback."""

from __future__ import annotations

import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

from ml8s.data.fingerprint import FileEntry, Fingerprint
from ml8s.pipeline import training_ahead
from ml8s.pipeline.training_ahead import AHEAD_BYTES, TrainingAhead, loads_ahead

REPO = Path(__file__).resolve().parents[1]


def _fingerprint(*sizes: int) -> Fingerprint:
    entries = tuple(FileEntry(relative_path=f"part-{i}.csv", checksum="0" * 64, size=s) for i, s in enumerate(sizes))
    return Fingerprint(data_root="file:///data", fingerprint="0" * 64, entries=entries)


def test_only_large_data_trained_in_this_process_loads_ahead() -> None:
    assert not loads_ahead(_fingerprint(173_000_000), 1)  # a 2M-row run: its 600 MiB goal has no room for torch
    assert not loads_ahead(_fingerprint(AHEAD_BYTES // 2, AHEAD_BYTES // 2 - 1), 1)
    assert loads_ahead(_fingerprint(AHEAD_BYTES // 2, AHEAD_BYTES // 2), 1)  # the files' sizes together
    assert loads_ahead(_fingerprint(1_700_000_000), 1)
    assert not loads_ahead(_fingerprint(1_700_000_000), 2)  # rank processes load torch themselves
    assert not loads_ahead(_fingerprint(), 1)


def test_the_modules_load_on_a_low_priority_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, int] = {}
    module = types.ModuleType("ml8s_test_ahead_probe")

    def find(name: str) -> types.ModuleType:  # stands in for importlib.import_module: records who imports
        seen[name] = os.getpriority(os.PRIO_PROCESS, 0)  # on Linux, the calling thread's niceness
        return module

    monkeypatch.setattr(training_ahead.importlib, "import_module", find)
    before = os.getpriority(os.PRIO_PROCESS, 0)
    ahead = TrainingAhead(True)
    assert ahead.enabled
    ahead.wait()
    assert seen == {"ml8s.training.fit": 19}
    assert os.getpriority(os.PRIO_PROCESS, 0) == before  # the caller's own niceness is untouched


def test_nothing_starts_when_not_enabled(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(training_ahead.importlib, "import_module", lambda name: pytest.fail(f"imported {name}"))
    ahead = TrainingAhead(False)
    assert not ahead.enabled
    ahead.wait()


_CHILD = """
import sys
from ml8s.pipeline import training_ahead
assert "ml8s.training.metrics" not in sys.modules
training_ahead._MODULES = ({broken!r}, "ml8s.training.metrics")
ahead = training_ahead.TrainingAhead(True)
ahead.wait()
print("ml8s.training.metrics" in sys.modules, {broken!r} in sys.modules)
"""


def test_a_module_that_fails_to_load_stays_unloaded_and_silent_and_the_next_one_loads() -> None:
    # a fresh interpreter, which has loaded neither module: the first fails to import, the thread goes on to the
    # next, prints nothing (no thread traceback on stderr), and leaves the failed one for training to import, and
    # report, itself.
    broken = "ml8s_no_such_module_for_the_ahead_test"
    result = subprocess.run(
        [sys.executable, "-c", _CHILD.format(broken=broken)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["True", "False"]
    assert result.stderr == ""
