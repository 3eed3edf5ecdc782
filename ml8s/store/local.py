"""Local-filesystem backend: tmp file hashed while written + fsync + ``os.replace`` + directory fsync.

Costs: a listing is a directory walk and one ``stat`` per file (no file is read); an atomic write reads
its source once and hashes each byte once, from the buffer it writes (one pass; a file's contents are
hashed in a second thread while the next buffer is read and written, ``copy_hashed``). The tmp file is not read
back: a re-read after fsync comes from the page cache, not the disk, so it would only prove that our own
write loop wrote what it hashed, which hashing those very buffers proves too; its size is checked (a
``stat``) before the rename. ``put_file_expecting`` (a file its caller hashed) copies it the same way
and checks that hash against the caller's (the source may have changed since).
Conditional writes stage their bytes under the root's ``.tmp/`` (never beside the target, where a listing
would show them; ``ml8s tmp-cleanup`` removes what a crash leaves there), so the store root must be one
filesystem. ``delete`` removes the directories it leaves empty, up to the root; writers recreate a
directory that a concurrent delete removed under them. Every write (tmp file, lock, link, rename, fsync) works
relative to directories opened from the root one at a time without following a link (``_tree``): a directory a
store writer replaced by a link is refused, UnsafeObjectError and nothing written; reads walk alike, nothing read.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
import stat
from collections.abc import Iterator

from ml8s.errors import (
    IntegrityError,
    NotFoundError,
    PreconditionFailedError,
    RetryableStoreError,
    StoreError,
)
from ml8s.locks import lock_at
from ml8s.store._files import StagedWriter, copy_hashed, open_source, sha256_or_none, size_or_none, write_file
from ml8s.store._safe import irregular, open_regular, read_regular, unlink_nofollow
from ml8s.store._tree import Slot, Tree, hard_link, move, reading
from ml8s.store._walk import link, walk
from ml8s.store.base import ObjectInfo, Store, Versioned, WriteResult

LOCK_DIR = ".ml8s-locks"
TMP_DIR = ".tmp"


class LocalStore(Store):
    """A store rooted at an absolute directory (``file://`` URI)."""

    def __init__(self, root: str) -> None:
        self.root = os.path.normpath(os.path.abspath(root))
        self.root_uri = "file://" + self.root

    # -- writes (each walks its directories from the root, never through a link: _tree) ------------
    def put_atomic(self, key: str, data: bytes, *, tmp_key: str) -> WriteResult:
        with self._tree() as tree:
            tmp = self._slot(tree, tmp_key)
            digest, size = write_file(tmp, data)
            return self._move(tree, key, tmp, tmp_key, digest, size)

    def put_file_atomic(self, key: str, path: str, *, tmp_key: str) -> WriteResult:
        with self._tree() as tree, open_source(path, f"{path} to store it at {self.uri(key)}") as source:
            tmp = self._slot(tree, tmp_key)
            digest, size = copy_hashed(tmp, source)
            return self._move(tree, key, tmp, tmp_key, digest, size)

    def put_file_expecting(self, key: str, path: str, *, tmp_key: str, sha256: str, size: int) -> WriteResult:
        """A copy of ``path`` hashed from the buffers written (``copy_hashed``: one pass, the hash in a second
        thread), fsync; only bytes whose sha256 and size are the caller's move to ``key``.

        The check is against the hash the caller took of the source (and will record, e.g. in a chain block).
        A source changed after it was hashed, or a short read, gives other bytes, so IntegrityError and
        nothing at ``key``. The tmp file is not read back (module docstring): that re-read would come from
        the page cache and prove only what hashing the written buffers proves.
        """
        with self._tree() as tree:
            tmp = self._slot(tree, tmp_key)
            with open_source(path, f"{path} to store it at {self.uri(key)}") as source:
                digest, copied = copy_hashed(tmp, source)
            if (digest, copied) != (sha256, size):
                tmp.unlink()
                raise IntegrityError(
                    f"{self.uri(key)}: copied {copied} bytes sha256 {digest} from {path}, expected {size} bytes "
                    f"sha256 {sha256}: the file changed since it was hashed"
                )
            return self._move(tree, key, tmp, tmp_key, digest, copied)

    @contextlib.contextmanager
    def stage(self, tmp_key: str) -> Iterator[StagedWriter]:
        """A fresh file at ``tmp_key`` for a caller to write and hash buffer by buffer (``StagedWriter``), then
        hand to :meth:`put_staged`; removed if the block raises, kept otherwise (its owner deletes it)."""
        with self._tree() as tree:
            writer = StagedWriter(self._slot(tree, tmp_key))
            try:
                yield writer
            except BaseException:
                writer.target.unlink()
                raise
            finally:
                os.close(writer.fd)

    def put_staged(self, key: str, path: str, *, tmp_key: str, sha256: str, size: int) -> WriteResult:
        """A file :meth:`stage` wrote (hashed from the buffers written) into place without a copy: fsync, a
        hard link at ``tmp_key`` renamed over ``key``, then the directory fsynced (a crash leaves the old
        ``key`` or the whole new file). The staged file stays, for a retry or a restore to link
        again. Its size is checked first (truncated since: IntegrityError); a path outside the root is copied."""
        rel = os.path.relpath(os.path.abspath(path), self.root)
        if rel == os.curdir or rel.split(os.sep)[0] == os.pardir:
            return self.put_file_expecting(key, path, tmp_key=tmp_key, sha256=sha256, size=size)
        with self._tree() as tree:
            staged = self._slot(tree, rel.replace(os.sep, "/"))
            found = size_or_none(staged)
            if found is None:
                raise StoreError(
                    f"{path} vanished: staged for {self.uri(key)}, then deleted by someone else (a cleanup?)"
                )
            if found != size:
                raise IntegrityError(f"{path}: staged {size} bytes sha256 {sha256} for {self.uri(key)}, found {found}")
            try:  # the staged bytes are durable before any name of them is (an fsync on any descriptor does)
                fd = open_regular(staged.name, path, nofollow=True, dir_fd=staged.dir_fd(create=False))
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
            except OSError as exc:
                raise StoreError(f"cannot fsync {path} (staged for {self.uri(key)}): {exc.strerror or exc}") from exc
            tmp = self._slot(tree, tmp_key)
            tmp.unlink()  # a crashed writer's link of that name: replaced, as a tmp file written there would be
            move(staged, tmp, hard_link)
            return self._into_place(tree, key, tmp, size, sha256)

    def put_if_absent(self, key: str, data: bytes) -> bool:
        with self._tree() as tree:
            final = self._slot(tree, key)
            tmp = self._scratch(tree, key, final)
            write_file(tmp, data)
            try:
                move(tmp, final, hard_link)  # atomic create-if-absent, unlike rename
            except FileExistsError:
                return False
            finally:
                tmp.unlink()
            os.fsync(final.dir_fd())  # the new name survives a crash before the caller goes on
        return True

    def put_if_match(self, key: str, data: bytes, token: str | None) -> str:
        with self._tree() as tree, self._lock(tree, key):
            final = self._slot(tree, key)
            current = sha256_or_none(final)
            if current != token:
                raise PreconditionFailedError(
                    f"{self.uri(key)} changed: expected version {token or '<absent>'}, found {current or '<absent>'}"
                )
            tmp = self._scratch(tree, key, final)
            digest, _ = write_file(tmp, data)
            try:
                move(tmp, final, os.replace)
            except BaseException:
                tmp.unlink()
                raise
            os.fsync(final.dir_fd())  # the swap is durable before the caller reports it
        return digest

    def delete(self, key: str) -> None:
        """Never through a symbolic link (_safe.unlink_nofollow): UnsafeObjectError, nothing deleted."""
        parts = [p for p in self._path(key).removeprefix(self.root).split(os.sep) if p]
        if not parts:
            raise StoreError(f"cannot delete {self.uri(key)}: the store's root; expected a key under it")
        try:
            unlink_nofollow(self.root, parts, self.uri(key))
        except OSError as exc:
            raise StoreError(f"cannot delete {self.uri(key)}: {exc.strerror or exc}") from exc

    # -- reads ----------------------------------------------------------------------------------
    def get(self, key: str, *, if_match: str | None = None, max_bytes: int | None = None) -> bytes:
        """A regular file only (a FIFO or device is refused, never waited on: _safe.read_regular); with
        ``max_bytes``, no symbolic link either, and at most that many bytes."""
        with self._reading(key) as (dir_fd, name):
            data = read_regular(name, self.uri(key), max_bytes=max_bytes, dir_fd=dir_fd)
        if if_match is not None and (found := hashlib.sha256(data).hexdigest()) != if_match:
            raise PreconditionFailedError(f"{self.uri(key)} changed: expected version {if_match}, found {found}")
        return data

    def get_range(self, key: str, start: int, length: int) -> bytes:
        """A regular file's bytes [start, start + length), never through a symbolic link (Store.get_range)."""
        if start < 0 or length < 0:
            raise StoreError(f"{self.uri(key)}: byte range {start}+{length}; expected a start and length >= 0")
        with self._reading(key) as (dir_fd, name):
            fd = open_regular(name, self.uri(key), nofollow=True, dir_fd=dir_fd)
        try:
            chunks, got = [], 0
            while got < length and (chunk := os.pread(fd, min(length - got, 1 << 24), start + got)):
                chunks.append(chunk)
                got += len(chunk)
            return b"".join(chunks)
        except OSError as exc:
            raise StoreError(f"cannot read {self.uri(key)}: {exc.strerror or exc}") from exc
        finally:
            os.close(fd)

    def get_versioned(self, key: str, *, max_bytes: int | None = None) -> Versioned:
        # No lock: writers replace a file atomically, so a read sees one whole version and its token is the
        # hash of what was read. A lock here would need a writable root, and reads must work on a read-only one.
        data = self.get(key, max_bytes=max_bytes)
        return Versioned(data=data, token=hashlib.sha256(data).hexdigest())

    def checksum(self, key: str) -> str:
        """The file's sha256, streamed (the token :meth:`get_versioned` returns)."""
        return self.digest(key).sha256

    def digest(self, key: str) -> WriteResult:
        """The file's size and sha256, streamed; a regular file only, never through a symbolic link."""
        with self._reading(key) as (dir_fd, name):
            fd = open_regular(name, self.uri(key), nofollow=True, dir_fd=dir_fd)
        try:
            with os.fdopen(fd, "rb") as handle:
                digest = hashlib.file_digest(handle, "sha256").hexdigest()
                return WriteResult(key=key, size=handle.tell(), sha256=digest)
        except OSError as exc:
            raise StoreError(f"cannot read {self.uri(key)}: {exc.strerror or exc}") from exc

    def download(self, key: str, path: str) -> WriteResult:
        with self._reading(key) as (dir_fd, name):  # the file itself followed, as ever: only its parents are not
            try:
                regular = stat.S_ISREG(os.stat(name, dir_fd=dir_fd).st_mode)
            except OSError:
                regular = False
            if not regular:
                raise NotFoundError(f"{self.uri(key)} does not exist")
            fd = open_regular(name, self.uri(key), nofollow=False, dir_fd=dir_fd)
        with open(fd, "rb", buffering=0) as handle:
            digest, size = copy_hashed(path, handle)
        return WriteResult(key=key, size=size, sha256=digest)

    def irregular(self, prefix: str) -> list[str]:
        """Keys under ``prefix`` that are neither regular files nor directories (links, FIFOs, devices,
        sockets), or a component of ``prefix`` that is a link; nothing followed (_safe.irregular)."""
        return irregular(self.root, [p for p in self._path(prefix).removeprefix(self.root).split(os.sep) if p])

    def link_info(self, key: str) -> ObjectInfo | None:
        """The symbolic link at ``key`` itself, from ``lstat`` (_walk.link); None when no link is there."""
        return link(self._path(key), key, uri=self.uri)

    def exists(self, key: str) -> bool:
        return os.path.isfile(self._path(key))

    def list(self, prefix: str) -> list[ObjectInfo]:
        """Regular files under ``prefix`` from a walk and a ``stat`` each; files that vanish meanwhile are left out."""
        rel = "/".join(p for p in prefix.split("/") if p)
        return walk(self._path(rel), rel, skip=LOCK_DIR, uri=self.uri)

    # -- helpers --------------------------------------------------------------------------------
    def _path(self, key: str) -> str:
        parts = [p for p in key.split("/") if p]
        if any(p in (".", "..") for p in parts):
            raise StoreError(f"invalid key {key!r}: '.' and '..' are not allowed")
        return os.path.join(self.root, *parts)

    def _reading(self, key: str) -> contextlib.AbstractContextManager[tuple[int | None, str]]:
        """Where to open ``key`` for a read, its directories walked without following a link (_tree.reading)."""
        self._path(key)  # refuses '.' and '..'
        return reading(self.root, tuple(p for p in key.split("/") if p), self.uri, self.uri(key))

    def _tree(self) -> Tree:
        return Tree(self.root, self.uri)

    def _slot(self, tree: Tree, key: str) -> Slot:
        path = self._path(key)
        parts = tuple(path.removeprefix(self.root).split(os.sep)[1:])
        if not parts:
            raise StoreError(f"cannot write {self.uri(key)}: the store's root; expected a key under it")
        return Slot(tree, parts[:-1], parts[-1], path, f"write {self.uri(key)}", "a directory")

    def _scratch(self, tree: Tree, key: str, final: Slot) -> Slot:
        """A fresh file under the root's ``.tmp/`` for staging a conditional write to ``final`` (a link there is
        refused: a write staged through it would land, and be left on a crash, wherever it points)."""
        name = f"{final.name[:64]}.{os.getpid()}.{secrets.token_hex(8)}.new"
        path, doing = os.path.join(self.root, TMP_DIR, name), f"stage a write to {self.uri(key)}"
        return Slot(tree, (TMP_DIR,), name, path, doing, "the store's staging directory")

    def _move(self, tree: Tree, key: str, tmp: Slot, tmp_key: str, digest: str, size: int) -> WriteResult:
        """Move the fsynced tmp file, hashed while written, to ``key`` if it still has the size written."""
        found = size_or_none(tmp)
        if found is None:  # nobody but a cleanup deletes a staged file: say so, not "the file changed"
            raise self._vanished(key, tmp_key)
        if found != size:  # truncated or replaced by someone else since we wrote it
            tmp.unlink()
            raise IntegrityError(
                f"{self.uri(tmp_key)}: wrote {size} bytes sha256 {digest}, found {found} bytes before the rename"
            )
        return self._into_place(tree, key, tmp, size, digest)

    def _vanished(self, key: str, tmp_key: str) -> RetryableStoreError:
        return RetryableStoreError(
            f"{self.uri(tmp_key)} vanished before it was checked: staged for {self.uri(key)}, then deleted by "
            "someone else (a tmp-cleanup or GC judging age by a clock ahead of the store's?); retrying is safe"
        )

    def _into_place(self, tree: Tree, key: str, tmp: Slot, size: int, digest: str) -> WriteResult:
        final = self._slot(tree, key)
        try:
            move(tmp, final, os.replace)
        except BaseException:
            tmp.unlink()  # refused or failed: nothing of this write is left, in the store or out of it
            raise
        os.fsync(final.dir_fd())  # the rename survives a crash before anything names it
        return WriteResult(key=key, size=size, sha256=digest)

    @contextlib.contextmanager
    def _lock(self, tree: Tree, key: str) -> Iterator[None]:
        name = hashlib.sha256(key.encode()).hexdigest()[:32] + ".lock"
        locks = tree.directory((LOCK_DIR,), f"lock {self.uri(key)}", "the store's lock directory")
        with contextlib.ExitStack() as held:
            try:
                held.enter_context(lock_at(locks, name))
            except OSError as exc:  # a symbolic link planted there (ELOOP) is refused, never followed
                raise StoreError(
                    f"cannot lock {self.uri(key)}: {os.path.join(self.root, LOCK_DIR, name)}: {exc.strerror or exc}; "
                    f"expected a writable store root whose {LOCK_DIR}/ holds regular files"
                ) from exc
            yield
