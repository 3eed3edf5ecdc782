"""Local-filesystem backend: tmp file + fsync + validate + ``os.replace`` + directory fsync."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
from collections.abc import Iterator

from ml8s.errors import IntegrityError, NotFoundError, PreconditionFailedError, StoreError
from ml8s.store.base import ObjectInfo, Store, Versioned, WriteResult

_CHUNK = 1024 * 1024
LOCK_DIR = ".ml8s-locks"


class LocalStore(Store):
    """A store rooted at an absolute directory (``file://`` URI)."""

    def __init__(self, root: str) -> None:
        self.root = os.path.normpath(os.path.abspath(root))
        self.root_uri = "file://" + self.root

    # -- writes ---------------------------------------------------------------------------------
    def put_atomic(self, key: str, data: bytes, *, tmp_key: str) -> WriteResult:
        expected = hashlib.sha256(data).hexdigest()
        tmp = self._path(tmp_key)
        digest, size = _write_file(tmp, iter([data]))
        return self._validate_and_move(key, tmp, tmp_key, expected, len(data), digest, size)

    def put_file_atomic(self, key: str, path: str, *, tmp_key: str) -> WriteResult:
        tmp = self._path(tmp_key)
        source = hashlib.sha256()
        length = 0

        def chunks() -> Iterator[bytes]:
            nonlocal length
            with open(path, "rb") as handle:
                while chunk := handle.read(_CHUNK):
                    source.update(chunk)
                    length += len(chunk)
                    yield chunk

        digest, size = _write_file(tmp, chunks())
        return self._validate_and_move(key, tmp, tmp_key, source.hexdigest(), length, digest, size)

    def put_if_absent(self, key: str, data: bytes) -> bool:
        final = self._path(key)
        tmp = final + f".{os.getpid()}.new"
        _write_file(tmp, iter([data]))
        try:
            os.link(tmp, final)  # atomic create-if-absent, unlike rename
        except FileExistsError:
            return False
        finally:
            os.unlink(tmp)
        _fsync_dir(os.path.dirname(final))
        return True

    def put_if_match(self, key: str, data: bytes, token: str | None) -> str:
        final = self._path(key)
        with self._lock(key):
            current = _sha256_or_none(final)
            if current != token:
                raise PreconditionFailedError(
                    f"{self.uri(key)} changed: expected version {token or '<absent>'}, found {current or '<absent>'}"
                )
            tmp = final + f".{os.getpid()}.new"
            _write_file(tmp, iter([data]))
            os.replace(tmp, final)
            _fsync_dir(os.path.dirname(final))
        return hashlib.sha256(data).hexdigest()

    def delete(self, key: str) -> None:
        path = self._path(key)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
            _fsync_dir(os.path.dirname(path))

    # -- reads ----------------------------------------------------------------------------------
    def get(self, key: str, *, if_match: str | None = None) -> bytes:
        try:
            with open(self._path(key), "rb") as handle:
                data = handle.read()
        except FileNotFoundError as exc:
            raise NotFoundError(f"{self.uri(key)} does not exist") from exc
        except OSError as exc:
            raise StoreError(f"cannot read {self.uri(key)}: {exc.strerror or exc}") from exc
        if if_match is not None and (found := hashlib.sha256(data).hexdigest()) != if_match:
            raise PreconditionFailedError(f"{self.uri(key)} changed: expected version {if_match}, found {found}")
        return data

    def get_versioned(self, key: str) -> Versioned:
        with self._lock(key):
            data = self.get(key)
        return Versioned(data=data, token=hashlib.sha256(data).hexdigest())

    def download(self, key: str, path: str) -> WriteResult:
        source = self._path(key)
        if not os.path.isfile(source):
            raise NotFoundError(f"{self.uri(key)} does not exist")

        def chunks() -> Iterator[bytes]:
            with open(source, "rb") as handle:
                while chunk := handle.read(_CHUNK):
                    yield chunk

        digest, size = _write_file(path, chunks())
        return WriteResult(key=key, size=size, sha256=digest)

    def exists(self, key: str) -> bool:
        return os.path.isfile(self._path(key))

    def list(self, prefix: str) -> list[ObjectInfo]:
        base = self._path(prefix) if prefix else self.root
        if os.path.isfile(base):
            return [self._info(prefix)]
        found: list[ObjectInfo] = []
        for directory, dirs, files in os.walk(base):
            dirs[:] = [d for d in dirs if d != LOCK_DIR]
            for name in files:
                rel = os.path.relpath(os.path.join(directory, name), self.root).replace(os.sep, "/")
                found.append(self._info(rel))
        return sorted(found, key=lambda info: info.key)

    # -- helpers --------------------------------------------------------------------------------
    def _info(self, key: str) -> ObjectInfo:
        path = self._path(key)
        stat = os.stat(path)
        return ObjectInfo(key=key, size=stat.st_size, checksum=_sha256_or_none(path) or "", mtime=stat.st_mtime)

    def _path(self, key: str) -> str:
        parts = [p for p in key.split("/") if p]
        if any(p in (".", "..") for p in parts):
            raise StoreError(f"invalid key {key!r}: '.' and '..' are not allowed")
        return os.path.join(self.root, *parts)

    def _validate_and_move(
        self, key: str, tmp: str, tmp_key: str, expected: str, length: int, digest: str, size: int
    ) -> WriteResult:
        on_disk = _sha256_or_none(tmp)
        if (digest, size) != (expected, length) or on_disk != expected or os.path.getsize(tmp) != length:
            os.unlink(tmp)
            raise IntegrityError(
                f"{self.uri(tmp_key)}: expected {length} bytes sha256 {expected}, wrote {size} bytes sha256 {on_disk}"
            )
        final = self._path(key)
        os.makedirs(os.path.dirname(final), exist_ok=True)
        os.replace(tmp, final)
        _fsync_dir(os.path.dirname(final))
        return WriteResult(key=key, size=size, sha256=expected)

    @contextlib.contextmanager
    def _lock(self, key: str) -> Iterator[None]:
        lock_dir = os.path.join(self.root, LOCK_DIR)
        os.makedirs(lock_dir, exist_ok=True)
        name = hashlib.sha256(key.encode()).hexdigest()[:32] + ".lock"
        fd = os.open(os.path.join(lock_dir, name), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)


def _write_file(path: str, chunks: Iterator[bytes]) -> tuple[str, int]:
    """Write chunks to ``path`` (created fresh), fsync, and return (sha256, size) of what was written."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    digest = hashlib.sha256()
    size = 0
    try:
        with open(path, "wb") as handle:
            for chunk in chunks:
                handle.write(chunk)
                digest.update(chunk)
                size += len(chunk)
            handle.flush()
            os.fsync(handle.fileno())
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(path)
        if exc.errno == errno.ENOSPC:
            raise StoreError(f"no space left writing {path}") from exc
        raise StoreError(f"cannot write {path}: {exc.strerror or exc}") from exc
    return digest.hexdigest(), size


def _sha256_or_none(path: str) -> str | None:
    try:
        with open(path, "rb") as handle:
            return hashlib.file_digest(handle, "sha256").hexdigest()
    except FileNotFoundError:
        return None


def _fsync_dir(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
