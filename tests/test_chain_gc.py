"""Garbage collection: dry run by default, grace period, never anything reachable, audited, verified."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from test_chain_support import (  # noqa: F401  (fixtures)
    build,
    chain_fixture,
    local_root_fixture,
    meta,
    payload,
    version_path,
)

from ml8s.chain import ChainStore, ChainVersion, collect_garbage, gc, verify_chain
from ml8s.chain.commit import _seal, payload_files
from ml8s.errors import ChainCorruptionError

DAY = 24 * 3600.0


def crashed_loser(chain: ChainStore, parent: ChainVersion, name: str) -> ChainVersion:
    """A complete upload whose committer died before its head swap (or before its rollback finished)."""
    version = _seal(parent, meta(name, step=parent.global_step), payload_files(payload(name)))
    chain.write_version(version, payload(name), [])
    return version


def half_upload(local_root: Path, name: str = "v0000000002_1.0.1_abcdefabcdef") -> str:
    directory = version_path(local_root, name) / "payload"
    directory.mkdir(parents=True)
    (directory / "model.bin").write_bytes(b"x" * 10)
    return name


@pytest.fixture
def littered(chain: ChainStore, local_root: Path) -> tuple[list[ChainVersion], ChainVersion, str]:
    versions = build(chain, 3)
    orphan = crashed_loser(chain, versions[1], "loser")
    return versions, orphan, half_upload(local_root)


def test_dry_run_by_default(chain: ChainStore, littered: tuple[list[ChainVersion], ChainVersion, str]) -> None:
    before = chain.store.list("")
    report = collect_garbage(chain, grace_s=0)
    assert report.dry_run and {i.kind for i in report.items} == {"orphan", "incomplete"}
    assert not any(i.deleted for i in report.items) and report.bytes_freed == 0
    assert chain.store.list("") == before


def test_grace_period_is_respected(chain: ChainStore, littered: tuple[list[ChainVersion], ChainVersion, str]) -> None:
    report = collect_garbage(chain, dry_run=False)  # default grace: 24 h; everything is seconds old
    assert report.items == () and len(report.kept_recent) == 2
    report = collect_garbage(chain, dry_run=False, now=time.time() + DAY + 60)
    assert sorted(i.kind for i in report.items if i.deleted) == ["incomplete", "orphan"]


def test_deletes_garbage_keeps_the_chain(
    chain: ChainStore, littered: tuple[list[ChainVersion], ChainVersion, str]
) -> None:
    versions, orphan, partial = littered
    report = collect_garbage(chain, grace_s=0, dry_run=False)
    assert {i.path for i in report.items if i.deleted} == {orphan.version_dir, partial}
    assert report.bytes_freed > 0
    after = verify_chain(chain, strict_orphans=True)
    assert after.ok and after.chain == tuple(v.version_dir for v in versions) and after.incomplete == ()
    assert chain.list() == versions
    deleted = [e for e in chain.audit.events() if e.event == "gc_delete"]
    assert sorted(e.version_dir for e in deleted) == sorted([orphan.version_dir, partial])


def test_reachable_versions_are_never_candidates(chain: ChainStore) -> None:
    versions = build(chain, 3)
    report = collect_garbage(chain, grace_s=0, dry_run=False, now=time.time() + 100 * DAY)
    assert report.items == () and chain.list() == versions


def test_stale_tmp_objects(chain: ChainStore) -> None:
    build(chain, 1)
    chain.store.put_if_absent(chain.key(".tmp/w-123"), b"partial")
    report = collect_garbage(chain, grace_s=0, dry_run=False, now=time.time() + gc.TMP_GRACE_MIN_S + 60)
    assert [i.kind for i in report.items] == ["stale_tmp"] and chain.store.list(chain.key(".tmp")) == []


def test_keeps_what_is_no_version_directory(chain: ChainStore, local_root: Path) -> None:
    """An operator's note or backup under versions/ (no version directory name, no block.pb) was deleted as an
    ``incomplete`` version: no counter places it at or below the head, and ml8s never wrote it."""
    build(chain, 2)
    planted = [version_path(local_root, "NOTES.txt"), version_path(local_root, "backup-v1") / "model.bin"]
    planted[1].parent.mkdir()
    for path in planted:
        path.write_bytes(b"mine")
    half = half_upload(local_root, "v0000000001_1.0.0_abcdefabcdef")  # a lost race's leftover: garbage
    report = collect_garbage(chain, grace_s=0, dry_run=False, now=time.time() + 100 * DAY)
    assert [(i.path, i.deleted) for i in report.items] == [(half, True)]
    assert all(path.read_bytes() == b"mine" for path in planted)
    assert {k.split(":")[0] for k in report.kept} == {"NOTES.txt", "backup-v1"}


def test_two_gcs_at_once_record_one_deletion(
    chain: ChainStore, littered: tuple[list[ChainVersion], ChainVersion, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two GCs at once: the second deleted (and audited, ``gc_delete``) the directories the first had already
    deleted since its listing, so the trail and its report claimed deletions it never made."""
    delete_version = gc._delete_version
    ran: list[int] = []

    def beside(*args: Any) -> bool:
        if not ran:  # the other GC runs between this one's listing and its first deletion
            ran.append(0)
            other = collect_garbage(ChainStore(chain.store, chain.name), grace_s=0, dry_run=False)
            ran.append(sum(i.deleted for i in other.items))
        return delete_version(*args)

    monkeypatch.setattr(gc, "_delete_version", beside)
    report = collect_garbage(chain, grace_s=0, dry_run=False)
    assert ran == [0, 2] and [i.deleted for i in report.items] == [False, False] and report.bytes_freed == 0
    deletions = [e.version_dir for e in chain.audit.events() if e.event == "gc_delete"]
    assert sorted(deletions) == sorted(i.path for i in report.items)  # each once, by the other GC


def test_refuses_a_corrupted_chain(chain: ChainStore, local_root: Path) -> None:
    versions = build(chain, 3)
    (version_path(local_root, versions[2].version_dir) / "content_hash.txt").write_text("0" * 64 + "\n")
    crashed_loser(chain, versions[1], "loser")
    with pytest.raises(ChainCorruptionError, match="content_hash_txt"):
        collect_garbage(chain, grace_s=0, dry_run=False)
    assert len(verify_chain(chain).orphans) == 1  # nothing deleted
