"""DATA_FINGERPRINT (SPEC §2): one token per file, sorted, joined with ``|``, sha256.

Local files are hashed by content (streamed, in parallel threads: hashlib releases the GIL);
object stores are fingerprinted from a listing of ``(key, etag, size)`` so a backend only has to list.
"""

from __future__ import annotations

import errno
import hashlib
import itertools
import os
import sys
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor

from pydantic import BaseModel, ConfigDict

from ml8s.errors import DataError, StoreError, UnsafeObjectError
from ml8s.store._safe import open_regular
from ml8s.store.root_shape import kind_of
from ml8s.text import is_utf8

_PROGRESS_BYTES = 256 * 1024 * 1024  # show progress only when there is that much to hash
_CHUNK = 1024 * 1024


class FileEntry(BaseModel):
    """One fingerprinted file: path relative to DATA_ROOT with ``/``, checksum, size in bytes."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    relative_path: str
    checksum: str
    size: int

    @property
    def token(self) -> str:
        return f"{self.relative_path}:{self.checksum}:{self.size}"


class ObjectEntry(BaseModel):
    """One listed object of an object store."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    key: str
    etag: str
    size: int


class Fingerprint(BaseModel):
    """The fingerprint and the entries it was computed from (in fingerprint order)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    data_root: str
    fingerprint: str
    entries: tuple[FileEntry, ...]


def fingerprint_entries(entries: Iterable[FileEntry]) -> str:
    """sha256 of the sorted tokens joined with ``|`` (no trailing newline)."""
    ordered = sorted(entries, key=lambda e: e.relative_path)
    payload = "|".join(e.token for e in ordered)
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


def fingerprint_local(root: str, *, workers: int | None = None, progress: bool = True) -> Fingerprint:
    """Fingerprint a local file or directory tree by content.

    Args:
        root: absolute path (no ``file://``).
        workers: hashing threads (default: the CPU count).
        progress: print progress to stderr when the data is large.
    """
    files = list_local_files(root)
    total = sum(size for _, _, size in files)
    show = progress and total >= _PROGRESS_BYTES
    done = 0
    started = time.monotonic()
    entries: list[FileEntry] = []
    with ThreadPoolExecutor(max_workers=workers or os.cpu_count() or 1) as pool:
        digests = pool.map(lambda f: digest_file(f[1]), files)
        # the size of the bytes hashed, not the listed one: a file appended to in between gave a token (its new
        # bytes' sha256, its old size) that no state of the file ever had
        for (rel, _path, listed), (digest, size) in zip(files, digests, strict=True):
            entries.append(FileEntry(relative_path=rel, checksum=digest, size=size))
            done += listed
            if show:
                _progress(done, total, started)
    if show:
        print(file=sys.stderr)
    root_uri = "file://" + root
    return Fingerprint(data_root=root_uri, fingerprint=fingerprint_entries(entries), entries=tuple(entries))


def fingerprint_listing(data_root: str, prefix: str, objects: Iterable[ObjectEntry]) -> Fingerprint:
    """Fingerprint an object-store prefix from its listing: checksum = ETag without quotes.

    "Folder" objects are skipped: any key ending in ``/`` (S3 consoles' "Create folder", Hadoop s3a and
    rclone write them, zero bytes), including the prefix's own marker, which a store listing relative
    to the prefix shows as the empty key.
    """
    base = prefix if prefix == "" or prefix.endswith("/") else prefix + "/"
    entries = [
        FileEntry(relative_path=o.key[len(base) :], checksum=o.etag.strip('"'), size=o.size)
        for o in objects
        if is_data_key(o.key) and o.key.startswith(base) and is_data_key(o.key[len(base) :])
    ]
    for entry in entries:
        check_token_name(entry.relative_path, f"{data_root.rstrip('/')}/{entry.relative_path}")
        if ":" in entry.checksum or TOKEN_SEPARATOR in entry.checksum:
            raise DataError(
                f"DATA_ROOT object {data_root.rstrip('/')}/{entry.relative_path} is listed with ETag "
                f"{entry.checksum[:100]!r}; expected an ETag without ':' or '|' (it enters the data fingerprint)"
            )
    if not entries:
        raise DataError(f"DATA_ROOT {data_root} lists no objects; expected at least one data file")
    entries.sort(key=lambda e: e.relative_path)
    for before, after in itertools.pairwise(entries):
        if before.relative_path == after.relative_path:  # read twice, its rows would have counted twice
            raise DataError(
                f"DATA_ROOT {data_root} lists the object {before.relative_path!r} twice (a broken listing); expected "
                "each object once"
            )
    return Fingerprint(data_root=data_root, fingerprint=fingerprint_entries(entries), entries=tuple(entries))


TOKEN_SEPARATOR = "|"


def check_token_name(name: str, where: str) -> None:
    """Refuse a file name or key holding the fingerprint's token separator.

    Tokens ``name:sha256:size`` are joined with ``|``: a file named ``a.csv:<sha256 of a.csv>:<size>|b.csv``
    holding ``b.csv``'s bytes gave the fingerprint of the pair ``a.csv``, ``b.csv``, so different data would
    have had the same fingerprint (and, at the same DATA_ROOT, the same RUN_ID: the gate would return the
    model trained on the other data). Without ``|`` in names every token is one file, read from the right.

    Raises:
        DataError: ``name`` holds ``|``; ``where`` names it.
    """
    if TOKEN_SEPARATOR in name:
        raise DataError(
            f"DATA_ROOT holds {where!r}, a name with '|'; expected file and directory names without '|' (the data "
            "fingerprint joins one 'name:sha256:size' token per file with '|', so such a name could make different "
            "data look the same): rename it"
        )


def is_data_key(key: str) -> bool:
    """Whether an object key names data: not empty, and not a "folder" (a key ending in ``/``)."""
    return bool(key) and not key.endswith("/")


def list_local_files(root: str) -> list[tuple[str, str, int]]:
    """``(relative_path, path, size)`` of every regular file under ``root``, sorted by relative path.

    Symlinks to files and directories are followed; a symlink loop is an error saying so, not "broken".
    """
    if not os.path.exists(root):
        if _is_symlink_loop(root):
            raise DataError(f"DATA_ROOT file://{root} is a symlink loop; expected a data file or directory")
        if os.path.islink(root):
            raise DataError(f"DATA_ROOT file://{root} is a broken symlink; expected a data file or directory")
        raise DataError(f"DATA_ROOT file://{root} does not exist; expected a data file or directory")
    if os.path.isfile(root):
        check_token_name(os.path.basename(root), root)
        return [(os.path.basename(root), root, os.path.getsize(root))]
    if not os.path.isdir(root):
        raise DataError(f"DATA_ROOT file://{root} is neither a regular file nor a directory")
    found: list[tuple[str, str, int]] = []
    _walk(root, "", {os.path.realpath(root)}, found)
    if not found:
        raise DataError(f"DATA_ROOT file://{root} holds no files; expected at least one data file")
    found.sort(key=lambda f: f[0])
    return found


def digest_file(path: str) -> tuple[str, int]:
    """Streamed sha256 of a regular file's bytes, and how many bytes it hashed.

    The file is opened without blocking and checked to be regular before a byte is read (``open_regular``): a
    file listed as regular and replaced by a FIFO since would block a plain ``open`` forever.
    """
    try:
        fd = open_regular(path, path, nofollow=False)
    except UnsafeObjectError as exc:
        raise DataError(f"DATA_ROOT: {exc.message}; DATA_ROOT may hold only regular files and directories") from exc
    except StoreError as exc:  # gone, unreadable, a link loop
        raise DataError(f"{exc.message}; expected a readable data file") from exc
    try:
        with open(fd, "rb") as handle:
            digest = hashlib.sha256()
            size = 0
            while chunk := handle.read(_CHUNK):  # hashlib releases the GIL on a chunk this large
                digest.update(chunk)
                size += len(chunk)
            return digest.hexdigest(), size
    except OSError as exc:
        raise DataError(f"cannot read data file {path}: {exc.strerror or exc}; expected a readable file") from exc


def _is_symlink_loop(path: str) -> bool:
    """Whether resolving ``path`` loops (``ln -s loop loop``, ``a -> b -> a``): the OS says ELOOP."""
    try:
        os.stat(path)
    except OSError as exc:
        return exc.errno == errno.ELOOP
    return False


def _walk(directory: str, rel: str, ancestors: set[str], found: list[tuple[str, str, int]]) -> None:
    try:
        names = sorted(os.listdir(directory))
    except OSError as exc:
        raise DataError(f"cannot list data directory {directory}: {exc.strerror or exc}") from exc
    for name in names:
        path = os.path.join(directory, name)
        child_rel = f"{rel}/{name}" if rel else name
        if not name.isascii() and not is_utf8(name):  # it enters the fingerprint, the snapshot and the manifest
            raise DataError(
                f"DATA_ROOT holds {path!r}, a name with bytes that are not UTF-8; expected UTF-8 file and directory "
                "names (rename it, e.g. `convmv -f latin1 -t utf8`)"
            )
        check_token_name(name, path)
        if os.path.isdir(path):
            real = os.path.realpath(path)
            if real in ancestors:
                raise DataError(f"symlink loop in DATA_ROOT at {path} (points back to {real})")
            _walk(path, child_rel, ancestors | {real}, found)
        elif os.path.isfile(path):
            found.append((child_rel, path, os.path.getsize(path)))
        elif _is_symlink_loop(path):
            raise DataError(f"symlink loop in DATA_ROOT at {path}; expected a file or directory")
        elif os.path.islink(path) and not os.path.exists(path):  # not a loop: a symlink to nothing
            raise DataError(f"broken symlink in DATA_ROOT: {path}")
        else:  # a FIFO, a socket, a device, or a symlink to one (-> /dev/zero): never data, never skipped in silence
            link = f", a symlink to {os.path.realpath(path)}" if os.path.islink(path) else ""
            raise DataError(
                f"DATA_ROOT holds {path}{link}, {kind_of(path)}; expected only regular files and directories"
            )


def _progress(done: int, total: int, started: float) -> None:
    elapsed = max(time.monotonic() - started, 1e-9)
    rate = done / elapsed / 1e6
    print(f"\rfingerprint: {done / 1e6:,.0f}/{total / 1e6:,.0f} MB ({rate:,.0f} MB/s)", end="", file=sys.stderr)
