"""Local backend: atomic writes, conditional writes, sorted listing that reads no file, pruning deletes."""

from __future__ import annotations

import hashlib
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ml8s.errors import (
    IntegrityError,
    NotFoundError,
    PreconditionFailedError,
    RetryableStoreError,
    StoreError,
    UnsafeObjectError,
)
from ml8s.ops.runs import list_runs
from ml8s.ops.tmp_cleanup import cleanup_tmp
from ml8s.store import LocalStore, _walk, open_store
from ml8s.store import local as local_module


def test_put_atomic_moves_and_leaves_no_tmp(tmp_path: Path) -> None:
    store = LocalStore(str(tmp_path))
    result = store.put_atomic("run/a/b.json", b"{}", tmp_key="run/.tmp/b-w1.json")
    assert result.size == 2
    assert (tmp_path / "run" / "a" / "b.json").read_bytes() == b"{}"
    assert not (tmp_path / "run" / ".tmp" / "b-w1.json").exists()
    assert store.get("run/a/b.json") == b"{}"


def test_put_file_atomic_validates(tmp_path: Path) -> None:
    src = tmp_path / "src.bin"
    src.write_bytes(os.urandom(3 * 1024 * 1024 + 7))
    store = LocalStore(str(tmp_path / "root"))
    result = store.put_file_atomic("x/y.bin", str(src), tmp_key=".tmp/y-w.bin")
    assert result.size == src.stat().st_size
    assert store.get("x/y.bin") == src.read_bytes()


@pytest.mark.parametrize("size", [0, 5, 1024 * 1024 - 1, 1024 * 1024, 3 * 1024 * 1024 + 3])
def test_atomic_writes_of_every_size(tmp_path: Path, size: int) -> None:
    """Bytes and files alike, around the 1 MiB chunk boundary: exact bytes, size and sha256."""
    data = os.urandom(size)
    (tmp_path / "src.bin").write_bytes(data)
    store = LocalStore(str(tmp_path / "root"))
    expected = (size, hashlib.sha256(data).hexdigest())
    written = store.put_atomic("a/bytes", data, tmp_key=".tmp/a")
    copied = store.put_file_atomic("a/file", str(tmp_path / "src.bin"), tmp_key=".tmp/b")
    downloaded = store.download("a/file", str(tmp_path / "out.bin"))
    assert (written.size, written.sha256) == (copied.size, copied.sha256) == expected
    assert (downloaded.size, downloaded.sha256) == expected
    assert store.get("a/bytes") == store.get("a/file") == (tmp_path / "out.bin").read_bytes() == data


