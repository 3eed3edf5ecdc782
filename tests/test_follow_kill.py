"""A follower killed (SIGKILL) before every filesystem step of a publish, on the normal path (a new version)
and on the repair path (the served version damaged on disk): ``current`` always names a complete version
directory, and a restarted follower serves the right version with no leftover link or directory."""

from __future__ import annotations

import builtins
import hashlib
import os
import shutil
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import safetensors.torch
import torch
from serving_support import chain_at, meta, weights_series

from ml8s.chain import local_file
from ml8s.deltas import encode_full
from ml8s.errors import ConfigError
from ml8s.serving import ClientConfig, InferenceClient, ModelDirectory, ServedVersion
from ml8s.serving.directory import CURRENT, VERSIONS
from ml8s.serving.version_files import VERSION_FILE, served_files
from ml8s.weights import commit_weights

Files = dict[str, bytes]
# Every call that changes the directory tree: a kill lands before each of them (and so after the one before).
_STEPS = (
    (os, "makedirs"),
    (os, "mkdir"),
    (os, "rename"),
    (os, "replace"),
    (os, "symlink"),
    (os, "unlink"),
    (os, "rmdir"),
    (os, "fsync"),
    (shutil, "rmtree"),
)


@pytest.fixture(scope="module")
def versions(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[ServedVersion, Files]]:
    """Two chain versions as a follower writes them: v1 (FULL) and v2 (a DELTA, weights rebuilt)."""
    root = tmp_path_factory.mktemp("kill")
    chain = chain_at(f"file://{root}/root", "kill")
    for n, weights in enumerate(weights_series(5, torch.float32, 2)):
        extra = {"model.onnx": b"graph %d" % n, "feature_schema.json": b'{"n": %d}' % n}
        commit_weights(chain, weights, meta(f"kill-{n}"), interval=4, extra=extra)
    out = []
    for counter in (1, 2):
        client = InferenceClient(chain, ClientConfig(pinned=counter))
        client.refresh()
        assert client.served is not None
        out.append((client.served.info, served_files(client.served)))
    assert [info.payload_kind for info, _ in out] == ["full", "delta"]
    return out


def _flip(directory: Path) -> None:
    graph = directory / "model.onnx"
    data = bytearray(graph.read_bytes())
    data[0] ^= 0x01
    graph.write_bytes(bytes(data))


def _prepared(base: Path, versions: list[tuple[ServedVersion, Files]], scenario: str) -> Path:
    out = base / scenario
    if scenario == "first":
        return out
    (old_info, old_files), (new_info, new_files) = versions
    if scenario == "normal":
        ModelDirectory(str(out)).publish_files(old_info, old_files)
    elif scenario == "repair":
        ModelDirectory(str(out)).publish_files(old_info, old_files)
        ModelDirectory(str(out)).publish_files(new_info, new_files)
        _flip(out / os.readlink(out / CURRENT))
    return out


def _killed_at(step: int, out: Path, info: ServedVersion, files: Files) -> bool:
    """Publish in a forked child that SIGKILLs itself before its ``step``-th filesystem call; False when
    the publish took fewer steps and completed."""
    pid = os.fork()
    if pid == 0:  # the child: only filesystem calls, no torch, so forking the test process is safe
        try:
            count = [0]

            def before(call: Callable[..., Any]) -> Callable[..., Any]:
                def wrapped(*args: Any, **kwargs: Any) -> Any:
                    count[0] += 1
                    if count[0] == step:
                        os.kill(os.getpid(), signal.SIGKILL)
                    return call(*args, **kwargs)

                return wrapped

            for module, name in _STEPS:
                setattr(module, name, before(getattr(module, name)))
            real_open = builtins.open
            counted_open = before(real_open)

            def opening(file: Any, mode: str = "r", *rest: Any, **kwargs: Any) -> Any:
                return (counted_open if "w" in mode else real_open)(file, mode, *rest, **kwargs)

            builtins.open = opening
            ModelDirectory(str(out)).publish_files(info, files)
        except BaseException:
            os._exit(3)
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        assert os.WTERMSIG(status) == signal.SIGKILL
        return True
    assert os.waitstatus_to_exitcode(status) == 0, f"the publish failed at step {step}"
    return False


def _holds(directory: Path, files: Files) -> bool:
    return sorted(p.name for p in directory.iterdir()) == sorted(files) and all(
        (directory / name).read_bytes() == data for name, data in files.items()
    )


@pytest.mark.parametrize("scenario", ["first", "normal", "repair"])
def test_a_kill_at_every_step_never_dangles_and_a_restart_cleans_up(
    tmp_path: Path, versions: list[tuple[ServedVersion, Files]], scenario: str
) -> None:
    (old_info, old_files), (info, files) = versions
    template = _prepared(tmp_path / "template", versions, scenario)
    before = os.readlink(template / CURRENT) if scenario != "first" else None
    kills = 0
    for step in range(1, 200):
        out = tmp_path / f"run{step}"
        if template.exists():
            shutil.copytree(template, out, symlinks=True)
        if not _killed_at(step, out, info, files):
            break
        kills += 1
        current = out / CURRENT
        if before is None and not os.path.lexists(current):
            pass  # nothing was served yet, and nothing is
        else:
            assert current.is_dir(), f"step {step}: current names nothing ({os.readlink(current)})"
            served = ServedVersion.model_validate_json((current / VERSION_FILE).read_bytes())
            if os.readlink(current) != before:  # a new target is always complete
                assert served == info and _holds(current, files), f"step {step}"
            else:
                assert served == (info if scenario == "repair" else old_info), f"step {step}"
        warned: list[str] = []
        ModelDirectory(str(out)).publish_files(info, files, warned.append)  # the restarted follower
        assert _holds(out / CURRENT, files), f"step {step}: the restart does not serve v2's files"
        assert [n for n in os.listdir(out) if n.startswith(".")] == [], f"step {step}: a stray link"
        left = sorted(os.listdir(out / VERSIONS))
        assert not [n for n in left if n.startswith(".")], f"step {step}: a half-written directory {left}"
        assert len(left) <= 2 and os.path.basename(os.readlink(out / CURRENT)) in left
        for name in left:  # the version kept besides the served one is complete too
            held = ServedVersion.model_validate_json((out / VERSIONS / name / VERSION_FILE).read_bytes())
            assert _holds(out / VERSIONS / name, files if held == info else old_files), f"step {step}: {name}"
        shutil.rmtree(out)
    else:
        pytest.fail("the publish never completed")
    assert kills >= (8 if scenario != "repair" else 9), kills  # every step was a kill point


