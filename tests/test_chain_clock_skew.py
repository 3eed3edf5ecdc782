"""Clocks (issue 24, items 1-2): a GC or tmp-cleanup on a host whose clock runs ahead, a commit whose
version is deleted around its head swap, an anchor issued by a clock a year ahead."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from test_chain_support import CHAIN, HookStore, build, meta, payload

from ml8s.chain import ChainStore, Follower, SigningKey, local_file, make_anchor, paths, verify_chain
from ml8s.chain._util import utc_now
from ml8s.chain.anchor import ISSUE_TOLERANCE
from ml8s.errors import ChainFrozenError, CommitDamagedError, RetryableStoreError, StoreError
from ml8s.ops.tmp_cleanup import cleanup_tmp
from ml8s.store import LocalStore, WriteResult
from ml8s.store._tree import Slot, Tree

RUN = "abcdef012345"


def ml8s(root: Path, *args: str, faketime: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "CHAIN_NAME"} | {"PIPELINE_ROOT_URI": str(root)}
    command = [str(Path(sys.executable).with_name("ml8s")), *args]
    if faketime is not None:
        command = ["faketime", "-f", faketime, *command]
    return subprocess.run(command, env=env, capture_output=True, text=True, check=False, timeout=300)


# -- the committer checks its version around the head swap -----------------------------------------
class Sabotage(HookStore):
    """Deletes a version's files (all but block.pb) between its upload and its head swap (``when="before"``:
    as its "sealed" audit event is written) or just after the swap, as a GC judging age by a clock days
    ahead did; ``refuse`` makes re-creating keys containing it fail once something was deleted."""

    def __init__(self, inner: LocalStore, when: str, refuse: str = "") -> None:
        super().__init__(inner, lambda key, data, token: None)
        self.root, self.when, self.refuse = inner.root, when, refuse
        self.victims: list[str] = []

    def _wipe(self, version_dir: str) -> None:
        base = Path(self.root) / paths.ROOT / CHAIN / paths.VERSIONS / version_dir
        for path in sorted(base.rglob("*"), reverse=True):
            if path.is_file() and path.name != paths.BLOCK:
                path.unlink()
                self.victims.append(path.name)

    def put_if_match(self, key: str, data: bytes, token: str | None) -> str:
        new = super().put_if_match(key, data, token)
        if self.when == "after" and key.endswith(paths.HEAD):
            self._wipe(json.loads(data)["version_dir"])
        return new

    def put_if_absent(self, key: str, data: bytes) -> bool:
        if self.refuse and self.refuse in key and self.victims:
            raise StoreError(f"refused: {key}")
        created = self.inner.put_if_absent(key, data)
        if self.when == "before" and f"/{paths.AUDIT}/" in key and json.loads(data)["event"] == "sealed":
            self._wipe(json.loads(data)["version_dir"])
        return created

    def put_file_expecting(self, key: str, path: str, *, tmp_key: str, sha256: str, size: int) -> WriteResult:
        return self.inner.put_file_expecting(key, path, tmp_key=tmp_key, sha256=sha256, size=size)


@pytest.mark.parametrize("when", ["before", "after"])
def test_a_version_deleted_around_the_swap_is_restored(tmp_path: Path, when: str) -> None:
    """Before: the commit returned version 2 while chain.json named a version whose files were gone."""
    local = LocalStore(str(tmp_path / "root"))
    build(ChainStore(local, CHAIN), 1)
    store = Sabotage(local, when)
    version = ChainStore(store, CHAIN).commit(payload("v2"), meta("v2", step=20))
    assert version.counter == 2 and store.victims
    assert verify_chain(ChainStore(local, CHAIN)).ok
    assert ChainStore(local, CHAIN).fetch_payload(version, "model.bin") == payload("v2")["model.bin"]
    committed = [e for e in ChainStore(local, CHAIN).audit.events() if e.event == "committed"][-1]
    assert (when == "after") == ("restored" in committed.detail)


def test_a_damaged_version_is_never_reported_as_committed(tmp_path: Path) -> None:
    local = LocalStore(str(tmp_path / "root"))
    build(ChainStore(local, CHAIN), 1)
    store = Sabotage(local, "after", refuse="payload/")
    with pytest.raises(CommitDamagedError, match="no longer intact"):
        ChainStore(store, CHAIN).commit(payload("v2"), meta("v2", step=20))


def test_a_local_file_payload_deleted_before_the_swap_is_restored(tmp_path: Path) -> None:
    local = LocalStore(str(tmp_path / "root"))
    build(ChainStore(local, CHAIN), 1)
    source = tmp_path / "model.bin"
    source.write_bytes(b"w" * 4096)
    version = ChainStore(Sabotage(local, "before"), CHAIN).commit({"model.bin": local_file(str(source))}, meta("f"))
    assert ChainStore(local, CHAIN).fetch_payload(version, "model.bin") == source.read_bytes()


def test_a_staging_file_deleted_under_a_writer_is_named(tmp_path: Path) -> None:
    """Before: INTEGRITY_ERROR 'read back None bytes' (as if the file changed); now a retryable error that
    says a cleanup deleted it, which commit_with_retry retries."""

    class Vanishing(LocalStore):
        # the check before the rename (a size check) that put_file_atomic and put_file_expecting both make
        def _move(self, tree: Tree, key: str, tmp: Slot, tmp_key: str, digest: str, size: int) -> WriteResult:
            tmp.unlink()
            return super()._move(tree, key, tmp, tmp_key, digest, size)

    source = tmp_path / "f.bin"
    source.write_bytes(b"x" * 100)
    store = Vanishing(str(tmp_path / "root"))
    with pytest.raises(RetryableStoreError, match="vanished before it was checked"):
        store.put_file_atomic("a/b.bin", str(source), tmp_key=".tmp/w-1")
    digest = hashlib.sha256(source.read_bytes()).hexdigest()
    with pytest.raises(RetryableStoreError, match="vanished before it was checked"):
        store.put_file_expecting("a/b.bin", str(source), tmp_key=".tmp/w-2", sha256=digest, size=100)
    assert not store.exists("a/b.bin")


# -- tmp-cleanup and GC with a clock ahead ---------------------------------------------------------
def test_tmp_cleanup_with_a_clock_two_days_ahead(tmp_path: Path) -> None:
    """``faketime -f +2d ml8s tmp-cleanup --older-than-days 1``: before, a live run's staging file went."""
    root = tmp_path / "root"
    live = root / "ml8s_training_runs" / RUN / ".tmp" / "features-w1.parquet"
    live.parent.mkdir(parents=True)
    live.write_bytes(b"live")
    done = ml8s(root, "tmp-cleanup", "--older-than-days", "1", "--root", str(root), faketime="+2d")
    assert done.returncode == 0, done.stderr
    assert live.exists() and "removed 0 tmp entries" in done.stdout
    later = cleanup_tmp(LocalStore(str(root)), 1, now=live.stat().st_mtime + 2 * 86400)
    assert [e.uri.rsplit("/", 1)[1] for e in later.removed] == ["features-w1.parquet"]


