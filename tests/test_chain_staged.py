"""``ml8s chain commit --payload`` on a local store stages the file while it hashes it (issue 22): one read of the
source, a FULL linked into place from the staged copy (no second copy, no second hash), the digests of the
bytes written (a source written to meanwhile refused), the staged copy gone afterwards; and the store
primitives under it (``LocalStore.stage``/``put_staged``, writeback hints) with their failure paths."""

from __future__ import annotations

import hashlib
import io
import os
from pathlib import Path
from typing import Any

import pytest
import safetensors.torch
from test_chain_checkpoint import MIXED, raw_file

import ml8s.chain.checkpoint as checkpoint
import ml8s.store._files as files
from ml8s.chain import (
    ChainStore,
    CheckpointBuilder,
    CommitMeta,
    RetryPolicy,
    check_safetensors,
    collect_garbage,
    commit_with_retry,
    hash_checkpoint,
    hashed_checkpoint,
    verify_chain,
)
from ml8s.chain.gc import TMP_GRACE_MIN_S
from ml8s.deltas import weights_hash
from ml8s.errors import ConfigError, IntegrityError, StoreError
from ml8s.store import LocalStore

MiB = 1024 * 1024


def _meta(sha256: str, path: Path, summary: Any) -> CommitMeta:
    """The commit metadata of a checkpoint file committed as it is (its sha256 names the run)."""
    return CommitMeta(
        run_id=sha256[:12],
        full_config_hash=sha256,
        artifact_root=str(path),
        architecture=summary.architecture,
        parameter_count=summary.parameter_count,
    )


def _commit(chain: ChainStore, path: Path, interval: int = 1) -> Any:
    summary = check_safetensors(str(path))
    with hashed_checkpoint(chain, str(path), summary, interval) as (source, digest):
        meta = _meta(source.sha256, path, summary)
        staged = source.staged

        def no_delta() -> Any:
            raise AssertionError("no DELTA is due on these chains")

        version = commit_with_retry(chain, CheckpointBuilder(source, digest, interval, no_delta), meta, RetryPolicy())
    return version, source, staged


def _tmp_files(chain: ChainStore) -> list[str]:
    return [info.key for info in chain.store.list(chain.key(".tmp"))]


class _Reads(io.FileIO):
    """Counts the bytes read per path (the module's ``open`` is replaced by it)."""

    seen: dict[str, int]

    def readinto(self, buffer: Any) -> int | None:
        got = super().readinto(buffer)
        self.seen[str(self.name)] = self.seen.get(str(self.name), 0) + (got or 0)
        return got


