"""Chain GC's first sightings (ml8s/store/sightings.py, as tmp-cleanup's): a ``.tmp/`` leftover or a lost race's
version whose ctime a recurring ``chmod -R`` (``chown -R``, a hard link) keeps moving, or whose mtime a clock ahead
set in the future, was never old enough to collect; a live write still never is, and the record
(``.tmp/ml8s-chain-gc-seen.json``) is never collected, counted or reported itself."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_chain_support import (  # noqa: F401  (fixtures)
    build,
    chain_fixture,
    local_root_fixture,
    meta,
    payload,
    version_path,
)
from test_tmp_seen import Ctime  # a chmod -R before each GC, as before each cleanup

from ml8s.chain import ChainStore, ChainVersion, collect_garbage, gc, paths, verify_chain
from ml8s.chain.commit import _seal, payload_files
from ml8s.store.sightings import Seen

DAY = 86400.0
WEEK = 7 * DAY
LEFTOVER = "w-crashed-0123"


def plant(chain: ChainStore, local_root: Path, age_days: float, data: bytes = b"partial") -> Path:
    path = local_root / chain.key(paths.TMP, LEFTOVER)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    stamp = time.time() - age_days * DAY
    os.utime(path, (stamp, stamp))
    return path


def record(chain: ChainStore, local_root: Path) -> Path:
    return local_root / chain.key(paths.TMP, gc.SEEN_NAME)


def loser(chain: ChainStore, parent: ChainVersion) -> ChainVersion:
    version = _seal(parent, meta("loser", step=parent.global_step), payload_files(payload("loser")))
    chain.write_version(version, payload("loser"), [])
    return version


def deleted(report: gc.GcReport) -> list[str]:
    return sorted(item.path.rsplit("/", 1)[-1] for item in report.items if item.deleted)


def test_leftovers_a_daily_chmod_keeps_young_are_collected_after_the_grace(
    chain: ChainStore, local_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """changed_at = max(mtime, ctime): a month-old ``.tmp/`` leftover and a lost race's version, chmod-ed every
    day, were 0 days old at every GC and never collected."""
    versions = build(chain, 3)
    orphan = loser(chain, versions[1])
    leftover = plant(chain, local_root, 30)
    ctime = Ctime(monkeypatch)
    start = time.time()
    for day in range(7):  # a GC a day, each just after the chmod
        report = collect_garbage(chain, grace_s=WEEK, dry_run=False, now=ctime.chmod_at(start + day * DAY))
        assert report.items == () and len(report.kept_recent) == 2, day
    report = collect_garbage(chain, grace_s=WEEK, dry_run=False, now=ctime.chmod_at(start + 8 * DAY))
    assert deleted(report) == sorted([LEFTOVER, orphan.version_dir])
    assert all(item.age_s == 8 * DAY for item in report.items)
    assert not leftover.exists() and not version_path(local_root, orphan.version_dir).exists()
    assert json.loads(record(chain, local_root).read_text()) == {"sightings": []}  # what went is forgotten
    assert verify_chain(chain, strict_orphans=True).ok


def test_a_leftover_from_a_clock_ahead_counts_as_now_once(chain: ChainStore, local_root: Path) -> None:
    """An mtime a clock a month ahead set was kept for that month, whatever the grace."""
    build(chain, 1)
    ahead = plant(chain, local_root, -30)
    now = time.time()
    assert collect_garbage(chain, grace_s=WEEK, dry_run=False, now=now).kept_recent == (chain.key(paths.TMP, LEFTOVER),)
    later = now + 8 * DAY
    dry = collect_garbage(chain, grace_s=WEEK, now=later)  # a week past its first sighting: it would go
    assert [(i.path, i.deleted) for i in dry.items] == [(chain.key(paths.TMP, LEFTOVER), False)]
    assert collect_garbage(chain, grace_s=WEEK, dry_run=False, now=now + 6 * DAY).items == () and ahead.exists()
    assert deleted(collect_garbage(chain, grace_s=WEEK, dry_run=False, now=later)) == [LEFTOVER]
    assert not ahead.exists()


def test_a_live_write_is_never_aged_from_an_earlier_sighting(
    chain: ChainStore, local_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every write changes the entry's size or mtime: a new sighting, young again, even backdated."""
    build(chain, 1)
    live = plant(chain, local_root, 0)
    ctime = Ctime(monkeypatch)
    start = time.time()
    assert collect_garbage(chain, grace_s=WEEK, dry_run=False, now=ctime.chmod_at(start)).items == ()
    with live.open("ab") as out:  # written again a week on: the size changed
        out.write(b"more")
    back = start - 30 * DAY  # and backdated a month (touch -d)
    os.utime(live, (back, back))
    assert collect_garbage(chain, grace_s=WEEK, dry_run=False, now=ctime.chmod_at(start + 8 * DAY)).items == ()
    os.utime(live, (back - DAY, back - DAY))  # backdated again, size unchanged: still a new sighting
    assert collect_garbage(chain, grace_s=WEEK, dry_run=False, now=ctime.chmod_at(start + 15 * DAY + 1)).items == ()
    assert live.exists()
    report = collect_garbage(chain, grace_s=WEEK, dry_run=False, now=ctime.chmod_at(start + 23 * DAY))
    assert deleted(report) == [LEFTOVER]  # untouched for 8 days since


