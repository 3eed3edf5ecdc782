"""`ml8s chain commit` writes FULL/DELTA by DELTA_BASE_INTERVAL; `ml8s follow` keeps a directory current."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import safetensors.torch
import torch
from serving_support import chain_at, meta, weights_series

from ml8s.chain import ChainStore
from ml8s.cli.main import main
from ml8s.deltas import weights_hash
from ml8s.errors import ConfigError
from ml8s.serving import DeltaProducer, ModelDirectory
from ml8s.store import open_store

CLI_ENV = {"PIPELINE_ROOT_URI": "", "CHAIN_NAME": "", "DELTA_BASE_INTERVAL": "3"}


@pytest.fixture
def committed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, list[str]]:
    """Four versions committed by the CLI; their weights hashes."""
    root = f"file://{tmp_path}/root"
    for key, value in {**CLI_ENV, "PIPELINE_ROOT_URI": root, "CHAIN_NAME": "cli"}.items():
        monkeypatch.setenv(key, value)
    hashes = []
    for n, weights in enumerate(weights_series(41, torch.bfloat16, 4)):
        path = tmp_path / f"w{n}.safetensors"
        safetensors.torch.save_file(weights, str(path))
        assert main(["chain", "commit", "--payload", str(path)]) == 0
        hashes.append(weights_hash(weights))
    return root, hashes


def test_commit_kinds_and_log(committed: tuple[str, list[str]], capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    assert main(["chain", "log", "--json"]) == 0
    log = json.loads(capsys.readouterr().out)
    assert [(v["counter"], v["payload_kind"]) for v in log] == [
        (4, "full"),
        (3, "delta"),
        (2, "delta"),
        (1, "full"),
        (0, "genesis"),
    ]
    assert [v["weights_hash"] for v in log[:4]] == committed[1][::-1]
    assert all(v["stored_bytes"] < log[0]["stored_bytes"] / 4 for v in log[1:3])
    assert main(["chain", "log"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "DELTA" in lines[1] and "FULL" in lines[0] and " B " in lines[0]
    assert main(["chain", "verify"]) == 0


def test_follow_once_swaps_current(
    committed: tuple[str, list[str]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "serve"
    assert main(["follow", "--out", str(out), "--once"]) == 0
    current = out / "current"
    assert current.is_symlink()
    version = json.loads((current / "ml8s_version.json").read_text())
    assert (version["counter"], version["weights_hash"]) == (4, committed[1][-1])
    assert weights_hash(safetensors.torch.load_file(str(current / "model_native.safetensors"))) == committed[1][-1]
    first = os.readlink(current)
    path = tmp_path / "w-next.safetensors"
    safetensors.torch.save_file(weights_series(42, torch.bfloat16, 1)[0], str(path))
    assert main(["chain", "commit", "--payload", str(path)]) == 0
    capsys.readouterr()
    assert main(["follow", "--out", str(out), "--once"]) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["counter"] == 5
    assert os.readlink(current) != first and (out / first).is_dir()  # the previous version is kept
    assert sorted(os.listdir(out / "versions")) == sorted(
        [os.path.basename(first), os.path.basename(os.readlink(current))]
    )
    assert main(["follow", "--out", str(out), "--once"]) == 0  # nothing new: unchanged


@pytest.mark.parametrize("kind", ["directory", "file"])
def test_something_else_where_current_belongs_is_named_and_kept(
    committed: tuple[str, list[str]], tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    """An operator's directory or file where ``current`` belongs: the follower names it and keeps it (a file was
    silently renamed over, so deleted, by the swap); once it is moved away, following goes on."""
    out = tmp_path / "serve"
    assert main(["follow", "--out", str(out), "--once"]) == 0
    (out / "current").unlink()
    if kind == "directory":
        (out / "current").mkdir()  # an operator's copy, say
        kept = out / "current" / "mine.txt"
    else:
        kept = out / "current"
    kept.write_text("keep me")
    capsys.readouterr()
    assert main(["follow", "--out", str(out), "--once"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"ml8s: CONFIG_ERROR: --out {out}: {out / 'current'} is a {kind}")
    if kind == "file":
        assert err[0].endswith(
            "is a file, not the symlink a follower keeps there; expected a symlink or nothing (move the file away: "
            "ml8s does not delete it)"
        )
    assert kept.read_text() == "keep me"
    assert sorted(p.name for p in out.iterdir() if p.name.startswith(".current-")) == []  # no swap link left
    if kind == "directory":
        shutil.rmtree(out / "current")
    else:
        kept.unlink()
    assert main(["follow", "--out", str(out), "--once"]) == 0 and (out / "current").is_symlink()


def test_follow_pinned(committed: tuple[str, list[str]], tmp_path: Path) -> None:
    out = tmp_path / "pinned"
    assert main(["follow", "--out", str(out), "--pinned", "2"]) == 0
    version = json.loads((out / "current" / "ml8s_version.json").read_text())
    assert (version["counter"], version["payload_kind"], version["weights_hash"]) == (2, "delta", committed[1][1])


def test_follow_refuses_a_rollback_in_one_line(
    committed: tuple[str, list[str]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "serve"
    assert main(["follow", "--out", str(out), "--once"]) == 0
    chain = ChainStore(open_store(committed[0]), "cli")
    pointer = chain.read_head()
    assert pointer is not None
    chain.swap_head(chain.get(2), pointer[1])
    capsys.readouterr()
    assert main(["follow", "--out", str(out), "--once"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("ml8s: CHAIN_ROLLBACK:")
    assert json.loads((out / "current" / "ml8s_version.json").read_text())["counter"] == 4
    assert main(["follow", "--out", str(out), "--pinned", "0"]) == 1
    assert "expected a version counter >= 1" in capsys.readouterr().err


def _damage(version: Path, how: str) -> None:
    weights = version / "model_native.safetensors"
    if how == "flipped":
        data = bytearray(weights.read_bytes())
        data[-1] ^= 0x01
        weights.write_bytes(bytes(data))
    elif how == "truncated":
        weights.write_bytes(weights.read_bytes()[:-100])
    elif how == "appended":
        weights.write_bytes(weights.read_bytes() + b"x")
    elif how == "removed":
        weights.unlink()
    elif how == "stray":
        (version / "model.onnx").write_bytes(b"not from the chain")
    elif how == "a-directory":
        weights.unlink()
        weights.mkdir()
    elif how == "a-link":  # the same bytes, but in a file this follower did not write
        aside = version.parent.parent / "aside.safetensors"
        aside.write_bytes(weights.read_bytes())
        weights.unlink()
        weights.symlink_to(aside)
    elif how in ("a-fifo", "a-fifo-version-file"):  # opening one to read blocked until a writer came: forever
        path = weights if how == "a-fifo" else version / "ml8s_version.json"
        path.unlink()
        os.mkfifo(path)


@pytest.mark.parametrize(
    "how",
    ["flipped", "truncated", "appended", "removed", "stray", "a-directory", "a-link", "a-fifo", "a-fifo-version-file"],
)
def test_a_restarted_follower_rewrites_a_damaged_version_directory(
    committed: tuple[str, list[str]], tmp_path: Path, capsys: pytest.CaptureFixture[str], how: str
) -> None:
    """Files damaged on disk between two runs of the follower are not served: the version is rewritten."""
    out = tmp_path / "serve"
    assert main(["follow", "--out", str(out), "--once"]) == 0
    version = out / os.readlink(out / "current")
    good = {p.name: p.read_bytes() for p in sorted(version.iterdir())}
    _damage(version, how)
    capsys.readouterr()
    assert main(["follow", "--out", str(out), "--once"]) == 0
    err = capsys.readouterr().err
    assert "differ from chain version 4's payload; rewriting them" in err, err
    assert not version.exists()  # replaced by a fresh copy, current swapped to it, never renamed in place
    fresh = out / "current"
    assert os.readlink(fresh) == os.path.join("versions", f"{version.name}-r1")  # named in order, not at random
    assert {p.name: p.read_bytes() for p in sorted(fresh.iterdir())} == good
    assert (
        weights_hash(safetensors.torch.load_file(str(out / "current" / "model_native.safetensors")))
        == (committed[1][-1])
    )
    assert [n for n in os.listdir(out / "versions") if n.startswith(".")] == []  # nothing left aside


def test_a_second_follower_of_the_same_directory_is_refused(
    committed: tuple[str, list[str]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A follower starting removed a running one's half-written version as a killed writer's leftover; the
    running one then failed its rename (or both wrote the same name). One holds the directory's lock now."""
    out = tmp_path / "serve"
    running = ModelDirectory(str(out), exclusive=True)
    os.makedirs(out / "versions" / ".tmp-running")  # the running follower's version, half written
    capsys.readouterr()
    assert main(["follow", "--out", str(out), "--once"]) == 1
    assert capsys.readouterr().err == (
        f"ml8s: CONFIG_ERROR: --out {out}: another follower holds {out / '.follower.lock'}; expected one "
        "follower per directory (stop it, or give this one its own --out)\n"
    )
    assert (out / "versions" / ".tmp-running").is_dir() and not (out / "current").exists()
    running.close()
    assert main(["follow", "--out", str(out), "--once"]) == 0 and (out / "current").is_symlink()
    assert main(["follow", "--out", str(out), "--once"]) == 0  # each run released it


