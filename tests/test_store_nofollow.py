"""Local store writes never follow a symbolic link on the way to a key (ml8s/store/_tree.py).

A store writer who holds no key can still replace a directory of the store (``ml8s_chain/c/.tmp``,
``ml8s_training_runs/RUN/model``) by a link to a directory outside it. Every write walks from the root one
directory at a time without following links: UnsafeObjectError naming the key and the component, nothing
written there or anywhere outside. A swap after the walk (the hook below) lands the write in the directory
that was walked, inside the store, never where the new link points.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from ml8s.errors import NotFoundError, UnsafeObjectError
from ml8s.store import LocalStore, _tree
from ml8s.store.base import Versioned, WriteResult

DATA = b"payload bytes"
DIGEST = hashlib.sha256(DATA).hexdigest()
KEY = "ml8s_training_runs/RUN/model/model.bin"
TMP = "ml8s_training_runs/RUN/.tmp/model.bin.w1"


def _contents(top: Path) -> list[tuple[str, bytes | None]]:
    """Everything under ``top`` (links not followed): its names, and a file's bytes."""
    found: list[tuple[str, bytes | None]] = []
    for directory, dirs, files in os.walk(top):
        for name in sorted(dirs + files):
            path = Path(directory) / name
            rel = str(path.relative_to(top))
            found.append((rel, path.read_bytes() if path.is_file() and not path.is_symlink() else None))
    return sorted(found)


@pytest.fixture
def places(tmp_path: Path) -> tuple[LocalStore, Path, Path]:
    root, outside = tmp_path / "root", tmp_path / "outside"
    (outside / "model").mkdir(parents=True)
    (outside / ".tmp").mkdir()
    (outside / "kept").write_bytes(b"precious")
    (tmp_path / "src.bin").write_bytes(DATA)
    return LocalStore(str(root)), root, outside


def _plant(root: Path, component: str, target: Path) -> None:
    link = root / component
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(target, target_is_directory=True)


def _writes(store: LocalStore, src: str) -> dict[str, Callable[[], object]]:
    def staged() -> object:
        with store.stage(TMP) as writer:
            writer.write(memoryview(DATA))
        try:
            return store.put_staged(KEY, writer.path, tmp_key=f"{TMP}.l", sha256=DIGEST, size=len(DATA))
        finally:  # the staged file is its owner's to delete (as ml8s.chain.checkpoint does)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(writer.path)

    return {
        "put_atomic": lambda: store.put_atomic(KEY, DATA, tmp_key=TMP),
        "put_file_atomic": lambda: store.put_file_atomic(KEY, src, tmp_key=TMP),
        "put_file_expecting": lambda: store.put_file_expecting(KEY, src, tmp_key=TMP, sha256=DIGEST, size=len(DATA)),
        "put_if_absent": lambda: store.put_if_absent(KEY, DATA),
        "put_if_match": lambda: store.put_if_match(KEY, DATA, None),
        "stage": staged,
    }


WRITES = ["put_atomic", "put_file_atomic", "put_file_expecting", "put_if_absent", "put_if_match", "stage"]


@pytest.mark.parametrize("write", WRITES)
@pytest.mark.parametrize("component", ["ml8s_training_runs/RUN", "ml8s_training_runs/RUN/model"])
def test_a_parent_linked_out_of_the_store_is_refused(
    places: tuple[LocalStore, Path, Path], tmp_path: Path, write: str, component: str
) -> None:
    store, root, outside = places
    _plant(root, component, outside)
    before = _contents(outside)
    with pytest.raises(
        UnsafeObjectError, match=rf"under file://{root}/{component}: a symbolic link; .*nothing written"
    ):
        _writes(store, str(tmp_path / "src.bin"))[write]()
    assert _contents(outside) == before
    assert [p for p in root.rglob("*") if p.is_file() and p.parent.name != ".ml8s-locks"] == []  # no tmp left


@pytest.mark.parametrize("write", ["put_atomic", "put_file_atomic", "put_file_expecting", "stage"])
def test_a_tmp_directory_linked_out_of_the_store_is_refused(
    places: tuple[LocalStore, Path, Path], tmp_path: Path, write: str
) -> None:
    store, root, outside = places
    _plant(root, "ml8s_training_runs/RUN/.tmp", outside / ".tmp")
    with pytest.raises(UnsafeObjectError, match=r"/RUN/\.tmp: a symbolic link"):
        _writes(store, str(tmp_path / "src.bin"))[write]()
    assert os.listdir(outside / ".tmp") == [] and not (root / "ml8s_training_runs/RUN/model").exists()


@pytest.mark.parametrize("write", WRITES)
def test_a_dangling_link_is_never_created_through(
    places: tuple[LocalStore, Path, Path], tmp_path: Path, write: str
) -> None:
    store, root, _ = places
    _plant(root, "ml8s_training_runs", tmp_path / "absent")
    with pytest.raises(UnsafeObjectError, match="ml8s_training_runs: a symbolic link"):
        _writes(store, str(tmp_path / "src.bin"))[write]()
    assert not (tmp_path / "absent").exists()