def test_the_record_is_never_collected_counted_or_reported(chain: ChainStore, local_root: Path) -> None:
    versions = build(chain, 2)
    plant(chain, local_root, 0)
    orphan = loser(chain, versions[0])
    before = {p for p in local_root.rglob("*") if p.is_file()}
    assert collect_garbage(chain, grace_s=WEEK).kept_recent  # a dry run writes no sighting
    assert {p for p in local_root.rglob("*") if p.is_file()} == before
    collect_garbage(chain, grace_s=WEEK, dry_run=False)
    saved = record(chain, local_root)
    assert saved.exists()
    os.utime(saved, (time.time() - 365 * DAY,) * 2)
    report = collect_garbage(chain, grace_s=0, dry_run=False, allow_short_grace=True, now=time.time() + 365 * DAY)
    assert deleted(report) == sorted([LEFTOVER, orphan.version_dir])
    assert saved.exists() and all(gc.SEEN_NAME not in i.path for i in report.items)
    assert all(gc.SEEN_NAME not in key for key in report.kept_recent + report.kept)
    checked = verify_chain(chain, strict_orphans=True)
    assert checked.ok and checked.orphans == () and checked.incomplete == ()
    env = {k: v for k, v in os.environ.items() if k != "CHAIN_NAME"} | {"PIPELINE_ROOT_URI": str(local_root)}
    ml8s = str(Path(sys.executable).with_name("ml8s"))
    done = subprocess.run(
        [ml8s, "chain", "verify", "--json", "--chain", chain.name], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0 and gc.SEEN_NAME not in done.stdout + done.stderr, done.stderr


def test_two_gcs_at_once_keep_the_earlier_true_sighting(
    chain: ChainStore, local_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each saves with compare-and-swap: the one that lost reads the other's record and merges, keeping the
    earlier sighting of the same bytes; neither fails nor overwrites the other's."""
    build(chain, 1)
    plant(chain, local_root, 0)
    save = Seen.save
    inner: list[gc.GcReport] = []
    ran: list[bool] = []
    start = time.time()

    def beside(seen: Seen) -> bool:
        if not ran:  # the other GC runs (and saves) between this one's listing and its save
            ran.append(True)
            inner.append(collect_garbage(ChainStore(chain.store, chain.name), grace_s=WEEK, dry_run=False, now=start))
        return save(seen)

    monkeypatch.setattr(Seen, "save", beside)
    report = collect_garbage(chain, grace_s=WEEK, dry_run=False, now=start + DAY)
    assert report.items == () and [i.items for i in inner] == [()]
    (sighting,) = json.loads(record(chain, local_root).read_text())["sightings"]
    assert sighting["key"] == chain.key(paths.TMP, LEFTOVER) and sighting["first_seen"] == start


def test_an_empty_directory_a_daily_chmod_keeps_young_is_removed_after_the_grace(
    chain: ChainStore, local_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A loser's rollback leaves ``payload/`` behind; its ctime, moved daily, kept it (an ``empty_dir``) forever.
    One whose mtime a clock ahead set a month on was kept that month."""
    build(chain, 2)
    left = version_path(local_root, "v0000000001_1.0.0_abcdefabcdef") / "payload"
    left.mkdir(parents=True)
    ahead = version_path(local_root, "v0000000001_1.0.0_fedcbafedcba")
    ahead.mkdir()
    os.utime(ahead, (time.time() + 30 * DAY,) * 2)
    ctime = Ctime(monkeypatch)
    start = time.time()
    for day in range(7):
        report = collect_garbage(chain, grace_s=WEEK, dry_run=False, now=ctime.chmod_at(start + day * DAY))
        assert report.items == () and left.is_dir() and ahead.is_dir(), day
    report = collect_garbage(chain, grace_s=WEEK, dry_run=False, now=ctime.chmod_at(start + 8 * DAY))
    assert [(i.kind, i.deleted) for i in report.items] == [("empty_dir", True)] * 2
    assert not left.exists() and not ahead.exists()
    saved = json.loads(record(chain, local_root).read_text())["sightings"]
    assert [s["key"] for s in saved] == [chain.version_key(left.parent.name) + "/"]  # its parent: emptied now
