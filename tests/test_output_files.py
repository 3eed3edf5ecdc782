"""Files a user names for ml8s to write (ml8s/output_files.py): replaced whole or kept, never a device renamed
over, permissions as a shell redirection gives them, no partial file left by a failed write."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

import pytest

from ml8s import output_files
from ml8s.errors import ConfigError
from ml8s.output_files import write_new, write_output


def _fail(reason: str) -> ConfigError:
    return ConfigError(f"cannot write: {reason}")


def _full_disk(*_: object) -> None:
    raise OSError(errno.ENOSPC, "No space left on device")


def test_a_new_file_gets_the_umask_mode_and_an_existing_one_keeps_its_own(tmp_path: Path) -> None:
    previous = os.umask(0o027)
    try:
        write_output(str(tmp_path / "new.csv"), b"a\n", _fail)
    finally:
        os.umask(previous)
    assert stat.S_IMODE((tmp_path / "new.csv").stat().st_mode) == 0o640  # was 0600: mkstemp's own mode
    kept = tmp_path / "kept.csv"
    kept.write_text("old")
    kept.chmod(0o604)
    write_output(str(kept), b"new", _fail)
    assert kept.read_bytes() == b"new" and stat.S_IMODE(kept.stat().st_mode) == 0o604
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept.csv", "new.csv"]  # no temporary file left


def test_a_failed_write_keeps_the_old_file_whole_and_leaves_no_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kept = tmp_path / "out.csv"
    kept.write_text("the old predictions")
    monkeypatch.setattr(output_files.os, "fsync", _full_disk)
    with pytest.raises(ConfigError, match="cannot write: No space left on device"):
        write_output(str(kept), b"new", _fail)
    assert kept.read_text() == "the old predictions"
    assert [p.name for p in tmp_path.iterdir()] == ["out.csv"]


def test_a_directory_is_refused_and_a_dangling_link_gets_its_target(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="Is a directory"):
        write_output(str(tmp_path), b"x", _fail)
    link = tmp_path / "link"
    link.symlink_to("target")
    write_output(str(link), b"x", _fail)
    assert link.is_symlink() and (tmp_path / "target").read_bytes() == b"x"


def test_write_new_refuses_anything_there_and_removes_a_partial_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = tmp_path / "key.pem"
    write_new(str(key), b"secret", 0o600, _fail)
    assert key.read_bytes() == b"secret" and stat.S_IMODE(key.stat().st_mode) == 0o600
    with pytest.raises(ConfigError, match="File exists"):
        write_new(str(key), b"other", 0o600, _fail)
    assert key.read_bytes() == b"secret"
    dangling = tmp_path / "dangling.pem"
    dangling.symlink_to(tmp_path / "elsewhere.pem")  # a planted link must not redirect a private key
    with pytest.raises(ConfigError, match="File exists"):
        write_new(str(dangling), b"secret", 0o600, _fail)
    assert not (tmp_path / "elsewhere.pem").exists()
    monkeypatch.setattr(output_files.os, "fsync", _full_disk)
    with pytest.raises(ConfigError, match="No space left on device"):
        write_new(str(tmp_path / "second.pem"), b"secret", 0o600, _fail)
    assert not (tmp_path / "second.pem").exists()  # a retry is not refused with "File exists"
