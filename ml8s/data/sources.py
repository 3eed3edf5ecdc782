"""DATA_ROOT as a source: fingerprint it (SPEC §2) and read back exactly the bytes fingerprinted.

Local data is hashed by content; an object-store prefix is fingerprinted from its listing (ETag,
size) and each object is then read with ``If-Match`` its listed ETag, so a concurrent overwrite
fails the run instead of training on data nobody fingerprinted.
"""

from __future__ import annotations

import errno
import functools
import hashlib
import io
import os
from collections.abc import Callable, Collection, Iterator
from concurrent.futures import Future, ThreadPoolExecutor

from ml8s.data.csv_lines import FileBytes
from ml8s.data.fingerprint import (
    FileEntry,
    Fingerprint,
    ObjectEntry,
    fingerprint_entries,
    fingerprint_listing,
    fingerprint_local,
    is_data_key,
)
from ml8s.errors import (
    DataChangedError,
    DataError,
    NotFoundError,
    PreconditionFailedError,
    StoreError,
    UnsafeObjectError,
)
from ml8s.store import Store, open_regular, open_store


def fingerprint_data(data_root: str) -> Fingerprint:
    """Fingerprint DATA_ROOT (``file://`` or ``s3://``, a directory/prefix or a single file/object)."""
    if data_root.startswith("file://"):
        return fingerprint_local(data_root[len("file://") :])
    if data_root.startswith("s3://"):
        store = open_store(data_root)
        listed = store.list("")
        parent, _, name = data_root.rpartition("/")
        # no key under the prefix: maybe it names one object, at the bucket's top too (parent "s3://bucket"),
        # not the bucket itself ("s3://bucket": parent "s3:/")
        if not listed and name and parent != "s3:/":
            store = open_store(parent)
            listed = [o for o in store.list(name) if o.key == name]
        # Folder keys ("prefix/", "prefix/sub/") are dropped here, so no reader downstream ever sees one.
        objects = [
            ObjectEntry(key=o.key, etag=o.checksum or store.checksum(o.key), size=o.size)
            for o in listed
            if is_data_key(o.key)
        ]
        return fingerprint_listing(data_root, "", objects)
    raise DataError(f"DATA_ROOT={data_root!r} has an unsupported scheme; expected a local path, file:// or s3://")


def restrict(fingerprint: Fingerprint, paths: Collection[str]) -> Fingerprint:
    """The fingerprint of exactly ``paths`` (relative to DATA_ROOT): what a run trained on when DATA_ROOT held
    only those files. Used to re-train a recorded version after new files arrived beside them.

    Raises:
        DataError: a path is not under DATA_ROOT any more.
    """
    entries = tuple(e for e in fingerprint.entries if e.relative_path in paths)
    gone = sorted(set(paths) - {e.relative_path for e in entries})
    if gone:
        raise DataError(f"DATA_ROOT {fingerprint.data_root} no longer holds {gone[:3]}; expected every recorded file")
    return Fingerprint(data_root=fingerprint.data_root, fingerprint=fingerprint_entries(entries), entries=entries)


def read_verified(fingerprint: Fingerprint) -> Iterator[tuple[FileEntry, bytes]]:
    """Each fingerprinted file's bytes, in fingerprint order, checked against its entry."""
    for entry, data, check in read_checking(fingerprint):
        check()
        yield entry, data if isinstance(data, bytes) else bytes(data)  # bytes: read without reuse, no copy
        del data


Check = Callable[[], None]


def read_checking(fingerprint: Fingerprint, *, reuse: bool = False) -> Iterator[tuple[FileEntry, FileBytes, Check]]:
    """:func:`read_verified` whose check of a local file (a sha256 of its bytes) runs in a thread while the
    caller parses them (hashlib releases the GIL): the caller calls the third item before it uses anything
    parsed from the bytes, and when parsing fails (a file changed since it was fingerprinted is named as
    such, not as the bad cell it may now hold). An object is checked by its read (``If-Match``) already.

    With ``reuse``, local files are read into two buffers in turn, each filled again for the file after next (a
    ``bytearray``): a fresh buffer per file was a page fault per 4 KiB of data (420k at 20M rows, seconds of
    system time). The next file is read on a thread of its own while the caller parses one: read between two
    files, a 345 MB file took 0.25 s of the 2.9 s a file took, on one core. The caller must keep no reference to
    a file's bytes once it asks for the next file; what Arrow made of them without a copy holds the buffer
    exported, and such a buffer is left to its holders and a new one made.

    Raises:
        DataChangedError: from the check, or when the caller comes to a file that cannot be read, or to an object
            that has changed.
    """
    if fingerprint.data_root.startswith("s3://"):
        for entry, fetched in _read_objects(fingerprint):
            yield entry, fetched, _checked
        return
    root = fingerprint.data_root[len("file://") :]
    single = os.path.isfile(root)
    entries = fingerprint.entries
    if not entries:
        return

    def path_of(entry: FileEntry) -> str:
        return root if single else os.path.join(root, *entry.relative_path.split("/"))

    def read(entry: FileEntry, buffer: bytearray | None, hashed: Future[str] | None) -> FileBytes:
        if hashed is not None:
            hashed.exception()  # the hash has read the bytes last read into ``buffer`` before they are read over
        return _read_file(path_of(entry), buffer, reuse)  # ``buffer``: None without ``reuse``

    with (
        ThreadPoolExecutor(1, thread_name_prefix="ml8s-sha256") as hashing,
        ThreadPoolExecutor(1, thread_name_prefix="ml8s-read") as reading,
    ):
        spare: tuple[bytearray | None, Future[str] | None] = (None, None)  # a buffer for the file after next
        ahead = reading.submit(read, entries[0], None, None)
        for index, entry in enumerate(entries):
            data = ahead.result()
            digest = hashing.submit(_sha256, data)
            following = entries[index + 1] if index + 1 < len(entries) else None
            if following is not None and reuse:  # read now, into the buffer the caller gave back
                ahead = reading.submit(read, following, *spare)
            yield entry, data, functools.partial(_compare, path_of(entry), entry, len(data), digest)
            spare = (data if isinstance(data, bytearray) else None, digest)
            del data  # not held while the next file is read: the caller is done with it
            if following is not None and not reuse:
                digest.exception()
                ahead = reading.submit(read, following, None, None)