def test_an_empty_out_is_refused_not_the_working_directory(
    committed: tuple[str, list[str]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``--out "$UNSET"``: abspath("") is the working directory, which got versions/, current and the state."""
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    capsys.readouterr()
    assert main(["follow", "--out", "", "--once"]) == 1
    assert capsys.readouterr().err == (
        "ml8s: CONFIG_ERROR: --out '' is empty; expected the path of the directory to keep current\n"
    )
    assert list(work.iterdir()) == []


def test_a_filesystem_without_locks_is_followed_unlocked(
    committed: tuple[str, list[str]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only a lock held elsewhere refuses: flock failing otherwise (ENOLCK on some NFS mounts) is no second
    follower, and such a directory was followed before the lock existed."""

    def no_locks(*_: object) -> None:
        raise OSError(37, "No locks available")

    monkeypatch.setattr("fcntl.flock", no_locks)
    out = tmp_path / "serve"
    assert main(["follow", "--out", str(out), "--once"]) == 0 and (out / "current").is_symlink()


@pytest.mark.parametrize("target", ["dangling", "a-file"])
def test_a_link_planted_as_the_follower_lock_is_refused_not_followed(
    committed: tuple[str, list[str]], tmp_path: Path, capsys: pytest.CaptureFixture[str], target: str
) -> None:
    out, elsewhere = tmp_path / "serve", tmp_path / "elsewhere"
    out.mkdir()
    if target == "a-file":
        elsewhere.write_bytes(b"precious")
    (out / ".follower.lock").symlink_to(elsewhere)
    capsys.readouterr()
    assert main(["follow", "--out", str(out), "--once"]) == 1
    assert capsys.readouterr().err == (
        f"ml8s: CONFIG_ERROR: --out {out}: cannot open {out / '.follower.lock'}: Too many levels of symbolic links\n"
    )
    assert (elsewhere.read_bytes() == b"precious") if target == "a-file" else not elsewhere.exists()
    assert not (out / "current").exists()


def test_a_fifo_planted_as_the_follower_lock_does_not_hang_it(committed: tuple[str, list[str]], tmp_path: Path) -> None:
    out = tmp_path / "serve"
    out.mkdir()
    os.mkfifo(out / ".follower.lock")
    assert main(["follow", "--out", str(out), "--once"]) == 0 and (out / "current").is_symlink()
    running = ModelDirectory(str(out), exclusive=True)
    try:
        with pytest.raises(ConfigError, match="another follower holds"):  # locked like a file, by every follower
            ModelDirectory(str(out), exclusive=True)
    finally:
        running.close()


def test_a_payload_file_in_a_folder_is_followed_and_checked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A payload name may hold folders ('cfg/a.json'): the follower wrote it without its folder (CONFIG_ERROR
    blaming --out, on every poll), and a listing of the top folder alone could never match it."""
    root = f"file://{tmp_path}/root"
    for key, value in {**CLI_ENV, "PIPELINE_ROOT_URI": root, "CHAIN_NAME": "nested"}.items():
        monkeypatch.setenv(key, value)
    producer = DeltaProducer(chain_at(root, "nested"), interval=3)
    producer.publish_sync({"w": torch.ones(4)}, meta("nested"), extra={"cfg/deep/a.json": b"{}", "cfg/b.txt": b"b"})
    out = tmp_path / "serve"
    assert main(["follow", "--out", str(out), "--once"]) == 0
    version = out / os.readlink(out / "current")
    assert (version / "cfg" / "deep" / "a.json").read_bytes() == b"{}" and (
        version / "cfg" / "b.txt"
    ).read_bytes() == b"b"
    capsys.readouterr()
    assert main(["follow", "--out", str(out), "--once"]) == 0
    assert "rewriting" not in capsys.readouterr().err and os.readlink(out / "current") == f"versions/{version.name}"
    (version / "cfg" / "deep" / "a.json").write_bytes(b"{ }")
    (version / "cfg" / "stray").mkdir()
    assert main(["follow", "--out", str(out), "--once"]) == 0
    assert "rewriting them" in capsys.readouterr().err
    assert os.readlink(out / "current") == f"versions/{version.name}-r1"
    assert (out / "current" / "cfg" / "deep" / "a.json").read_bytes() == b"{}"
