"""Local backend: atomic writes, create-if-absent, compare-and-swap, sorted listing."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ml8s.errors import IntegrityError, NotFoundError, PreconditionFailedError
from ml8s.store import LocalStore, open_store


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


def test_integrity_failure_keeps_old_final(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = LocalStore(str(tmp_path))
    store.put_atomic("k", b"old", tmp_key=".tmp/k-1")
    import ml8s.store.local as local

    monkeypatch.setattr(local, "_sha256_or_none", lambda path: "0" * 64)
    with pytest.raises(IntegrityError, match="expected 3 bytes"):
        store.put_atomic("k", b"new", tmp_key=".tmp/k-2")
    assert (tmp_path / "k").read_bytes() == b"old"
    assert not (tmp_path / ".tmp" / "k-2").exists()


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