COMMITS = 8
GC_LOOP = """
import pathlib, sys
from ml8s.chain import ChainStore, collect_garbage
from ml8s.errors import Ml8sError
from ml8s.store import LocalStore
root, chain_name, stop = sys.argv[1:4]
while not pathlib.Path(stop).exists():
    try:
        collect_garbage(ChainStore(LocalStore(root), chain_name), dry_run=False)
    except Ml8sError as exc:
        print(exc, file=sys.stderr)
"""


def test_gc_loop_ahead_while_committing(tmp_path: Path) -> None:
    """The issue's reproduction: GC (default grace, 24 h) in a loop under ``faketime -f +2d`` while commits
    run. Before: uploads deleted before their swap, staging files deleted under the writer. Now every
    commit ends intact: the chain verifies and every payload is there."""
    root, stop = tmp_path / "root", tmp_path / "stop"
    chain = ChainStore(LocalStore(str(root)), CHAIN)
    chain.init()
    command = ["faketime", "-f", "+2d", sys.executable, "-c", GC_LOOP, str(root), CHAIN, str(stop)]
    with open(tmp_path / "gc.err", "w") as errors:
        gc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=errors)
        try:
            sources = []
            for i in range(COMMITS):
                source = tmp_path / f"m{i}.bin"
                source.write_bytes(bytes([i]) * (4 * 1024 * 1024))
                sources.append(source)
                files = {f"part{p}.bin": local_file(str(source)) for p in range(4)} | {
                    "model.bin": local_file(str(source))
                }
                chain.commit(files, meta(f"loop{i}"))
        finally:
            stop.touch()
            gc.wait(timeout=300)
    report = verify_chain(ChainStore(LocalStore(str(root)), CHAIN))
    assert report.ok and report.head_counter == COMMITS, report.findings
    reader = ChainStore(LocalStore(str(root)), CHAIN)
    for version, source in zip(reader.list()[1:], sources, strict=True):
        assert reader.fetch_payload(version, "model.bin") == source.read_bytes()
    assert "Traceback" not in (tmp_path / "gc.err").read_text()


# -- anchors from the future -----------------------------------------------------------------------
@pytest.fixture(scope="module")
def anchored(tmp_path_factory: pytest.TempPathFactory) -> tuple[ChainStore, SigningKey]:
    chain = ChainStore(LocalStore(str(tmp_path_factory.mktemp("anchored"))), CHAIN)
    build(chain, 1)
    return chain, SigningKey.generate()


@pytest.mark.parametrize(
    ("ahead", "flagged"),
    [(dt.timedelta(days=365), True), (ISSUE_TOLERANCE + dt.timedelta(seconds=5), True), (dt.timedelta(0), False)],
)
def test_an_anchor_from_the_future_is_a_finding(
    anchored: tuple[ChainStore, SigningKey], ahead: dt.timedelta, flagged: bool
) -> None:
    """Before: a year-ahead anchor verified, and would not expire for a year: a frozen head went unseen."""
    chain, key = anchored
    now = utc_now()
    anchor = make_anchor(chain, key, dt.timedelta(hours=24), now + ahead)
    assert ("anchor_future" in verify_chain(chain, anchor=anchor, now=now).checks) is flagged
    clock: Callable[[], dt.datetime] = lambda: now  # noqa: E731
    follower = Follower(chain, anchor=anchor, clock=clock)
    if flagged:
        with pytest.raises(ChainFrozenError, match="in the future"):
            follower.poll()
    else:
        follower.poll()  # the anchored head is the head: nothing new, and no refusal
        assert follower.last is not None and follower.last.counter == chain.head().counter


def test_an_anchor_issued_within_the_tolerance_is_fine(anchored: tuple[ChainStore, SigningKey]) -> None:
    chain, key = anchored
    now = utc_now()
    anchor = make_anchor(chain, key, dt.timedelta(hours=24), now + ISSUE_TOLERANCE - dt.timedelta(seconds=1))
    assert verify_chain(chain, anchor=anchor, now=now).ok