def test_full_commit_reads_the_source_once_and_links_the_staged_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Tensors out of name order: their weights hash comes from a second read of the staged copy, not the source."""
    path = raw_file(tmp_path / "w.safetensors", MIXED)
    seen: dict[str, int] = {}
    monkeypatch.setattr(_Reads, "seen", seen, raising=False)
    monkeypatch.setattr(checkpoint, "open", lambda p, mode, buffering: _Reads(p, "r"), raising=False)
    chain = ChainStore(LocalStore(str(tmp_path / "root")), "st")
    version, source, staged = _commit(chain, path)
    data = path.read_bytes()
    assert staged and source.sha256 == hashlib.sha256(data).hexdigest()
    assert seen.pop(str(path)) == len(data)  # the source: once
    (copy,) = seen  # the staged copy: only the tensors after the out-of-order one
    assert seen[copy] == 300_000 * 4 + 2 and copy.startswith(str(tmp_path / "root/ml8s_chain/st/.tmp/"))
    stored = Path(chain.store.root) / chain.version_key(version.version_dir, "payload", "model_native.safetensors")
    assert stored.read_bytes() == data and not os.path.exists(copy) and _tmp_files(chain) == []
    assert version.header.weights_hash == weights_hash(safetensors.torch.load_file(str(path)))
    report = verify_chain(chain)
    assert report.findings == () and report.head_counter == 1


def test_a_stored_payload_is_the_staged_inode_not_a_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    chain = ChainStore(LocalStore(str(tmp_path / "root")), "ino")
    path = raw_file(tmp_path / "w.safetensors", sorted(MIXED))
    linked: list[tuple[int, int]] = []
    put_staged = LocalStore.put_staged

    def spy(self: LocalStore, key: str, staged: str, **kwargs: Any) -> Any:
        result = put_staged(self, key, staged, **kwargs)
        linked.append((os.stat(staged).st_ino, os.stat(os.path.join(self.root, key)).st_ino))
        return result

    monkeypatch.setattr(LocalStore, "put_staged", spy)
    monkeypatch.setattr(LocalStore, "put_file_expecting", lambda *a, **k: pytest.fail("copied, not linked"))
    _commit(chain, path)
    assert len(linked) == 1 and linked[0][0] == linked[0][1]


def test_a_rerun_stages_and_removes_its_copy_and_commits_nothing(tmp_path: Path) -> None:
    chain = ChainStore(LocalStore(str(tmp_path / "root")), "again")
    path = raw_file(tmp_path / "w.safetensors", sorted(MIXED))
    first, _, _ = _commit(chain, path)
    second, _, _ = _commit(chain, path)
    assert second.block_hash == first.block_hash and chain.head().counter == 1 and _tmp_files(chain) == []


def test_a_delta_due_stages_nothing(tmp_path: Path) -> None:
    chain = ChainStore(LocalStore(str(tmp_path / "root")), "delta")
    path = raw_file(tmp_path / "w.safetensors", sorted(MIXED))
    _commit(chain, path, interval=1)
    summary = check_safetensors(str(path))
    with hashed_checkpoint(chain, str(path), summary, 3) as (source, _):
        assert (source.staged, source.path) == (False, str(path)) and _tmp_files(chain) == []
    with hashed_checkpoint(chain, str(path), summary, 1) as (source, _):  # the interval makes it a FULL
        assert source.staged and _tmp_files(chain) != []


def test_gc_with_grace_zero_keeps_a_commit_in_flight_s_staged_copy(tmp_path: Path) -> None:
    """``ml8s chain gc --grace-hours 0 --execute`` while a commit sat between staging its payload and its head
    swap deleted the staged copy: the commit then failed (STORE_ERROR, "vanished") and rolled back. A ``.tmp/``
    object now goes only once older than TMP_GRACE_MIN_S, unless the caller says no commit is in flight."""
    chain = ChainStore(LocalStore(str(tmp_path / "root")), "inflight")
    chain.init()
    path = raw_file(tmp_path / "w.safetensors", sorted(MIXED))
    summary = check_safetensors(str(path))
    with hashed_checkpoint(chain, str(path), summary, 1) as (source, digest):
        assert source.staged
        gc = collect_garbage(ChainStore(chain.store, chain.name), grace_s=0, dry_run=False)
        assert gc.items == () and gc.tmp_grace_s == TMP_GRACE_MIN_S
        assert os.path.exists(source.path) and [k for k in gc.kept_recent if k.startswith(chain.key(".tmp"))]
        meta = _meta(source.sha256, path, summary)
        version = commit_with_retry(chain, CheckpointBuilder(source, digest, 1, lambda: None), meta, RetryPolicy())
        assert version.counter == 1 and verify_chain(chain, payloads=True).ok
        # the caller's word that no commit is in flight: the grace as given applies to .tmp/ too
        forced = collect_garbage(ChainStore(chain.store, chain.name), grace_s=0, dry_run=False, allow_short_grace=True)
        assert [i.kind for i in forced.items if i.deleted] == ["stale_tmp"] and not os.path.exists(source.path)
    assert verify_chain(chain, payloads=True).ok


def test_a_source_written_to_while_read_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Same size, other bytes, mid-read: the times of the source tell, nothing is committed or left behind."""
    chain = ChainStore(LocalStore(str(tmp_path / "root")), "torn")
    path = raw_file(tmp_path / "w.safetensors", sorted(MIXED))
    os.utime(path, ns=(10**18, 10**18))  # a write now moves the modification time, however coarse the clock
    summary = check_safetensors(str(path))
    write = files.StagedWriter.write

    def tamper(self: files.StagedWriter, chunk: memoryview) -> None:
        write(self, chunk)
        with open(path, "r+b") as handle:
            handle.seek(-4, os.SEEK_END)
            handle.write(b"\x01\x02\x03\x04")

    monkeypatch.setattr(files.StagedWriter, "write", tamper)
    with pytest.raises(ConfigError, match="modified while it was read"):
        with hashed_checkpoint(chain, str(path), summary, 1):
            pytest.fail("hashed a torn read")
    assert _tmp_files(chain) == [] and chain.read_head() is None
    os.utime(path, ns=(10**18, 10**18))
    monkeypatch.setattr(checkpoint.os, "fstat", _later_fstat(path))
    with pytest.raises(ConfigError, match="modified while it was read"):  # no stage: the same check
        hash_checkpoint(str(path), summary)


def _later_fstat(path: Path) -> Any:
    """``os.fstat`` whose second look at ``path`` finds it written to since the first."""
    real, calls = os.fstat, []

    def fstat(fd: int) -> os.stat_result:
        info = real(fd)
        calls.append(fd)
        if len(calls) > 1:
            with open(path, "r+b") as handle:
                handle.write(handle.read(1))
            info = real(fd)
        return info

    return fstat


def test_a_full_disk_while_staging_is_a_store_error_and_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    chain = ChainStore(LocalStore(str(tmp_path / "root")), "full")
    path = raw_file(tmp_path / "w.safetensors", sorted(MIXED))

    init = files.StagedWriter.__init__

    def on_a_full_disk(self: files.StagedWriter, staged: str) -> None:
        init(self, staged)
        full = os.open("/dev/full", os.O_WRONLY)  # every write: ENOSPC
        os.dup2(full, self.fd)
        os.close(full)

    monkeypatch.setattr(files.StagedWriter, "__init__", on_a_full_disk)
    with pytest.raises(StoreError, match="no space left"):
        with hashed_checkpoint(chain, str(path), check_safetensors(str(path)), 1):
            pytest.fail("staged on a full disk")
    assert _tmp_files(chain) == []


