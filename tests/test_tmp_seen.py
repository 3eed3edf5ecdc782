"""tmp-cleanup's first sightings (ml8s/store/sightings.py): a leftover whose ctime a recurring ``chmod -R`` (or
``chown -R``, a hard link) keeps moving, or whose mtime a clock ahead set in the future, was never old; a live
write still never is."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from ml8s.ops.tmp_cleanup import SEEN_KEY, TmpEntry, cleanup_tmp
from ml8s.store import LocalStore, ObjectInfo, _walk
from ml8s.store.sightings import Seen

RUN = "abcdef012345"
DAY = 86400.0
LEFTOVER = f"ml8s_training_runs/{RUN}/.tmp/features-w1.parquet"


def plant(root: Path, rel: str, age_days: float, data: bytes = b"x") -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    stamp = time.time() - age_days * DAY
    os.utime(path, (stamp, stamp))
    return path


class Ctime:
    """The ctime every listed file shows: what a ``chmod -R`` over the root run just before each cleanup gives."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.at = time.time()
        monkeypatch.setattr(_walk, "changed", lambda info: max(info.st_mtime, self.at))

    def chmod_at(self, when: float) -> float:
        self.at = when
        return when


def names(removed: tuple[TmpEntry, ...]) -> list[str]:
    return sorted(e.uri.rsplit("/", 1)[1] for e in removed)


def test_a_leftover_whose_ctime_a_daily_chmod_moves_is_aged_from_its_first_sighting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """changed_at = max(mtime, ctime): a month-old leftover chmod-ed every day was 0 days old at every cleanup."""
    plant(tmp_path, LEFTOVER, 30)
    ctime = Ctime(monkeypatch)
    store = LocalStore(str(tmp_path))
    start = time.time()
    for day in range(8):  # a cleanup a day, each just after the chmod
        report = cleanup_tmp(store, 7, now=ctime.chmod_at(start + day * DAY))
        assert report.removed == () and report.kept == 1, day
    report = cleanup_tmp(store, 7, now=ctime.chmod_at(start + 8 * DAY))
    assert names(report.removed) == ["features-w1.parquet"] and report.removed[0].age_days == 8.0
    assert not (tmp_path / LEFTOVER).exists()
    assert json.loads((tmp_path / SEEN_KEY).read_text()) == {"sightings": []}  # a removed entry is forgotten