def test_integrity_failure_keeps_old_final(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = LocalStore(str(tmp_path))
    store.put_atomic("k", b"old", tmp_key=".tmp/k-1")
    import ml8s.store.local as local

    monkeypatch.setattr(local, "size_or_none", lambda path: 2)
    with pytest.raises(IntegrityError, match=r"wrote 3 bytes sha256 [0-9a-f]{64}, found 2 bytes"):
        store.put_atomic("k", b"new", tmp_key=".tmp/k-2")
    assert (tmp_path / "k").read_bytes() == b"old"
    assert not (tmp_path / ".tmp" / "k-2").exists()


def _grow_by_one_byte(path: str) -> None:
    with open(path, "ab") as handle:
        handle.write(b"x")


def test_tmp_file_changed_before_the_rename_is_caught(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Between the fsync and the rename, a tmp file cut short, grown or removed by someone else fails the write
    (its size no longer is what was written and hashed; a removed one is retryable), and the old final stays."""
    import ml8s.store.local as local

    store = LocalStore(str(tmp_path / "root"))
    store.put_atomic("k", b"old", tmp_key=".tmp/k")
    src = tmp_path / "src.bin"
    src.write_bytes(os.urandom(9 * 1024 * 1024))
    damage: list[Callable[[str], None]] = [
        lambda path: os.truncate(path, 4096),
        _grow_by_one_byte,
        os.unlink,
    ]

    def then_damage(real: Callable[[str, Any], tuple[str, int]]) -> Callable[[str, Any], tuple[str, int]]:
        def write(target: Any, source: Any) -> tuple[str, int]:
            result = real(target, source)
            damage[0](target.path)
            return result

        return write

    # bytes are written by write_file, a file's contents by copy_hashed: both are checked the same way
    monkeypatch.setattr(local, "write_file", then_damage(local.write_file))
    monkeypatch.setattr(local, "copy_hashed", then_damage(local.copy_hashed))
    with pytest.raises(IntegrityError, match=r"wrote 9437184 bytes sha256 [0-9a-f]{64}, found 4096 bytes"):
        store.put_file_atomic("k", str(src), tmp_key=".tmp/k")
    damage.pop(0)
    with pytest.raises(IntegrityError, match=r"wrote 10485760 bytes .* found 10485761 bytes"):
        store.put_atomic("k", bytes(10 * 1024 * 1024), tmp_key=".tmp/k")
    damage.pop(0)
    with pytest.raises(RetryableStoreError, match=r"\.tmp/k vanished before it was checked"):
        store.put_atomic("k", b"fresh", tmp_key=".tmp/k")
    assert store.get("k") == b"old" and not (tmp_path / "root" / ".tmp" / "k").exists()


def test_put_if_absent(tmp_path: Path) -> None:
    store = LocalStore(str(tmp_path))
    assert store.put_if_absent("m/success.marker", b"") is True
    assert store.put_if_absent("m/success.marker", b"x") is False
    assert store.get("m/success.marker") == b""


def test_put_if_match(tmp_path: Path) -> None:
    store = LocalStore(str(tmp_path))
    token = store.put_if_match("head", b"1", None)
    with pytest.raises(PreconditionFailedError):
        store.put_if_match("head", b"2", None)
    token2 = store.put_if_match("head", b"2", token)
    with pytest.raises(PreconditionFailedError, match="expected version"):
        store.put_if_match("head", b"3", token)
    assert store.get_versioned("head").token == token2


def _lock_path(root: Path, key: str) -> Path:
    return root / local_module.LOCK_DIR / (hashlib.sha256(key.encode()).hexdigest()[:32] + ".lock")


@pytest.mark.parametrize("target", ["dangling", "a-file"])
def test_a_link_planted_as_a_key_lock_is_refused_not_followed(tmp_path: Path, target: str) -> None:
    """A key's lock file linked out of the store was opened through the link: a dangling one created the file it
    named (anywhere this user may write), a file's was opened for writing. Now STORE_ERROR, nothing written."""
    root, elsewhere = tmp_path / "root", tmp_path / "elsewhere"
    if target == "a-file":
        elsewhere.write_bytes(b"precious")
    lock = _lock_path(root, "ml8s_chain/c/chain.json")
    lock.parent.mkdir(parents=True)
    lock.symlink_to(elsewhere)
    store = LocalStore(str(root))
    with pytest.raises(StoreError, match=r"cannot lock file://.*/chain\.json: .*\.lock: Too many levels of symbolic"):
        store.put_if_match("ml8s_chain/c/chain.json", b"{}", None)
    assert not (root / "ml8s_chain").exists() and lock.is_symlink()
    assert (elsewhere.read_bytes() == b"precious") if target == "a-file" else not elsewhere.exists()


def test_a_file_where_the_lock_directory_belongs_is_a_store_error(tmp_path: Path) -> None:
    """Was the OSError of makedirs, an INTERNAL_ERROR."""
    (tmp_path / local_module.LOCK_DIR).write_bytes(b"")
    with pytest.raises(
        UnsafeObjectError, match=r"cannot lock file://.*/head under file://.*/\.ml8s-locks: a regular file; expected"
    ):
        LocalStore(str(tmp_path)).put_if_match("head", b"1", None)


def test_a_linked_lock_directory_is_refused_and_nothing_lands_where_it_points(tmp_path: Path) -> None:
    """The root's lock directory linked out of the store: every key's lock file was made where it pointed (a
    directory outside the store, or one a dangling link named), and left there."""
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (root / local_module.LOCK_DIR).symlink_to(outside)
    store = LocalStore(str(root))
    with pytest.raises(UnsafeObjectError, match=r"/\.ml8s-locks: a symbolic link; expected the store's lock"):
        store.put_if_match("head", b"1", None)
    assert os.listdir(outside) == [] and sorted(os.listdir(root)) == [local_module.LOCK_DIR]
    (root / local_module.LOCK_DIR).unlink()
    (root / local_module.LOCK_DIR).symlink_to(tmp_path / "absent")  # dangling: makedirs would have made it
    with pytest.raises(UnsafeObjectError):
        store.put_if_match("head", b"1", None)
    assert not (tmp_path / "absent").exists()


def test_a_fifo_planted_as_a_key_lock_does_not_hang_a_write(tmp_path: Path) -> None:
    lock = _lock_path(tmp_path, "head")
    lock.parent.mkdir()
    os.mkfifo(lock)
    done: list[str] = []
    writer = threading.Thread(target=lambda: done.append(LocalStore(str(tmp_path)).put_if_match("head", b"1", None)))
    writer.daemon = True
    writer.start()
    writer.join(timeout=10)
    assert done == [hashlib.sha256(b"1").hexdigest()], "put_if_match waited on a FIFO for a writer"


def test_compare_and_swap_loses_no_update_under_racing_writers(tmp_path: Path) -> None:
    """The key's lock makes check-then-replace one step: writers racing on one key lose no increment (each
    takes its own lock, so threads exclude each other as processes do; without it most increments were lost)."""
    store = LocalStore(str(tmp_path))
    store.put_if_match("counter", b"0", None)
    errors: list[BaseException] = []

    def increment(times: int) -> None:
        try:
            for _ in range(times):
                while True:
                    seen = store.get_versioned("counter")
                    try:
                        store.put_if_match("counter", str(int(seen.data) + 1).encode(), seen.token)
                        break
                    except PreconditionFailedError:
                        pass  # beaten: read the new value and try again
        except BaseException as exc:  # collected: a thread's failure must fail the test
            errors.append(exc)

    racers = [threading.Thread(target=increment, args=(10,)) for _ in range(4)]
    for racer in racers:
        racer.start()
    for racer in racers:
        racer.join()
    assert errors == [] and store.get("counter") == b"40"


def test_listing_sorted_and_missing(tmp_path: Path) -> None:
    store = open_store(f"file://{tmp_path}")
    for key in ["b/2", "a/1", "b/10", "a/.hidden"]:
        store.put_atomic(key, key.encode(), tmp_key=f".tmp/{key.replace('/', '_')}")
    keys = [info.key for info in store.list("") if not info.key.startswith(".tmp")]
    assert keys == sorted(keys) == ["a/.hidden", "a/1", "b/10", "b/2"]
    with pytest.raises(NotFoundError):
        store.get("nope")
    store.delete("nope")


def test_get_if_match(tmp_path: Path) -> None:
    store = LocalStore(str(tmp_path))
    store.put_atomic("k", b"v1", tmp_key=".tmp/k-1")
    token = store.get_versioned("k").token
    assert store.get("k", if_match=token) == b"v1"
    store.put_atomic("k", b"v2", tmp_key=".tmp/k-2")
    with pytest.raises(PreconditionFailedError, match="changed"):
        store.get("k", if_match=token)


def test_checksum_streams_the_file(tmp_path: Path) -> None:
    store = LocalStore(str(tmp_path))
    store.put_atomic("a/k", b"bytes", tmp_key=".tmp/k")
    assert store.checksum("a/k") == hashlib.sha256(b"bytes").hexdigest() == store.get_versioned("a/k").token
    assert [info.checksum for info in store.list("a")] == [None]
    (tmp_path / "a" / "dir").mkdir()
    with pytest.raises(StoreError, match="cannot read"):
        store.checksum("a/dir")


def test_digest_reads_a_regular_file_only(tmp_path: Path) -> None:
    """Finalization's streamed check never follows a link, nor waits on a FIFO."""
    store = LocalStore(str(tmp_path))
    store.put_atomic("a/k", b"bytes", tmp_key=".tmp/k")
    os.symlink(tmp_path / "a" / "k", tmp_path / "a" / "alias")
    os.mkfifo(tmp_path / "a" / "fifo")
    for key, what in (("a/alias", "symbolic link"), ("a/fifo", "FIFO")):
        with pytest.raises(StoreError, match=what):
            store.digest(key)
    assert store.digest("a/k").sha256 == hashlib.sha256(b"bytes").hexdigest()


def test_listing_leaves_out_what_is_no_regular_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Stray entries (a FIFO, dangling, looping and directory links, the lock directory) are neither listed nor
    opened."""
    store = LocalStore(str(tmp_path))
    store.put_atomic("d/real", b"x", tmp_key=".tmp/r")
    os.mkfifo(tmp_path / "d" / "fifo")  # opening it would block the listing forever
    os.symlink(tmp_path / "nowhere", tmp_path / "d" / "dangling")
    os.symlink(tmp_path / "d", tmp_path / "loop")
    os.symlink(tmp_path / "d" / "real", tmp_path / "d" / "alias")
    os.symlink("self", tmp_path / "d" / "self")  # a loop: was STORE_ERROR 'cannot list', of `runs list` too
    store.get_versioned("d/real")  # creates the lock directory
    monkeypatch.setattr("builtins.open", _refuse)
    assert [(i.key, i.size) for i in store.list("")] == [("d/alias", 1), ("d/real", 1)]
    assert store.list("d/fifo") == [] and store.list("d/dangling") == [] and store.list("d/real/x") == []
    assert store.list("d/self") == [] and store.list("d/self/x") == []
    assert [i.key for i in store.list("d/real/")] == ["d/real"]


def _refuse(file: object, *args: object, **kwargs: object) -> object:
    raise PermissionError(13, "opened where only a listing was expected", str(file))


def test_operator_listings_read_no_artifact(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`runs list` and `tmp-cleanup` read a run's snapshot and manifest, never its (large) artifacts."""
    run = "0123456789ab"
    store = LocalStore(str(tmp_path))
    for rel in ("config_snapshot.json", "manifest.json", "model/model.onnx", "success.marker", ".tmp/x.bin"):
        store.put_atomic(f"ml8s_training_runs/{run}/{rel}", b"{}", tmp_key=".tmp/w")
    opened: list[str] = []
    real_read = local_module.read_regular

    def only_records(path: str, uri: str, *, max_bytes: int | None, dir_fd: int | None = None) -> bytes:
        opened.append(os.path.basename(path))
        if not path.endswith(".json"):
            return bytes(_refuse(path))
        return real_read(path, uri, max_bytes=max_bytes, dir_fd=dir_fd)

    monkeypatch.setattr("builtins.open", _refuse)
    monkeypatch.setattr(local_module, "read_regular", only_records)
    assert [(e.run_id, e.status, e.files) for e in list_runs(store)] == [(run, "complete", 5)]
    assert [
        e.uri for e in cleanup_tmp(store, 0, dry_run=True, now=time.time() + 1, allow_short_grace=True).removed
    ] == [store.uri(f"ml8s_training_runs/{run}/.tmp/x.bin")]
    # and tmp-cleanup's own record of first sightings (ml8s/store/sightings.py), absent here
    assert sorted(opened) == ["config_snapshot.json", "manifest.json", "ml8s-tmp-cleanup-seen.json"]


def test_conditional_writes_stage_under_the_root_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Never a staging file beside the target; a crash's leftover is a tmp entry the cleanup removes."""
    store = LocalStore(str(tmp_path))
    moves: list[tuple[str, list[str]]] = []
    real_link, real_replace = os.link, os.replace

    def watch(real: Callable[..., None]) -> Callable[..., None]:
        def move(src: str, dst: str, *, src_dir_fd: int, dst_dir_fd: int, **kwargs: bool) -> None:
            # relative to the directories walked (ml8s/store/_tree.py): where the source is, what the target's holds
            moves.append((os.readlink(f"/proc/self/fd/{src_dir_fd}"), sorted(os.listdir(dst_dir_fd))))
            real(src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd, **kwargs)

        return move

    monkeypatch.setattr(os, "link", watch(real_link))
    monkeypatch.setattr(os, "replace", watch(real_replace))
    assert store.put_if_absent("runs/r/success.marker", b"")
    token = store.put_if_match("claims/c.json", b"1", None)
    store.put_if_match("claims/c.json", b"2", token)
    monkeypatch.undo()
    assert moves == [(str(tmp_path / ".tmp"), []), (str(tmp_path / ".tmp"), []), (str(tmp_path / ".tmp"), ["c.json"])]
    assert os.listdir(tmp_path / ".tmp") == []
    stale, young = tmp_path / ".tmp" / "success.marker.1.dead.new", tmp_path / ".tmp" / "c.json.2.live.new"
    for path, age_days in ((stale, 8), (young, 0)):
        path.write_bytes(b"")
        os.utime(path, (time.time() - age_days * 86400,) * 2)
    # a ctime cannot be set back, and the age is measured from it too: the listing takes the backdated mtime
    monkeypatch.setattr(_walk, "changed", lambda info: info.st_mtime)
    report = cleanup_tmp(store, 7)
    assert [e.uri for e in report.removed] == [store.uri(".tmp/success.marker.1.dead.new")] and report.kept == 1
    assert not stale.exists() and young.exists()


def test_conditional_writes_never_stage_through_a_linked_root_tmp(tmp_path: Path) -> None:
    """The root's ``.tmp`` linked out of the store: put_if_absent (a GC's clock probe, its audit events, a run's
    marker) and put_if_match wrote their staging file where it pointed, and left it there on a crash."""
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (root / ".tmp").symlink_to(outside)
    store = LocalStore(str(root))
    with pytest.raises(UnsafeObjectError, match=r"/\.tmp: a symbolic link; expected the store's staging directory"):
        store.put_if_absent("ml8s_chain/c/.tmp/probe", b"")
    with pytest.raises(UnsafeObjectError):
        store.put_if_match("ml8s_chain/c/chain.json", b"{}", None)
    assert os.listdir(outside) == [] and not (root / "ml8s_chain").exists()
    (root / ".tmp").unlink()
    assert store.put_if_absent("ml8s_chain/c/.tmp/probe", b"")  # absent: created as ever


def test_delete_removes_empty_directories_up_to_the_root(tmp_path: Path) -> None:
    store = LocalStore(str(tmp_path / "root"))
    store.put_atomic("a/b/c/k1", b"1", tmp_key="a/.tmp/k1")
    store.put_atomic("a/b/k2", b"2", tmp_key="a/.tmp/k2")
    store.delete("a/b/c/k1")
    assert sorted(os.listdir(tmp_path / "root" / "a")) == [".tmp", "b"]
    assert os.listdir(tmp_path / "root" / "a" / "b") == ["k2"]  # c/ went, b/ holds k2
    store.delete("a/b/k2")
    assert os.listdir(tmp_path / "root" / "a") == [".tmp"]  # b/ went, a/ holds the (empty) .tmp/
    store.delete("a/b/k2")  # missing: not an error
    (tmp_path / "root" / "a" / ".tmp").rmdir()
    store.put_atomic("top", b"t", tmp_key=".tmp/t")
    store.delete("top")
    assert (tmp_path / "root").is_dir()  # never the root itself
    with pytest.raises(StoreError, match="cannot delete"):
        store.delete("")


def test_concurrent_deletes_and_writes_in_shared_directories(tmp_path: Path) -> None:
    """Deletes prune directories that other writers are about to use: every write still lands."""
    store = LocalStore(str(tmp_path))
    errors: list[BaseException] = []

    def worker(n: int) -> None:
        try:
            for i in range(60):
                key = f"shared/deep/dir/w{n}-{i}"
                if i % 3 == 0:
                    assert store.put_if_absent(key, b"x")
                elif i % 3 == 1:
                    store.put_if_match(key, b"x", None)
                else:
                    store.put_atomic(key, b"x", tmp_key=f"shared/.tmp/w{n}")
                assert store.get(key) == b"x"
                store.delete(key)
        except BaseException as exc:  # collected: a thread's failure must fail the test
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert store.list("shared") == []