def _read_file(path: str, buffer: bytearray | None, reuse: bool) -> FileBytes:
    """A local file's bytes (into ``buffer`` with ``reuse``), a read error named as a change since the fingerprint."""
    try:  # not blocking: a FIFO put there since the fingerprint would block a plain open forever
        with open(open_regular(path, path, nofollow=False), "rb") as handle:
            return _read_into(handle, buffer) if reuse else handle.read()
    except UnsafeObjectError as exc:
        raise DataChangedError(
            f"{path} was fingerprinted as a regular file but is not one now ({exc.message}); expected it unchanged"
        ) from exc
    except (StoreError, OSError) as exc:  # gone, unreadable, a link loop
        cause = exc.__cause__ if isinstance(exc, StoreError) else exc
        loop = isinstance(cause, OSError) and cause.errno == errno.ELOOP
        why = "it is a symlink loop now" if loop else exc.message if isinstance(exc, StoreError) else str(exc)
        raise DataChangedError(
            f"{path} was fingerprinted but cannot be read now: {why}; expected it unchanged"
        ) from exc


def _read_into(handle: io.BufferedReader, buffer: bytearray | None) -> bytearray:
    """A whole file's bytes, read into ``buffer`` (resized to the file) unless something still holds it exported,
    then into a new one."""
    size = os.fstat(handle.fileno()).st_size
    if buffer is None or not _unexported(buffer):
        buffer = bytearray(size)
    elif len(buffer) > size:
        del buffer[size:]
    elif len(buffer) < size:
        buffer.extend(bytes(size - len(buffer)))
    read = 0
    with memoryview(buffer) as view:
        while read < size:
            count = handle.readinto(view[read:])
            if not count:
                break
            read += count
    del buffer[read:]  # a file cut short since the fstat: its bytes so far (its check then fails)
    buffer += handle.read()  # a file grown since: all of it
    return buffer


def _unexported(buffer: bytearray) -> bool:
    """Whether no buffer export of ``buffer`` is alive (an Arrow buffer made of it without a copy): a bytearray
    with one cannot change its size."""
    try:
        buffer.append(0)
    except BufferError:
        return False
    buffer.pop()
    return True


def _checked() -> None:
    """The check of bytes checked when they were read."""


def _sha256(data: FileBytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _compare(path: str, entry: FileEntry, size: int, digest: Future[str]) -> None:
    if digest.result() != entry.checksum or size != entry.size:
        raise DataChangedError(
            f"{path} changed after it was fingerprinted: expected sha256 {entry.checksum} ({entry.size} bytes), "
            f"read sha256 {digest.result()} ({size} bytes); re-run to fingerprint the new data"
        )


def _read_objects(fingerprint: Fingerprint) -> Iterator[tuple[FileEntry, bytes]]:
    store, prefix = _object_root(fingerprint)
    for entry in fingerprint.entries:
        if not prefix and not is_data_key(entry.relative_path):
            continue  # a "folder" object from a fingerprint made elsewhere: not data, as when fingerprinting
        key = prefix or entry.relative_path
        where = store.uri(key)
        try:
            data = store.get(key, if_match=entry.checksum)
        except (PreconditionFailedError, NotFoundError) as exc:
            raise DataChangedError(
                f"{where} changed after it was fingerprinted: expected ETag {entry.checksum} ({entry.size} bytes); "
                "re-run to fingerprint the new data"
            ) from exc
        if len(data) != entry.size:
            raise DataChangedError(f"{where} returned {len(data)} bytes; expected {entry.size} as listed")
        yield entry, data


def _object_root(fingerprint: Fingerprint) -> tuple[Store, str]:
    """The store of the prefix and ``""``; for a single-object DATA_ROOT, its parent's store and its name.

    A one-entry fingerprint named like the URI's last segment is ambiguous (``s3://b/x`` holding
    ``x/x``, or the object ``s3://b/x``): the prefix wins when the key exists under it.
    """
    store = open_store(fingerprint.data_root)
    parent, _, name = fingerprint.data_root.rpartition("/")
    entries = fingerprint.entries
    if len(entries) == 1 and entries[0].relative_path == name and not store.exists(name):
        return open_store(parent), name
    return store, ""