def test_a_live_write_is_never_aged_from_an_earlier_sighting(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every write changes the entry's size or mtime: a new sighting, so it is young again, even backdated."""
    live = plant(tmp_path, LEFTOVER, 0)
    ctime = Ctime(monkeypatch)
    store = LocalStore(str(tmp_path))
    start = time.time()
    assert cleanup_tmp(store, 7, now=ctime.chmod_at(start)).kept == 1
    with live.open("ab") as out:  # written again a week on: the size changed
        out.write(b"more")
    back = start - 30 * DAY  # and backdated a month (touch -d): the mtime changed too
    os.utime(live, (back, back))
    assert cleanup_tmp(store, 7, now=ctime.chmod_at(start + 8 * DAY)).kept == 1
    os.utime(live, (start - 40 * DAY, start - 40 * DAY))  # backdated again, size unchanged: still a new sighting
    assert cleanup_tmp(store, 7, now=ctime.chmod_at(start + 15 * DAY + 1)).kept == 1
    assert live.exists()
    report = cleanup_tmp(store, 7, now=ctime.chmod_at(start + 23 * DAY))  # untouched for 8 days since
    assert names(report.removed) == ["features-w1.parquet"]


def test_an_mtime_in_the_future_counts_as_now_once(tmp_path: Path) -> None:
    """A leftover written by a clock a month ahead was kept for that month, whatever the retention."""
    ahead = plant(tmp_path, LEFTOVER, -30)
    store = LocalStore(str(tmp_path))
    assert cleanup_tmp(store, 7).kept == 1
    later = time.time() + 8 * DAY
    assert names(cleanup_tmp(store, 7, dry_run=True, now=later).removed) == ["features-w1.parquet"]
    assert cleanup_tmp(store, 7, now=later - 2 * DAY).kept == 1 and ahead.exists()  # 6 days since first seen
    assert names(cleanup_tmp(store, 7, now=later).removed) == ["features-w1.parquet"] and not ahead.exists()


def test_a_dry_run_records_no_sighting(tmp_path: Path) -> None:
    plant(tmp_path, LEFTOVER, -30)
    store = LocalStore(str(tmp_path))
    assert cleanup_tmp(store, 7, dry_run=True).kept == 1
    assert not (tmp_path / SEEN_KEY).exists()
    assert cleanup_tmp(store, 7, dry_run=True, now=time.time() + 8 * DAY).removed == ()  # never seen: still ahead


def test_the_record_itself_is_never_a_candidate(tmp_path: Path) -> None:
    store = LocalStore(str(tmp_path))
    plant(tmp_path, LEFTOVER, 0)
    cleanup_tmp(store, 7)
    record = tmp_path / SEEN_KEY
    os.utime(record, (time.time() - 30 * DAY,) * 2)
    report = cleanup_tmp(store, 0, allow_short_grace=True, now=time.time() + 30 * DAY)
    assert names(report.removed) == ["features-w1.parquet"] and report.kept == 0 and record.exists()


def test_a_forged_or_damaged_record_never_makes_an_entry_older(tmp_path: Path) -> None:
    """A sighting claimed in the future proves nothing before now; garbage is replaced; a link is not written
    through (its target keeps its bytes) and the cleanup goes on from the times alone."""
    plant(tmp_path, LEFTOVER, -30)
    store = LocalStore(str(tmp_path))
    now = time.time()
    (info,) = store.list(LEFTOVER)
    forged = {"sightings": [{"key": LEFTOVER, "size": info.size, "mtime": info.mtime, "first_seen": now + 99 * DAY}]}
    record = tmp_path / SEEN_KEY
    record.parent.mkdir(exist_ok=True)
    record.write_text(json.dumps(forged))
    assert cleanup_tmp(store, 7, now=now).kept == 1
    assert json.loads(record.read_text())["sightings"][0]["first_seen"] == now
    record.write_bytes(b"\xff not json")
    assert cleanup_tmp(store, 7, now=now + DAY).kept == 1
    assert json.loads(record.read_text())["sightings"][0]["first_seen"] == now + DAY
    record.unlink()
    target = tmp_path / "elsewhere.json"
    target.write_bytes(b"precious")
    record.symlink_to(target)
    report = cleanup_tmp(store, 7, now=now + 2 * DAY)
    # the link is a tmp entry like any other (judged by its own age: young)
    assert report.kept == 2 and target.read_bytes() == b"precious" and record.is_symlink()


def test_two_cleanups_at_once_keep_the_earlier_true_sighting(tmp_path: Path) -> None:
    """Each saves with compare-and-swap; the one that lost reads the other's and merges, losing no observation
    and inventing none (an entry seen with another size or mtime by one of them keeps that one's own)."""
    plant(tmp_path, LEFTOVER, 0)
    other = f"ml8s_training_runs/{RUN}/.tmp/export-w2.onnx"
    plant(tmp_path, other, 0)
    store = LocalStore(str(tmp_path))
    infos = {i.key: i for i in store.list(f"ml8s_training_runs/{RUN}/.tmp/")}
    early, late = Seen(store, SEEN_KEY, 1000.0), Seen(store, SEEN_KEY, 2000.0)
    early.since(infos[LEFTOVER])
    early.since(infos[other])
    late.since(infos[LEFTOVER])
    changed = ObjectInfo(key=other, size=9, mtime=infos[other].mtime)  # written again between the two listings
    late.since(changed)
    assert early.save() and late.save()  # the first to save wins the swap; the other reads it and merges
    saved = {s["key"]: s for s in json.loads((tmp_path / SEEN_KEY).read_text())["sightings"]}
    assert saved[LEFTOVER]["first_seen"] == 1000.0  # the earlier sighting of the same size and mtime
    assert (saved[other]["size"], saved[other]["first_seen"]) == (9, 2000.0)  # not early's of other bytes
    assert list(saved) == sorted(saved)


def test_a_name_that_is_no_utf8_does_not_void_the_record(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A leftover named with a byte that is no UTF-8 was written into the record as a lone surrogate escape, which
    the record's reader refuses: the whole record read as damaged at every cleanup, so under a daily chmod no
    leftover, that one or any other, ever aged."""
    plant(tmp_path, LEFTOVER, 30)
    odd = os.fsencode(tmp_path / f"ml8s_training_runs/{RUN}/.tmp") + b"/upload-\xff"
    with open(odd, "wb") as out:
        out.write(b"x")
    ctime = Ctime(monkeypatch)
    store = LocalStore(str(tmp_path))
    start = time.time()
    for day in range(8):
        assert cleanup_tmp(store, 7, now=ctime.chmod_at(start + day * DAY)).kept == 2, day
    report = cleanup_tmp(store, 7, now=ctime.chmod_at(start + 8 * DAY))
    assert names(report.removed) == ["features-w1.parquet", "upload-\\xff"] and report.kept == 0
    assert not os.path.exists(odd) and json.loads((tmp_path / SEEN_KEY).read_text()) == {"sightings": []}


@pytest.mark.parametrize("damage", [b"[" * 100_000, b'{"sightings": [{"key": "k", "size": 1, "mtime": NaN}]}'])
def test_a_record_nested_too_deep_or_holding_nan_is_replaced(tmp_path: Path, damage: bytes) -> None:
    plant(tmp_path, LEFTOVER, -30)
    record = tmp_path / SEEN_KEY
    record.parent.mkdir(exist_ok=True)
    record.write_bytes(damage)
    now = time.time()
    assert cleanup_tmp(store := LocalStore(str(tmp_path)), 7, now=now).kept == 1
    assert json.loads(record.read_text())["sightings"][0]["first_seen"] == now
    assert names(cleanup_tmp(store, 7, now=now + 8 * DAY).removed) == ["features-w1.parquet"]
