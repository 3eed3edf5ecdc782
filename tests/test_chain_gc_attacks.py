"""GC that cannot be steered (issue 21, class 4): symbolic links, rolled-back heads with their evidence
deleted and mtimes aged, an anchor; and GC on a host whose clock runs ahead (issue 24, item 1)."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_chain_support import (  # noqa: F401  (fixtures)
    CHAIN,
    StoreSpec,
    build,
    meta,
    open_spec,
    payload,
    rgw_spec_fixture,
    set_head,
    version_path,
)

from ml8s.chain import ChainStore, ChainVersion, SigningKey, collect_garbage, make_anchor, paths, verify_chain
from ml8s.chain._util import utc_now
from ml8s.chain.commit import _seal, payload_files
from ml8s.chain.models import ChainHead
from ml8s.chain.wire import head_json
from ml8s.cli.args import hours_arg
from ml8s.errors import ChainCorruptionError, ConfigError, GcRefusedError, UnsafeObjectError
from ml8s.store import LocalStore

DAY = 86400.0
LONG_AGO = time.time() - 30 * DAY


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("pristine") / "root"
    build(ChainStore(LocalStore(str(root)), CHAIN), 3)
    return root


@pytest.fixture
def root(pristine: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "root"
    shutil.copytree(pristine, copy, symlinks=True)
    return copy


def open_chain(root: Path) -> ChainStore:
    return ChainStore(LocalStore(str(root)), CHAIN)


def chain_dir(root: Path) -> Path:
    return root / paths.ROOT / CHAIN


def files_under(path: Path) -> set[str]:
    return {str(p.relative_to(path)) for p in path.rglob("*") if p.is_file() or p.is_symlink()}


def age(path: Path) -> None:
    """Backdate every file and directory under ``path`` by a month (what ``touch -d`` does)."""
    for item in [path, *path.rglob("*")]:
        os.utime(item, (LONG_AGO, LONG_AGO), follow_symlinks=False)


def loser(chain: ChainStore, parent: ChainVersion, name: str) -> ChainVersion:
    """A complete upload that lost its race (or whose committer died before rolling it back)."""
    version = _seal(parent, meta(name, step=parent.global_step), payload_files(payload(name)))
    chain.write_version(version, payload(name), [])
    return version


def gc_cli(root: Path, *args: str, faketime: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "CHAIN_NAME"} | {"PIPELINE_ROOT_URI": str(root)}
    command = [str(Path(sys.executable).with_name("ml8s")), "chain", "gc", "--json", "--chain", CHAIN, *args]
    if faketime is not None:
        command = ["faketime", "-f", faketime, *command]
    return subprocess.run(command, env=env, capture_output=True, text=True, check=False, timeout=300)


# -- symbolic links --------------------------------------------------------------------------------
def test_tmp_linked_to_versions_deletes_nothing(root: Path) -> None:
    """``ln -s versions ml8s_chain/C/.tmp`` then ``gc --execute``: before, every version was deleted."""
    before = files_under(chain_dir(root) / paths.VERSIONS)
    (chain_dir(root) / paths.TMP).symlink_to(paths.VERSIONS)
    age(chain_dir(root) / paths.VERSIONS)
    done = gc_cli(root, "--execute", "--grace-hours", "0")
    assert done.returncode != 0 and "CHAIN_GC_REFUSED" in done.stderr and "Traceback" not in done.stderr
    assert ".tmp" in done.stderr
    assert files_under(chain_dir(root) / paths.VERSIONS) == before
    with pytest.raises(GcRefusedError):
        collect_garbage(open_chain(root), grace_s=0, dry_run=True)


def test_tmp_linked_outside_the_store(root: Path, tmp_path: Path) -> None:
    outside = tmp_path / "precious"
    outside.mkdir()
    (outside / "data.txt").write_text("keep me")
    age(outside)
    (chain_dir(root) / paths.TMP).symlink_to(outside)
    with pytest.raises(GcRefusedError, match="symbolic link"):
        collect_garbage(open_chain(root), grace_s=0, dry_run=False)
    assert (outside / "data.txt").read_text() == "keep me"


@pytest.mark.parametrize("where", ["payload", "version", "chain"])
def test_any_link_under_the_chain_refuses(root: Path, tmp_path: Path, where: str) -> None:
    chain = open_chain(root)
    head = chain.head()
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "x").write_bytes(b"x")
    link = {
        "payload": version_path(root, head.version_dir) / paths.PAYLOAD / "extra.bin",
        "version": chain_dir(root) / paths.VERSIONS / "v0000000001_9.9.9_abcdefabcdef",
        "chain": root / paths.ROOT / "other",
    }[where]
    link.symlink_to(outside if where != "payload" else outside / "x")
    if where == "chain":  # a link beside the chain is no business of this chain's GC
        assert collect_garbage(chain, grace_s=0, dry_run=False).items == ()
        return
    with pytest.raises(GcRefusedError):
        collect_garbage(chain, grace_s=0, dry_run=False)
    assert files_under(outside) == {"x"}


def test_fifo_under_the_chain_refuses(root: Path) -> None:
    os.mkfifo(chain_dir(root) / paths.TMP)
    with pytest.raises(GcRefusedError, match="FIFO"):
        collect_garbage(open_chain(root), grace_s=0, dry_run=False)


@pytest.mark.parametrize("where", [f"{paths.TMP}/upload-\\xff", f"{paths.VERSIONS}/v\\xff/block.pb"])
def test_a_name_that_is_no_utf8_refuses_not_crashes(root: Path, where: str) -> None:
    """Its gc_delete audit event could not be serialized: GC exited with INTERNAL_ERROR (nothing deleted)."""
    path = os.fsencode(chain_dir(root)) + b"/" + where.encode().replace(b"\\xff", b"\xff")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as handle:
        handle.write(b"x")
    with pytest.raises(GcRefusedError, match=r"\\xff.* or its name is no UTF-8"):
        collect_garbage(open_chain(root), grace_s=0, dry_run=False)
    assert os.path.exists(path)


def test_a_name_that_steers_the_terminal_is_printed_escaped(root: Path) -> None:
    """A UTF-8 name holding a C1 control (U+009B, CSI: what ESC [ starts) or a bidirectional override reached the
    operator's terminal raw in ``ml8s chain gc``'s report (JSON escapes only C0): now a JSON ``\\u`` escape, the
    report parsing to the same key."""
    name = "upload-\u009b2J\u0085\u202egnp.exe\u007f"
    (chain_dir(root) / paths.TMP).mkdir(exist_ok=True)
    (chain_dir(root) / paths.TMP / name).write_bytes(b"x")
    done = gc_cli(root)
    assert done.returncode == 0, done.stderr
    assert not any(ch in done.stdout for ch in "\u009b\u0085\u202e\u007f"), done.stdout
    assert json.loads(done.stdout)["kept_recent"] == [f"{paths.ROOT}/{CHAIN}/{paths.TMP}/{name}"]
    assert "\\u009b2J" in done.stdout


def test_an_empty_directory_named_in_no_utf8_is_reported_in_valid_json(root: Path) -> None:
    """GC refuses a file whose name is no UTF-8, but an empty directory so named is collected (nothing in it to
    audit): its byte reached stdout raw, so the report was no UTF-8 and no JSON reader took it."""
    empty = os.fsencode(chain_dir(root) / paths.VERSIONS) + b"/backup-\xff"
    os.mkdir(empty)
    done = subprocess.run(
        [str(Path(sys.executable).with_name("ml8s")), "chain", "gc", "--json", "--chain", CHAIN, "--grace-hours", "0"],
        env={k: v for k, v in os.environ.items() if k != "CHAIN_NAME"} | {"PIPELINE_ROOT_URI": str(root)},
        capture_output=True,
        check=False,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.decode("utf-8"))
    assert [i["path"] for i in report["items"]] == [f"{paths.ROOT}/{CHAIN}/{paths.VERSIONS}/backup-\udcff"]


@pytest.mark.parametrize("grace", ["nan", "-1", "1e308"])
def test_a_grace_period_that_is_nan_or_negative_deletes_nothing(root: Path, grace: str) -> None:
    """NaN compares false with every age: ``--grace-hours nan --execute`` deleted a commit's upload written a
    moment before, as garbage (and printed "grace_s": NaN, no JSON). ``--grace-hours 1e308`` passed as finite
    hours and failed later as "grace period inf s", a value the user never gave: now a usage error too."""
    upload = chain_dir(root) / paths.TMP / "upload-in-flight"
    upload.parent.mkdir(exist_ok=True)
    upload.write_bytes(b"x")
    with pytest.raises(ConfigError, match="expected a finite number of seconds >= 0"):
        collect_garbage(open_chain(root), grace_s=float(grace) * 3600, dry_run=False)
    with pytest.raises(argparse.ArgumentTypeError, match="expected a finite number of hours >= 0"):
        hours_arg(grace)
    assert upload.read_bytes() == b"x" and hours_arg("0") == 0.0


def test_delete_never_follows_a_link_swapped_in_after_the_check(root: Path, tmp_path: Path) -> None:
    """The race past GC's check: the store's own deletion stops at the link, nothing outside goes."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "victim").write_bytes(b"v")
    (chain_dir(root) / paths.TMP).symlink_to(outside)
    store = LocalStore(str(root))
    with pytest.raises(UnsafeObjectError, match="nothing followed or deleted"):
        store.delete(f"{paths.ROOT}/{CHAIN}/{paths.TMP}/victim")
    assert (outside / "victim").exists()
    assert store.irregular(f"{paths.ROOT}/{CHAIN}") == [f"{paths.ROOT}/{CHAIN}/{paths.TMP}"]


# -- a head rolled back, its evidence deleted, mtimes aged -----------------------------------------
def erase_evidence(root: Path, version: ChainVersion) -> None:
    """Delete the run record, claim and every audit event of ``version``."""
    for path in (chain_dir(root) / paths.RUNS).iterdir():
        if path.name.startswith(version.header.full_config_hash):
            path.unlink()
    for path in (chain_dir(root) / paths.AUDIT).iterdir():
        if version.version_dir in path.read_text():
            path.unlink()


def test_rolled_back_latest_version_is_kept(root: Path) -> None:
    """Before: GC deleted the real latest version (an orphan, nothing named it, aged)."""
    versions = open_chain(root).list()
    latest = versions[-1]
    set_head(root, versions[-2])
    erase_evidence(root, latest)
    age(chain_dir(root))
    chain = open_chain(root)
    report = collect_garbage(chain, grace_s=0, dry_run=False)
    assert report.items == () and any(k.startswith(latest.version_dir) for k in report.kept)
    assert version_path(root, latest.version_dir).joinpath(paths.BLOCK).exists()


def test_rolled_back_two_versions_are_kept(root: Path) -> None:
    versions = open_chain(root).list()
    set_head(root, versions[-3])
    for version in versions[-2:]:
        erase_evidence(root, version)
    age(chain_dir(root))
    chain = open_chain(root)
    with pytest.raises(ChainCorruptionError, match="fork"):  # an off-chain branch of two: a rolled-back head
        collect_garbage(chain, grace_s=0, dry_run=False)
    assert all(version_path(root, v.version_dir).exists() for v in versions)


def test_an_orphan_whose_parent_is_off_the_chain_is_kept(root: Path) -> None:
    """Its signed block names its parent, so that parent was a head once (a committer read it as the
    head): evidence of a rollback, even with the parent deleted and nothing else naming either."""
    chain = open_chain(root)
    versions = chain.list()  # genesis, v1, v2, v3 (head)
    gone = loser(chain, versions[1], "gone")  # a v2 that was the head once...
    child = loser(chain, gone, "child")  # ...with a v3 on top; both rolled back, v2 deleted
    shutil.rmtree(version_path(root, gone.version_dir))
    age(chain_dir(root))
    report = collect_garbage(open_chain(root), grace_s=0, dry_run=False)
    assert child.version_dir in {k.split(":", 1)[0] for k in report.kept} and report.items == ()
    assert version_path(root, child.version_dir).exists()


def test_anchor_keeps_what_it_names(root: Path) -> None:
    """Rolled back one, then a new version on top: the old latest looks like a lost race; the anchor says no."""
    chain = open_chain(root)
    versions = chain.list()
    anchor = make_anchor(chain, SigningKey.generate(), dt.timedelta(hours=24), utc_now())
    set_head(root, versions[-2])
    erase_evidence(root, versions[-1])
    open_chain(root).commit(payload("after"), meta("after", step=10_000))
    age(chain_dir(root))
    with pytest.raises(ChainCorruptionError, match="anchor_fork"):
        collect_garbage(open_chain(root), grace_s=0, dry_run=False, anchor=anchor)
    assert version_path(root, versions[-1].version_dir).exists()


def test_backdated_loser_is_judged_by_the_store_clock(root: Path) -> None:
    """``touch -d`` on a fresh orphan does not make it old: the store's change time cannot be set back."""
    chain = open_chain(root)
    fresh = loser(chain, chain.list()[-2], "fresh")
    age(version_path(root, fresh.version_dir))
    report = collect_garbage(chain, dry_run=False)  # 24 h grace
    assert fresh.version_dir in report.kept_recent and report.items == ()
    # Judged a day later by the store's own clock, it goes: it is a lost race's sibling.
    later = collect_garbage(chain, dry_run=False, now=time.time() + DAY + 60)
    assert [i.path for i in later.items if i.deleted] == [fresh.version_dir]


def test_an_upload_above_the_head_is_never_deleted(root: Path) -> None:
    """Whatever its age: a commit in flight uploads exactly there (counter = head + 1)."""
    chain = open_chain(root)
    inflight = loser(chain, chain.head(), "inflight")
    age(version_path(root, inflight.version_dir))
    report = collect_garbage(chain, grace_s=0, dry_run=False, now=time.time() + 365 * DAY)
    assert report.items == () and version_path(root, inflight.version_dir).exists()


# -- a clock ahead ----------------------------------------------------------------------------------
def test_gc_with_a_clock_two_days_ahead_keeps_fresh_garbage(root: Path) -> None:
    """``faketime -f +2d ml8s chain gc --execute``: before, a fresh loser and a live staging file went."""
    chain = open_chain(root)
    fresh = loser(chain, chain.list()[-2], "fresh")
    chain.store.put_if_absent(chain.key(paths.TMP, "w-live"), b"staging")
    done = gc_cli(root, "--execute", faketime="+2d")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["items"] == [] and fresh.version_dir in report["kept_recent"]
    assert report["clock_skew_s"] > DAY
    assert version_path(root, fresh.version_dir).exists() and (chain_dir(root) / paths.TMP / "w-live").exists()
    assert verify_chain(open_chain(root)).ok


def test_gc_grace_zero_keeps_a_fresh_staging_file_unless_told_no_commit_runs(root: Path) -> None:
    """``gc --grace-hours 0 --execute`` deleted a commit in flight's staged file (that commit then failed): a
    ``.tmp/`` object is now kept below an hour old, and said so; ``--allow-short-grace`` deletes it, audited."""
    chain = open_chain(root)
    chain.store.put_if_absent(chain.key(paths.TMP, "w-live"), b"staging")
    done = gc_cli(root, "--execute", "--grace-hours", "0")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["items"] == [] and report["tmp_grace_s"] == 3600 and report["grace_s"] == 0
    assert report["kept_recent"] == [chain.key(paths.TMP, "w-live")]
    assert (chain_dir(root) / paths.TMP / "w-live").exists()
    done = gc_cli(root, "--execute", "--grace-hours", "0", "--allow-short-grace")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert [(i["kind"], i["deleted"]) for i in report["items"]] == [("stale_tmp", True)] and report["tmp_grace_s"] == 0
    assert not (chain_dir(root) / paths.TMP / "w-live").exists()
    assert [e.detail for e in open_chain(root).audit.events() if e.event == "gc_delete"] == [
        f"stale_tmp {chain.key(paths.TMP, 'w-live')}: 7 B"
    ]


# -- on radosgw: no links there, but rollback-and-erase and the store's clock apply -----------------
def test_radosgw_rolled_back_and_erased_is_kept(rgw_spec: StoreSpec) -> None:
    store = open_spec(rgw_spec)
    chain = ChainStore(store, CHAIN)
    versions = build(chain, 2)
    latest = versions[-1]
    head = ChainHead(
        chain_name=CHAIN,
        counter=versions[-2].counter,
        block_hash=versions[-2].block_hash,
        version_dir=versions[-2].version_dir,
    )
    store.put_if_match(chain.key(paths.HEAD), head_json(head), store.checksum(chain.key(paths.HEAD)))
    for info in store.list(chain.key(paths.RUNS)) + store.list(chain.key(paths.AUDIT)):
        if info.key.startswith(chain.key(paths.RUNS, latest.header.full_config_hash)) or (
            info.key.startswith(chain.key(paths.AUDIT)) and latest.version_dir.encode() in store.get(info.key)
        ):
            store.delete(info.key)
    fresh = loser(chain, versions[-3], "fresh")  # a sibling of v1: a lost race, seconds old
    report = collect_garbage(ChainStore(store, CHAIN), dry_run=False, local_now=time.time())
    assert report.items == () and fresh.version_dir in report.kept_recent
    assert any(k.startswith(latest.version_dir) for k in report.kept)
    later = collect_garbage(ChainStore(store, CHAIN), grace_s=0, dry_run=False)
    assert [i.path for i in later.items if i.deleted] == [fresh.version_dir]
    assert store.exists(chain.version_key(latest.version_dir, paths.BLOCK))