def test_repair_swaps_to_a_fresh_copy_and_says_so(tmp_path: Path, versions: list[tuple[ServedVersion, Files]]) -> None:
    (_, _), (info, files) = versions
    out = _prepared(tmp_path, versions, "repair")
    damaged = os.readlink(out / CURRENT)
    warned: list[str] = []
    ModelDirectory(str(out)).publish_files(info, files, warned.append)
    assert len(warned) == 1 and "differ from chain version 2's payload; rewriting them" in warned[0]
    assert os.readlink(out / CURRENT) != damaged and not (out / damaged).exists()
    assert _holds(out / CURRENT, files)
    again: list[str] = []
    ModelDirectory(str(out)).publish_files(info, files, again.append)  # intact now: nothing rewritten
    assert again == []


def test_a_full_version_is_served_as_committed(tmp_path: Path) -> None:
    """The weights file of a FULL version is the committed bytes (not re-encoded), so a user can check the
    served file against the block; a DELTA version's is the rebuilt weights, checked by its weights hash."""
    chain = chain_at(f"file://{tmp_path}/root", "asis")
    weights = weights_series(5, torch.float32, 1)[0]
    path = tmp_path / "w.safetensors"
    safetensors.torch.save_file(weights, str(path), metadata={"producer": "a trainer"})
    version = commit_weights(chain, weights, meta("asis"), interval=4, source=local_file(str(path)))
    client = InferenceClient(chain, ClientConfig(pinned=version.counter))
    client.refresh()
    assert client.served is not None
    served = served_files(client.served)["model_native.safetensors"]
    assert served == path.read_bytes() != encode_full(weights)
    assert hashlib.sha256(served).hexdigest() == version.header.files[0].sha256


def test_a_follower_waiting_for_a_chain_says_so_once(tmp_path: Path) -> None:
    """Before the chain exists: one line saying it waits, not one per poll; a refusal that changes is said again."""
    from ml8s.chain import ChainStore
    from ml8s.serving import FollowOptions, follow
    from ml8s.store import open_store

    class Stop(Exception):
        pass

    polls: list[float] = []

    def sleep(seconds: float) -> None:
        polls.append(seconds)
        if len(polls) == 4:
            raise Stop

    warned: list[str] = []
    chain = ChainStore(open_store(f"file://{tmp_path}/root"), "absent")
    with pytest.raises(Stop):
        follow(chain, FollowOptions(out=str(tmp_path / "out"), poll_interval_s=0.5), warn=warned.append, sleep=sleep)
    assert len(polls) == 4 and len(warned) == 1, warned
    assert "waiting for a version to serve" in warned[0] and "keeping None" not in warned[0]


@pytest.mark.parametrize("failing", ["fsync", "symlink"])
def test_a_full_disk_is_a_named_error_and_keeps_current(
    tmp_path: Path, versions: list[tuple[ServedVersion, Files]], monkeypatch: pytest.MonkeyPatch, failing: str
) -> None:
    """No space left for the new version (its files, or the swap's link): CONFIG_ERROR naming --out, not an
    internal error; ``current`` still names the old version and nothing half-written is left."""
    (_, old_files), (info, files) = versions
    out = _prepared(tmp_path, versions, "normal")
    served = os.readlink(out / CURRENT)

    def full(*_: object, **__: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, failing, full)
    with pytest.raises(ConfigError, match=r"--out .*No space left on device; expected a writable directory"):
        ModelDirectory(str(out)).publish_files(info, files)
    monkeypatch.undo()
    assert os.readlink(out / CURRENT) == served and _holds(out / CURRENT, old_files)
    assert not [n for n in os.listdir(out) if n.startswith(".current-")]
    assert not [n for n in os.listdir(out / VERSIONS) if n.startswith(".tmp-")]


def test_a_current_link_to_another_directory_is_swapped_to_this_one(
    tmp_path: Path, versions: list[tuple[ServedVersion, Files]]
) -> None:
    """``current`` pointing at the same version's directory of another --out (an operator's link) was taken for
    this directory's copy by its basename: never swapped, so ``current`` served files this follower never
    wrote nor checked (and removed whenever the other follower prunes them)."""
    (info, files), _ = versions
    elsewhere = tmp_path / "elsewhere"
    foreign = ModelDirectory(str(elsewhere)).publish_files(info, files)
    out = tmp_path / "out"
    (out / VERSIONS).mkdir(parents=True)
    os.symlink(foreign, out / CURRENT)
    dest = ModelDirectory(str(out)).publish_files(info, files)
    assert os.readlink(out / CURRENT) == os.path.join(VERSIONS, os.path.basename(dest))
    assert _holds(out / CURRENT, files) and os.path.dirname(dest) == str(out / VERSIONS)
