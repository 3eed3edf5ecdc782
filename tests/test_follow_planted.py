"""`ml8s follow` on an --out directory someone else prepared: links and foreign files are refused, never pruned."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from test_cli_follow import committed  # noqa: F401 (a fixture)

from ml8s.cli.main import main


def test_versions_as_a_link_to_another_directory_is_refused_and_its_files_kept(
    committed: tuple[str, list[str]],  # noqa: F811 (the fixture)
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``versions`` linked to an operator's directory: pruning removed every ``v*`` entry of it (their
    ``videos/`` folder went on the first publish)."""
    out, theirs = tmp_path / "serve", tmp_path / "theirs"
    out.mkdir()
    (theirs / "videos").mkdir(parents=True)
    (theirs / "videos" / "a.mp4").write_bytes(b"precious")
    (theirs / ".tmp-notes").write_bytes(b"mine")
    os.symlink(theirs, out / "versions")
    capsys.readouterr()
    assert main(["follow", "--out", str(out), "--once"]) == 1
    assert capsys.readouterr().err == (
        f"ml8s: CONFIG_ERROR: --out {out}: {out / 'versions'} is a symbolic link, not the directory a follower "
        "keeps there; expected a directory or nothing (the follower removes old versions from it: move the "
        "symbolic link away)\n"
    )
    assert sorted(os.listdir(theirs)) == [".tmp-notes", "videos"]
    assert (theirs / "videos" / "a.mp4").read_bytes() == b"precious"
    assert not (out / "current").exists()
    (out / "versions").unlink()
    assert main(["follow", "--out", str(out), "--once"]) == 0 and (out / "current").is_symlink()
