"""ml8s.locks: what ml8s relies on in filelock (path_lock), and the hand-written owner lock of ml8s.tempdirs."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from filelock import Timeout

from ml8s.locks import path_lock
from ml8s.tempdirs import OWNER_FILE, dead_tempdirs, owner_gone

ENV = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}

# A child process: take the lock, say so, hold it until its stdin closes.
HOLDER = """
import sys
from ml8s.locks import path_lock
with path_lock(sys.argv[1]):
    print("held", flush=True)
    sys.stdin.read()
"""


def test_a_lock_held_by_another_process_excludes_and_its_file_stays(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "k.lock"  # its directories are made
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(path)], env=ENV, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        with pytest.raises(Timeout):
            path_lock(str(path)).acquire(blocking=False)
    finally:
        holder.communicate(timeout=30)
    assert holder.returncode == 0
    with path_lock(str(path)):  # released by the holder's exit
        pass
    assert path.is_file()  # never unlinked: a waiter would lock a new file beside a holder's


def test_no_soft_lock_where_the_filesystem_has_no_flock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """filelock's default falls back to a marker file that a killed holder leaves for ever; ENOSYS is raised."""

    def no_flock(*_: object) -> None:
        raise OSError(errno.ENOSYS, "Function not implemented")

    monkeypatch.setattr("fcntl.flock", no_flock)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the fallback announces itself with a warning
        with pytest.raises(OSError) as raised:
            path_lock(str(tmp_path / "k.lock")).acquire(timeout=0)
    assert raised.value.errno == errno.ENOSYS


# A child process: make an owned temp directory in $TMPDIR, print it, live until killed.
OWNER = """
import time
from ml8s.tempdirs import owned_tempdir
with owned_tempdir("ml8s-live-") as path:
    print(path, flush=True)
    time.sleep(600)
"""


def test_tmp_cleanup_tells_a_live_owner_from_a_killed_one(tmp_path: Path) -> None:
    (tmp_path / "ml8s-ownerless").mkdir()  # not ml8s's, or its owner is between mkdtemp and its lock
    owner = subprocess.Popen(
        [sys.executable, "-c", OWNER], env={**ENV, "TMPDIR": str(tmp_path)}, stdout=subprocess.PIPE, text=True
    )
    try:
        assert owner.stdout is not None
        live = owner.stdout.readline().strip()
        assert os.path.dirname(live) == str(tmp_path) and os.path.isfile(os.path.join(live, OWNER_FILE))
        assert not owner_gone(live) and dead_tempdirs(str(tmp_path)) == []
    finally:
        owner.send_signal(signal.SIGKILL)  # no finally of its own runs: the directory stays
        owner.wait(timeout=30)
    assert owner_gone(live) and dead_tempdirs(str(tmp_path)) == [live]
    assert not owner_gone(str(tmp_path / "ml8s-ownerless"))
    assert not (tmp_path / "ml8s-ownerless" / OWNER_FILE).exists()  # a probe never makes an owner file