def test_a_file_where_a_directory_belongs_is_refused(places: tuple[LocalStore, Path, Path]) -> None:
    store, root, _ = places
    (root / "ml8s_training_runs").mkdir(parents=True)
    (root / "ml8s_training_runs" / "RUN").write_bytes(b"")
    with pytest.raises(UnsafeObjectError, match=r"under file://.*/RUN: a regular file; expected a directory"):
        store.put_atomic(KEY, DATA, tmp_key=TMP)


def test_a_link_planted_at_the_tmp_name_is_replaced_not_followed(places: tuple[LocalStore, Path, Path]) -> None:
    """A leftover at a writer's tmp name (a crash's file, or a planted link or FIFO) is removed, never opened."""
    store, root, outside = places
    tmp = root / TMP
    tmp.parent.mkdir(parents=True)
    tmp.symlink_to(outside / "kept")
    store.put_atomic(KEY, DATA, tmp_key=TMP)
    os.mkfifo(tmp)  # opened for writing it would wait for a reader for ever
    store.put_atomic(KEY, DATA, tmp_key=TMP)
    assert (outside / "kept").read_bytes() == b"precious" and store.get(KEY) == DATA and not tmp.exists()


def _swap_after_walk(monkeypatch: pytest.MonkeyPatch, root: Path, component: str, outside: Path) -> Iterator[Path]:
    """Once the write has opened ``component``, move that directory aside (inside the store) and put a link to
    ``outside`` in its place; yields where the walked directory went."""
    real = _tree.Tree.directory
    moved = root / "moved-aside"
    want = tuple(component.split("/"))

    def directory(self: _tree.Tree, parts: tuple[str, ...], doing: str, what: str, *, create: bool = True) -> int:
        fd = real(self, parts, doing, what, create=create)
        if parts[: len(want)] == want and not moved.exists():
            os.rename(root / component, moved)
            (root / component).symlink_to(outside, target_is_directory=True)
        return fd

    monkeypatch.setattr(_tree.Tree, "directory", directory)
    yield moved


