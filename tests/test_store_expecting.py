"""``Store.put_file_expecting`` (issue 12, commit speed; issue 22, one pass): a file the caller hashed is
stored by a copy hashed from the buffers it writes, never read back (local backend), or through
put_file_atomic (the default); either way only bytes equal to the caller's sha256 and size reach the key."""

from __future__ import annotations

import errno
import hashlib
import os
from pathlib import Path

import pytest
from test_chain_support import HookStore

import ml8s.store.local as local
from ml8s.errors import IntegrityError, NotFoundError, StoreError
from ml8s.store import LocalStore

MiB = 1024 * 1024


def _source(tmp_path: Path, size: int) -> tuple[Path, str]:
    data = os.urandom(size)
    path = tmp_path / "src.bin"
    path.write_bytes(data)
    return path, hashlib.sha256(data).hexdigest()


@pytest.mark.parametrize("size", [0, 5, MiB - 1, 3 * MiB + 3])
def test_stores_exact_bytes_hashing_once(tmp_path: Path, size: int, monkeypatch: pytest.MonkeyPatch) -> None:
    src, digest = _source(tmp_path, size)
    store = LocalStore(str(tmp_path / "root"))
    passes: list[str] = []
    real = local.sha256_or_none
    monkeypatch.setattr(local, "sha256_or_none", lambda path: passes.append(path) or real(path))
    result = store.put_file_expecting("a/f.bin", str(src), tmp_key=".tmp/f", sha256=digest, size=size)
    assert (result.key, result.size, result.sha256) == ("a/f.bin", size, digest)
    assert store.get("a/f.bin") == src.read_bytes()
    assert passes == []  # no read-back: the copy hashed what it wrote
    assert not list((tmp_path / "root" / ".tmp").iterdir())


def test_file_changed_since_hashed_is_refused(tmp_path: Path) -> None:
    src, digest = _source(tmp_path, 2 * MiB)
    store = LocalStore(str(tmp_path / "root"))
    store.put_atomic("a/f.bin", b"old", tmp_key=".tmp/old")
    with src.open("r+b") as handle:  # one byte changed after hashing, same size
        handle.seek(MiB)
        byte = handle.read(1)
        handle.seek(MiB)
        handle.write(bytes([byte[0] ^ 0xFF]))
    with pytest.raises(IntegrityError, match="changed since it was hashed"):
        store.put_file_expecting("a/f.bin", str(src), tmp_key=".tmp/f", sha256=digest, size=2 * MiB)
    with pytest.raises(IntegrityError, match="expected 3 bytes"):
        store.put_file_expecting("a/g.bin", str(src), tmp_key=".tmp/g", sha256=digest, size=3)
    assert store.get("a/f.bin") == b"old" and not store.exists("a/g.bin")
    assert not list((tmp_path / "root" / ".tmp").iterdir())


def test_missing_source_is_a_store_error(tmp_path: Path) -> None:
    store = LocalStore(str(tmp_path / "root"))
    with pytest.raises(StoreError, match="cannot read"):
        store.put_file_expecting("a", str(tmp_path / "nope"), tmp_key=".tmp/a", sha256="0" * 64, size=0)


def test_short_writes_still_copy_every_byte(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src, digest = _source(tmp_path, 3 * MiB + 1)
    store = LocalStore(str(tmp_path / "root"))
    real = os.write
    sizes: list[int] = []

    def short(fd: int, data: memoryview) -> int:  # at most 1000 bytes per call, as a signal may cut a write
        sizes.append(len(data))
        return real(fd, data[:1000])

    monkeypatch.setattr(os, "write", short)
    store.put_file_expecting("k1", str(src), tmp_key=".tmp/1", sha256=digest, size=3 * MiB + 1)
    monkeypatch.undo()
    assert store.get("k1") == src.read_bytes() and len(sizes) > 3 * MiB // 1000


def test_a_write_error_is_a_store_error_and_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src, digest = _source(tmp_path, 2 * MiB)

    def broken(*_: object) -> int:
        raise OSError(errno.EIO, "I/O error")

    store = LocalStore(str(tmp_path / "root"))
    monkeypatch.setattr(os, "write", broken)
    with pytest.raises(StoreError, match="I/O error"):
        store.put_file_expecting("k", str(src), tmp_key=".tmp/k", sha256=digest, size=2 * MiB)
    monkeypatch.undo()
    assert not store.exists("k") and not (tmp_path / "root" / ".tmp" / "k").exists()


def test_default_implementation_deletes_a_mismatch(tmp_path: Path) -> None:
    """A backend without its own version (here a delegating wrapper): put_file_atomic, then compare."""
    src, digest = _source(tmp_path, 4096)
    store = HookStore(LocalStore(str(tmp_path / "root")), lambda *_: None)
    assert store.put_file_expecting("ok", str(src), tmp_key=".tmp/ok", sha256=digest, size=4096).sha256 == digest
    with pytest.raises(IntegrityError, match="changed since it was hashed"):
        store.put_file_expecting("bad", str(src), tmp_key=".tmp/bad", sha256="0" * 64, size=4096)
    with pytest.raises(NotFoundError):
        store.get("bad")
    assert store.get("ok") == src.read_bytes()
