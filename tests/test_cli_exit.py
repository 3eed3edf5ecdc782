"""The ``ml8s`` console script ends without C++ static destructors (ml8s/process_exit.py).

Arrow's thread pool, torn down by a static destructor at exit, now and then still holds a joinable thread:
SIGABRT after the command had printed its result (seen once in CI as exit -6 of a finished ``ml8s run``).
Here a C-level exit handler that aborts stands in for that destructor, registered the way C++ registers
them (``__cxa_atexit``): the console script must exit with its own code, with Python's atexit functions run
and stdout flushed; the plain ``sys.exit(main())`` the script used before aborts, so the test can fail.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

_CHILD = r"""
import atexit, ctypes, sys
libc = ctypes.CDLL(None)
libc.__cxa_atexit(ctypes.cast(libc.abort, ctypes.c_void_p), None, None)  # a static destructor that aborts
marker, entry, sys.argv = sys.argv[1], sys.argv[2], ["ml8s", *sys.argv[3:]]
atexit.register(lambda: open(marker, "w").write("atexit ran"))
print("printed before the exit", end="")
from ml8s.cli import console, main
if entry == "plain":
    sys.exit(main())
console()
"""


def _child(tmp_path: Path, entry: str, *argv: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    marker = tmp_path / "marker"
    env = {**os.environ, "PIPELINE_ROOT_URI": str(tmp_path / "root")}
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, str(marker), entry, *argv], env=env, capture_output=True, text=True, timeout=120
    )
    return done, marker


@pytest.mark.parametrize(
    ("argv", "code"),
    [
        (["verify", "0123456789ab"], 1),  # a FAIL verdict: the handler returns 1
        (["verify", "not-hex"], 2),  # argparse's usage error (SystemExit)
        (["--version"], 0),  # argparse's exit after printing
    ],
    ids=["returned", "usage", "version"],
)
def test_the_console_script_exits_with_its_code_whatever_a_native_destructor_would_do(
    tmp_path: Path, argv: list[str], code: int
) -> None:
    done, marker = _child(tmp_path, "console", *argv)
    assert done.returncode == code, done.stderr[-2000:]
    assert done.stdout.startswith("printed before the exit"), done.stdout
    assert marker.read_text() == "atexit ran"
    assert "Traceback" not in done.stderr


def test_the_planted_destructor_aborts_a_plain_exit(tmp_path: Path) -> None:
    done, marker = _child(tmp_path, "plain", "verify", "0123456789ab")
    assert done.returncode == -signal.SIGABRT, done.stderr[-2000:]
    assert marker.read_text() == "atexit ran"  # Python's atexit runs first; the C handlers after it


def test_the_installed_ml8s_command_is_the_console_entry() -> None:
    script = (Path(sys.executable).parent / "ml8s").read_text()  # what `make setup` installed, as users run it
    assert "from ml8s.cli import console" in script and "console()" in script, script
