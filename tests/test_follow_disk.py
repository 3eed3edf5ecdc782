"""A polling ``ml8s follow`` whose disk is full while it writes a new version keeps serving the version it holds,
removes what it half wrote, says so once and writes the version on a later poll once there is room; an error that
does not heal (a read-only ``--out``) still ends it, as before."""

from __future__ import annotations

import errno
import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from serving_support import chain_at, meta, weights_series

from ml8s.chain import ChainStore
from ml8s.errors import ConfigError, NoSpaceError
from ml8s.serving import DeltaProducer, FollowOptions, ServedVersion, follow, version_files


def _disk_full_for(left: list[int], real: Callable[[str, bytes, str], None]) -> Callable[[str, bytes, str], None]:
    """``save_state`` refused as by a full disk while ``left[0]`` > 0 (one refusal each), then ``real``."""

    def save(path: str, data: bytes, what: str) -> None:
        if left[0] > 0:
            left[0] -= 1
            raise ConfigError(f"cannot save the {what} {path}: No space left on device")
        real(path, data, what)

    return save


def _counter(out: Path) -> int:
    return int(json.loads((out / "current" / "ml8s_version.json").read_text())["counter"])


def _served_then_two(tmp_path: Path, seed: int) -> tuple[ChainStore, Path, FollowOptions]:
    """A chain whose version 1 a follower serves under ``serve/`` (polling every 3 s) and version 2 is committed."""
    chain = chain_at(f"file://{tmp_path}/root")
    first, second = weights_series(seed, torch.float32, 2)
    producer = DeltaProducer(chain, interval=4)
    producer.publish_sync(first, meta("one"))
    out = tmp_path / "serve"
    options = FollowOptions(out=str(out), poll_interval_s=3)
    assert follow(chain, options.model_copy(update={"once": True})) is not None
    producer.publish_sync(second, meta("two"))
    return chain, out, options


@pytest.mark.parametrize("failures", [1, 2])
def test_a_forever_follower_retries_a_version_the_full_disk_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failures: int
) -> None:
    chain, out, options = _served_then_two(tmp_path, 41)
    real = version_files.fsync_dir
    left = [failures]

    def full(path: str) -> None:
        if left[0] > 0 and "/.tmp-" in path:  # the new version's files are written, not yet renamed in
            left[0] -= 1
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real(path)

    monkeypatch.setattr(version_files, "fsync_dir", full)
    warned: list[str] = []
    reported: list[ServedVersion] = []
    seen: list[tuple[float, int, list[str]]] = []

    def sleep(seconds: float) -> None:
        seen.append((seconds, _counter(out), sorted(os.listdir(out / "versions"))))
        if seen[-1][1] == 2 or len(seen) == 5:
            raise KeyboardInterrupt  # ends the forever loop

    with pytest.raises(KeyboardInterrupt):
        follow(chain, options, warn=warned.append, sleep=sleep, report=reported.append)
    assert [s[:2] for s in seen] == [(3, 1)] * failures + [(3, 2)]  # the old version served until the retry
    assert not [n for s in seen for n in s[2] if n.startswith(".tmp-")]  # the half-written version removed
    assert len(warned) == 1, warned  # one line, however many polls the disk stays full
    assert warned[0].startswith("ml8s: chain 'served': keeping ") and "counter=1" in warned[0]
    assert "No space left on device" in warned[0] and warned[0].endswith("trying again every 3 s")
    assert [r.counter for r in reported] == [2]


@pytest.mark.parametrize(("code", "raised"), [(errno.ENOSPC, NoSpaceError), (errno.EROFS, ConfigError)])
def test_once_still_ends_at_a_write_error_and_forever_at_one_that_does_not_heal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int, raised: type[ConfigError]
) -> None:
    chain, out, options = _served_then_two(tmp_path, 42)

    def failing(path: str) -> None:
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(version_files, "fsync_dir", failing)
    with pytest.raises(raised, match=r"cannot write versions/.*expected a writable directory"):
        follow(chain, options.model_copy(update={"once": True}))
    if raised is ConfigError:  # a read-only --out: the forever loop ends too, as before
        with pytest.raises(ConfigError, match=os.strerror(code)):
            follow(chain, options, sleep=lambda _: None)
    assert _counter(out) == 1
    assert not [n for n in os.listdir(out / "versions") if n.startswith(".tmp-")]


def test_a_follower_whose_state_could_not_be_saved_serves_that_head_on_a_later_poll(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The head was taken as seen before its state was saved: after a full disk refused the save, every later
    poll found the head unchanged, so a running follower kept the old version (and the old state) until another
    version was committed."""
    import ml8s.chain.follower as follower_module

    chain = chain_at(f"file://{tmp_path}/root")
    first, second = weights_series(43, torch.float32, 2)
    producer = DeltaProducer(chain, interval=4)
    producer.publish_sync(first, meta("one"))
    out = tmp_path / "serve"
    left = [0]
    monkeypatch.setattr(follower_module, "save_state", _disk_full_for(left, follower_module.save_state))
    warned: list[str] = []
    seen: list[int] = []

    def sleep(_: float) -> None:
        seen.append(_counter(out))
        if len(seen) == 1:  # the follower serves version 1: version 2 comes, and the disk is full at its poll
            producer.publish_sync(second, meta("two"))
            left[0] = 1
        if seen[-1] == 2 or len(seen) == 5:
            raise KeyboardInterrupt  # ends the forever loop

    with pytest.raises(KeyboardInterrupt):
        follow(chain, FollowOptions(out=str(out), poll_interval_s=3), warn=warned.append, sleep=sleep)
    assert seen == [1, 1, 2], warned
    assert len(warned) == 1 and "cannot save the follower state" in warned[0]
    assert json.loads((out / ".follower-state.json").read_text())["counter"] == 2  # saved by the poll after


def test_a_promotion_state_that_could_not_be_saved_is_saved_by_the_next_poll(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The decisions seen were taken as saved before the save: after a full disk refused it, every later poll
    found nothing new to save, so the state kept fewer decisions than the follower had seen (a restart would
    then take back a log cut to them)."""
    import ml8s.chain.promotion_pin as pin_module
    from ml8s.chain import PromotionLog, PromotionReader
    from ml8s.weights import commit_weights

    chain = chain_at(f"file://{tmp_path}/root", "gate")
    for n, weights in enumerate(weights_series(44, torch.float32, 2)):
        commit_weights(chain, weights, meta(f"gate-{n}"), interval=4)
    PromotionLog(chain).decide("promote", chain.get(2), "manual", None)
    left = [1]
    monkeypatch.setattr(pin_module, "save_state", _disk_full_for(left, pin_module.save_state))
    state = tmp_path / "state.json"
    reader = PromotionReader(chain, state_path=str(state))
    with pytest.raises(ConfigError, match="No space left on device"):
        reader.gated()
    assert reader.gated()
    assert json.loads(Path(f"{state}.promotion.json").read_text())["sequence"] == 1