@pytest.mark.parametrize("write", WRITES)
@pytest.mark.parametrize("component", ["ml8s_training_runs/RUN", "ml8s_training_runs/RUN/model", ".tmp"])
def test_a_parent_swapped_for_a_link_after_the_walk_is_not_followed(
    places: tuple[LocalStore, Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, write: str, component: str
) -> None:
    """The swap lands between the walk and the create, link or rename: they go to the directory walked."""
    store, root, outside = places
    (root / ".tmp").mkdir(parents=True)
    (root / "ml8s_training_runs/RUN/model").mkdir(parents=True)
    before = _contents(outside)
    moved = next(_swap_after_walk(monkeypatch, root, component, outside))
    if write == "stage" and component == "ml8s_training_runs/RUN":
        # staged in the directory walked; put_staged walks the staged file's path afresh and meets the link
        with pytest.raises(UnsafeObjectError, match="RUN: a symbolic link"):
            _writes(store, str(tmp_path / "src.bin"))[write]()
        assert _contents(outside) == before
        return
    _writes(store, str(tmp_path / "src.bin"))[write]()
    monkeypatch.undo()
    assert _contents(outside) == before
    if component != ".tmp":
        assert (moved / KEY.removeprefix(component + "/")).read_bytes() == DATA
    assert [p.name for p in (root / "moved-aside").rglob("*") if p.is_file()] in (["model.bin"], [])


def test_a_swapped_lock_directory_after_the_walk_is_not_followed(
    places: tuple[LocalStore, Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    store, root, outside = places
    (root / ".ml8s-locks").mkdir(parents=True)
    before = _contents(outside)
    moved = next(_swap_after_walk(monkeypatch, root, ".ml8s-locks", outside))
    store.put_if_match(KEY, DATA, None)
    monkeypatch.undo()
    assert _contents(outside) == before and len(os.listdir(moved)) == 1 and store.get(KEY) == DATA


def test_each_directory_is_opened_once_per_write(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run writes many files: the walk costs one open (and its close) per directory, shared by the tmp file
    and its key, and no stat or mkdir where the directories are there."""
    store = LocalStore(str(tmp_path))
    store.put_atomic("run/a/b/k", b"0", tmp_key="run/.tmp/k")
    calls: list[str] = []
    real_open, real_mkdir, real_stat = os.open, os.mkdir, os.stat

    def counted(name: str, real: Callable[..., object]) -> Callable[..., object]:
        def call(path: object, *args: object, **kwargs: object) -> object:
            calls.append(f"{name} {os.path.basename(str(path))}")
            return real(path, *args, **kwargs)

        return call

    monkeypatch.setattr(os, "open", counted("open", real_open))
    monkeypatch.setattr(os, "mkdir", counted("mkdir", real_mkdir))
    monkeypatch.setattr(os, "stat", counted("stat", real_stat))
    store.put_atomic("run/a/b/k", b"1", tmp_key="run/.tmp/k")
    monkeypatch.undo()
    root = f"open {tmp_path.name}"
    assert calls == [root, "open run", "open .tmp", "open k", "stat k", "open a", "open b"]
    assert store.get("run/a/b/k") == b"1"


# -- reads: a parent swapped for a link out of the store is refused, the outside file never read ---------------
SECRET = b"outside bytes, never to be served"


def _reads(store: LocalStore, tmp_path: Path) -> dict[str, Callable[[], object]]:
    return {
        "get": lambda: store.get(KEY),
        "get strict": lambda: store.get(KEY, max_bytes=1 << 20),
        "get if_match": lambda: store.get(KEY, if_match=hashlib.sha256(SECRET).hexdigest()),
        "get_range": lambda: store.get_range(KEY, 0, 1 << 20),
        "get_versioned": lambda: store.get_versioned(KEY),
        "digest": lambda: store.digest(KEY),
        "checksum": lambda: store.checksum(KEY),
        "download": lambda: store.download(KEY, str(tmp_path / "downloaded.bin")),
    }


READS = ["get", "get strict", "get if_match", "get_range", "get_versioned", "digest", "checksum", "download"]


@pytest.mark.parametrize("read", READS)
@pytest.mark.parametrize("component", ["ml8s_training_runs", "ml8s_training_runs/RUN", "ml8s_training_runs/RUN/model"])
def test_a_read_through_a_parent_linked_out_of_the_store_is_refused(
    places: tuple[LocalStore, Path, Path], tmp_path: Path, read: str, component: str
) -> None:
    store, root, outside = places
    store.put_atomic(KEY, DATA, tmp_key=TMP)  # the real file, then its parent swapped for a link outside
    real = root / component
    real.rename(tmp_path / "moved-away")
    below = KEY.removeprefix(component + "/")
    (outside / below).parent.mkdir(parents=True, exist_ok=True)
    (outside / below).write_bytes(SECRET)
    real.symlink_to(outside, target_is_directory=True)
    assert (root / KEY).read_bytes() == SECRET  # by path, the key now reaches outside
    with pytest.raises(UnsafeObjectError, match=rf"under file://{root}/{component}: a symbolic link; .*nothing read"):
        _reads(store, tmp_path)[read]()
    assert not (tmp_path / "downloaded.bin").exists()


@pytest.mark.parametrize("read", READS)
def test_a_read_under_a_missing_directory_is_not_found(
    places: tuple[LocalStore, Path, Path], tmp_path: Path, read: str
) -> None:
    store, root, _ = places
    (root / "ml8s_training_runs").mkdir(parents=True)
    with pytest.raises(NotFoundError, match=rf"file://{root}/{KEY} does not exist"):
        _reads(store, tmp_path)[read]()
    with pytest.raises(NotFoundError, match="does not exist"):
        LocalStore(str(tmp_path / "no-root")).get(KEY)


def test_a_read_walked_in_the_store_returns_its_bytes(places: tuple[LocalStore, Path, Path], tmp_path: Path) -> None:
    store, _, _ = places
    store.put_atomic(KEY, DATA, tmp_key=TMP)
    found = {name: read() for name, read in _reads(store, tmp_path).items() if name != "get if_match"}
    written = WriteResult(key=KEY, size=len(DATA), sha256=DIGEST)
    assert found == {
        "get": DATA,
        "get strict": DATA,
        "get_range": DATA,
        "get_versioned": Versioned(data=DATA, token=DIGEST),
        "digest": written,
        "checksum": DIGEST,
        "download": written,
    }
    assert store.get(KEY, if_match=DIGEST) == DATA and store.get_range(KEY, 2, 5) == DATA[2:7]
    assert (tmp_path / "downloaded.bin").read_bytes() == DATA


def test_a_link_at_the_key_itself_is_refused_by_strict_reads_as_before(
    places: tuple[LocalStore, Path, Path], tmp_path: Path
) -> None:
    store, root, outside = places
    (root / "ml8s_training_runs/RUN/model").mkdir(parents=True)
    (root / KEY).symlink_to(outside / "kept")
    for read in ("get strict", "get_range", "digest", "checksum"):
        with pytest.raises(UnsafeObjectError, match=r"a symbolic link; expected a regular file \(not followed\)"):
            _reads(store, tmp_path)[read]()
    assert store.get(KEY) == b"precious"  # a lenient read follows the key's own link, as it always did


@pytest.mark.parametrize("read", READS)
def test_a_read_under_a_regular_file_where_a_directory_belongs_is_refused(
    places: tuple[LocalStore, Path, Path], tmp_path: Path, read: str
) -> None:
    store, root, _ = places
    (root / "ml8s_training_runs").mkdir(parents=True)
    (root / "ml8s_training_runs" / "RUN").write_bytes(b"")
    with pytest.raises(
        UnsafeObjectError, match=r"under file://.*/RUN: a regular file; expected a directory.*nothing read"
    ):
        _reads(store, tmp_path)[read]()
