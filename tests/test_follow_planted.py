"""`ml8s follow` on an --out directory someone else prepared: links and foreign files are refused, never pruned."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from pydantic import ValidationError
from test_cli_follow import committed  # noqa: F401 (a fixture)

from ml8s.cli.main import main
from ml8s.serving import FollowOptions


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


def test_the_served_directory_is_writable_by_its_follower_only_whatever_the_umask(
    committed: tuple[str, list[str]],  # noqa: F811 (the fixture)
    tmp_path: Path,
) -> None:
    """Under a umask of 0 (a container's default, say) --out, versions/ and every served file were created
    writable by every local user: anyone could swap the model a server loads, and the follower does not
    re-read it between publishes."""
    out = tmp_path / "serve"
    old = os.umask(0)
    try:
        assert main(["follow", "--out", str(out), "--once"]) == 0
    finally:
        os.umask(old)
    served = [out, *(p for p in out.rglob("*") if not p.is_symlink() and p.name != ".follower.lock")]
    assert len(served) >= 5  # out, versions/, the version's directory and its two files
    assert {
        p.relative_to(out).as_posix(): oct(p.stat().st_mode & 0o777) for p in served if p.stat().st_mode & 0o022
    } == {}
    assert (out / "current" / "model_native.safetensors").stat().st_mode & 0o777 == 0o644


@pytest.mark.parametrize("seconds", [0.0, -1.0, float("nan"), float("inf"), 1e10, 86400.0])
def test_follow_options_refuse_a_poll_interval_the_loop_cannot_sleep(seconds: float) -> None:
    """``follow()`` given 1e10 s published a version, then ended in time.sleep's OverflowError (inf: a
    pydantic error from the client's config, once --out was locked): refused where the options are made."""
    with pytest.raises(ValidationError, match="poll_interval_s"):
        FollowOptions(out="serve", poll_interval_s=seconds)
    assert FollowOptions(out="serve", poll_interval_s=86399.5).poll_interval_s == 86399.5


def test_pruning_removes_only_the_followers_versions(
    committed: tuple[str, list[str]],  # noqa: F811 (the fixture)
    tmp_path: Path,
) -> None:
    """--out set to the chain's own directory (a file:// root): pruning removed every ``v*`` entry of its
    versions/, the chain's history (v0 to v3 gone, ``ml8s chain verify`` failing); an operator's ``v*`` file in
    a plain --out went too."""
    chain_dir = tmp_path / "root" / "ml8s_chain" / "cli"
    history = sorted(os.listdir(chain_dir / "versions"))
    assert len(history) == 5
    assert main(["follow", "--out", str(chain_dir), "--once"]) == 0
    assert set(history) <= set(os.listdir(chain_dir / "versions"))
    out = tmp_path / "serve"
    (out / "versions").mkdir(parents=True)
    (out / "versions" / "vendor-notes.txt").write_text("mine")
    assert main(["follow", "--out", str(out), "--once"]) == 0
    assert (out / "versions" / "vendor-notes.txt").read_text() == "mine"