# -- the store primitives ----------------------------------------------------------------------------
@pytest.fixture
def staged(tmp_path: Path) -> tuple[LocalStore, str, bytes]:
    store = LocalStore(str(tmp_path / "root"))
    data = os.urandom(3 * MiB + 5)
    with store.stage("c/.tmp/s") as writer:
        for start in range(0, len(data), MiB):
            writer.write(memoryview(data[start : start + MiB]))
    return store, writer.path, data


def test_put_staged_links_and_keeps_the_staged_file(staged: tuple[LocalStore, str, bytes]) -> None:
    store, path, data = staged
    digest = hashlib.sha256(data).hexdigest()
    store.put_if_absent("c/v/old", b"old")
    for key in ("c/v/a", "c/v/old"):  # a new key, and one replaced whole (as put_file_expecting does)
        result = store.put_staged(key, path, tmp_key="c/.tmp/l", sha256=digest, size=len(data))
        assert (result.sha256, result.size) == (digest, len(data)) and store.get(key) == data
    assert os.path.exists(path) and not store.exists("c/.tmp/l")


def test_put_staged_refuses_a_truncated_or_vanished_copy(staged: tuple[LocalStore, str, bytes]) -> None:
    store, path, data = staged
    digest = hashlib.sha256(data).hexdigest()
    os.truncate(path, len(data) - 1)
    with pytest.raises(IntegrityError, match=f"found {len(data) - 1}"):
        store.put_staged("c/v/a", path, tmp_key="c/.tmp/l", sha256=digest, size=len(data))
    os.unlink(path)
    with pytest.raises(StoreError, match="vanished"):
        store.put_staged("c/v/a", path, tmp_key="c/.tmp/l", sha256=digest, size=len(data))
    assert not store.exists("c/v/a")


def test_put_staged_copies_a_file_outside_its_root(tmp_path: Path) -> None:
    """Not staged by this store: copied and checked like put_file_expecting (a wrong hash lands nothing)."""
    store = LocalStore(str(tmp_path / "root"))
    outside = tmp_path / "elsewhere.bin"
    outside.write_bytes(b"x" * 1000)
    digest = hashlib.sha256(b"x" * 1000).hexdigest()
    store.put_staged("k", str(outside), tmp_key=".tmp/k", sha256=digest, size=1000)
    assert os.stat(os.path.join(store.root, "k")).st_ino != outside.stat().st_ino
    with pytest.raises(IntegrityError, match="changed since it was hashed"):
        store.put_staged("k2", str(outside), tmp_key=".tmp/k2", sha256="0" * 64, size=1000)
    assert not store.exists("k2")


def test_stage_removes_its_file_when_the_block_fails(tmp_path: Path) -> None:
    store = LocalStore(str(tmp_path / "root"))
    with pytest.raises(RuntimeError), store.stage("c/.tmp/s") as writer:
        writer.write(memoryview(b"partial"))
        raise RuntimeError("the caller's read failed")
    assert not os.path.exists(writer.path)


@pytest.mark.parametrize("hint", ["recorded", "none"])
def test_writeback_hints_cover_the_file_in_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, hint: str) -> None:
    """Each range written is handed to the writeback hint once, in order; without the hint the bytes are the same."""
    ranges: list[tuple[int, int]] = []
    recorder = None if hint == "none" else (lambda fd, offset, count, flags: ranges.append((offset, count)))
    monkeypatch.setattr(files, "_sync_file_range", lambda: recorder)
    monkeypatch.setattr(files, "_WRITEBACK", MiB)
    source = tmp_path / "src.bin"
    source.write_bytes(os.urandom(3 * MiB + 7))
    with open(source, "rb", buffering=0) as handle:
        digest, size = files.copy_hashed(str(tmp_path / "out.bin"), handle)
    assert (digest, size) == (hashlib.sha256(source.read_bytes()).hexdigest(), source.stat().st_size)
    assert (tmp_path / "out.bin").read_bytes() == source.read_bytes()
    assert ranges == ([] if hint == "none" else [(0, MiB), (MiB, MiB), (2 * MiB, MiB)])


def test_the_real_writeback_hint_is_harmless(tmp_path: Path) -> None:
    """On Linux the C library's sync_file_range is found and called; a bad descriptor is ignored (only a hint)."""
    files._sync_file_range.cache_clear()
    fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT)
    try:
        os.write(fd, b"y" * 4096)
        files.start_writeback(fd, 0, 4096)
        files.start_writeback(-1, 0, 4096)
    finally:
        os.close(fd)
    assert files._sync_file_range() is not None or os.uname().sysname != "Linux"
