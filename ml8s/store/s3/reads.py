"""S3 reads: streamed GETs (a body cut short is fetched again), HEAD, listings and deletes."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import io
import os
import random
import time
from collections.abc import Callable
from typing import IO, TYPE_CHECKING, Protocol

from ml8s.errors import NotFoundError, ObjectTooLargeError, StoreError, UnsafeObjectError
from ml8s.store._files import write_error
from ml8s.store.base import ObjectInfo, Versioned, WriteResult
from ml8s.store.s3.client import CUT_SHORT, MiB, S3Base, unquote
from ml8s.store.s3.deadline import Job, Late, within
from ml8s.text import shown

if TYPE_CHECKING:
    from mypy_boto3_s3.type_defs import GetObjectRequestTypeDef, ListObjectsV2RequestTypeDef


class _BodyCut(Exception):
    """A body cut short while it streamed in (``error``, botocore's): the GET is sent again."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


class _Sink(Protocol):
    """What a streamed GET writes into: a file, a buffer or a hash. A body cut short rewinds it (``seek(0)``,
    ``truncate()``) and the GET starts again."""

    def write(self, data: bytes, /) -> int: ...
    def seek(self, offset: int, /) -> int: ...
    def truncate(self) -> int: ...
    def tell(self) -> int: ...


class _HashSink:
    """A :class:`_Sink` that keeps the sha256 and the length of what it was given, and passes it on to ``copy``
    when there is one (a download hashes what it writes, never reading the file back)."""

    def __init__(self, copy: IO[bytes] | None = None) -> None:
        self._copy, self._hash, self._size = copy, hashlib.sha256(), 0

    def write(self, data: bytes, /) -> int:
        if self._copy is not None:
            self._copy.write(data)
        self._hash.update(data)
        self._size += len(data)
        return len(data)

    def seek(self, offset: int, /) -> int:
        if offset != 0:
            raise ValueError(f"a hash can only be rewound to its start, not to byte {offset}")
        if self._copy is not None:
            self._copy.seek(0)
            self._copy.truncate()
        self._hash, self._size = hashlib.sha256(), 0
        return 0

    def truncate(self) -> int:
        return self._size

    def tell(self) -> int:
        return self._size

    def hexdigest(self) -> str:
        return self._hash.hexdigest()


class S3Reads(S3Base):
    def get(self, key: str, *, if_match: str | None = None, max_bytes: int | None = None) -> bytes:
        buffer = io.BytesIO()
        self._read(key, if_match, buffer, max_bytes)
        return buffer.getvalue()

    def get_versioned(self, key: str, *, max_bytes: int | None = None) -> Versioned:
        buffer = io.BytesIO()
        token = self._read(key, None, buffer, max_bytes)
        return Versioned(data=buffer.getvalue(), token=token)

    def get_range(self, key: str, start: int, length: int) -> bytes:
        """One ranged GET (Store.get_range); a server sending more than the range is cut off at ``length``."""
        if start < 0 or length < 0:
            raise StoreError(f"{self.uri(key)}: byte range {start}+{length}; expected a start and length >= 0")
        if not length:
            return b""
        buffer = io.BytesIO()
        self._read(key, None, buffer, length, byte_range=f"bytes={start}-{start + length - 1}")
        return buffer.getvalue()

    def download(self, key: str, path: str) -> WriteResult:
        try:
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
            with open(path, "wb") as handle:
                sink = _HashSink(handle)
                self._read(key, None, sink)
                handle.flush()
                os.fsync(handle.fileno())
        except BaseException as exc:
            with contextlib.suppress(OSError):
                os.unlink(path)
            if isinstance(exc, OSError):  # the local side (a full disk, no directory): as LocalStore.download says it
                raise write_error(path, exc) from exc
            raise
        return WriteResult(key=key, size=sink.tell(), sha256=sink.hexdigest())

    def digest(self, key: str) -> WriteResult:
        """The object's size and sha256, hashed as its body streams in: nothing held, nothing written."""
        sink = _HashSink()
        self._read(key, None, sink)
        return WriteResult(key=key, size=sink.tell(), sha256=sink.hexdigest())

    def _read(
        self, key: str, if_match: str | None, out: _Sink, max_bytes: int | None = None, byte_range: str = ""
    ) -> str:
        """Stream the object (``byte_range``: that HTTP Range of it) into ``out``; returns its ETag. A body cut
        short is fetched again (GET is idempotent). ``max_bytes``: an object whose Content-Length is larger is
        refused before its body is read, and the body is never read past it (a server sending more than it
        announced)."""
        request: GetObjectRequestTypeDef = {"Bucket": self.bucket, "Key": self._key(key)}
        if byte_range:
            request["Range"] = byte_range
        if if_match is not None:
            request["IfMatch"] = unquote(if_match)
        used = 0  # tries so far, botocore's retries included: AWS_MAX_ATTEMPTS in all (.deadline)
        while True:
            out.seek(0)
            out.truncate()
            job = self._clients.job(first=used + 1, limit=self.attempts - used)
            with self._errors("GET", key, f"version {if_match}" if if_match else ""):
                fetch = functools.partial(self._fetch, request, key, out, max_bytes)
                try:  # the whole answer, headers and body, within the request deadline
                    return within(fetch, seconds=self.deadline, sent=0, job=job)
                except Late as late:
                    used += job.used
                    self._say("GetObject", used, self.attempts, str(late))
                    if used >= self.attempts:
                        raise self._late("GET", key, self.attempts) from None
                except _BodyCut as cut:
                    used += job.used
                    if used >= self.attempts:
                        raise cut.error from None
            time.sleep(random.uniform(0, 0.05 * 2**used))

    def _fetch(self, request: GetObjectRequestTypeDef, key: str, out: _Sink, max_bytes: int | None, job: Job) -> str:
        """One GET into ``out``, on the request's own thread; its ETag. Nothing is written once ``job`` is
        abandoned (the caller has taken ``out`` back)."""
        response = self._client.get_object(**request)
        body = response["Body"]
        try:
            # no Content-Length (a chunked answer): max_bytes is still checked as the body streams in
            _check_length(self.uri(key), response.get("ContentLength", 0), max_bytes, body.close)
            for chunk in body.iter_chunks(MiB):
                with job.guard:
                    if job.abandoned:
                        break
                    out.write(chunk)
                job.received += len(chunk)
                _check_length(self.uri(key), out.tell(), max_bytes, body.close)
        except CUT_SHORT as exc:
            raise _BodyCut(exc) from exc
        return self._etag(response.get("ETag"), "GET", key)

    def checksum(self, key: str) -> str:
        """The object's ETag (unquoted), from one HeadObject: what a listing reports, without the listing."""
        with self._errors("HEAD", key):
            head = self._bounded("HEAD", key, lambda: self._client.head_object(Bucket=self.bucket, Key=self._key(key)))
        return self._etag(head.get("ETag"), "HEAD", key)

    def exists(self, key: str) -> bool:
        try:
            with self._errors("HEAD", key):
                self._bounded("HEAD", key, lambda: self._client.head_object(Bucket=self.bucket, Key=self._key(key)))
        except NotFoundError:
            return False
        return True

    def list(self, prefix: str) -> list[ObjectInfo]:
        rel, root = "/".join(p for p in prefix.split("/") if p), f"{self.prefix}/" if self.prefix else ""
        found: list[ObjectInfo] = []
        request: ListObjectsV2RequestTypeDef = {
            "Bucket": self.bucket,
            "Prefix": self._key(rel) if rel else root,
            "MaxKeys": self.page_size,
        }
        tokens: set[str] = set()
        last = ""  # the last key of the pages before: S3 lists in key order, so a page never goes back to it
        with self._errors("LIST", rel):
            while True:  # page by page, each request within the deadline (a paginator's pages are not)
                page = self._bounded("LIST", rel, lambda: self._client.list_objects_v2(**request))
                contents = page.get("Contents", [])
                if contents and last and (first := contents[0].get("Key", "")) <= last:
                    raise StoreError(
                        f"LIST {self.uri(rel)}: {self.endpoint} sent a page starting at {shown(first)[:80]!r}, not "
                        f"after the page before ({shown(last)[:80]!r}); expected pages in key order (a page sent "
                        "again lists its objects twice, pages sent over and over never end)"
                    )
                for item in contents:
                    full, stamp = item.get("Key", ""), item.get("LastModified")
                    last = max(last, full)
                    name = full.removeprefix(root)
                    # S3 prefixes are strings, not directories: keep ``rel`` itself and the keys below it, as
                    # locally; "folder" keys (ending in "/", the root's own marker shows as "") are not objects
                    # of the store, nor is a key outside the root that a broken server lists
                    if (
                        full.startswith(root)
                        and name
                        and not name.endswith("/")
                        and (not rel or name == rel or name.startswith(f"{rel}/"))
                    ):
                        self._addressable(name)
                        etag, mtime = unquote(item.get("ETag", "")), stamp.timestamp() if stamp else 0.0
                        found.append(ObjectInfo(key=name, size=item.get("Size", 0), checksum=etag, mtime=mtime))
                token = page.get("NextContinuationToken", "")
                if not page.get("IsTruncated"):
                    break
                if not token:  # stopping here (as botocore's paginator did, in silence) would leave keys out
                    raise StoreError(
                        f"LIST {self.uri(rel)}: {self.endpoint} said the listing goes on (IsTruncated) but sent no "
                        "NextContinuationToken; expected a token to fetch the rest (a short listing loses objects)"
                    )
                if token in tokens:
                    raise StoreError(
                        f"LIST {self.uri(rel)}: {self.endpoint} sent the continuation token {shown(token)[:80]!r} "
                        "twice; expected a new one per page (the listing would never end)"
                    )
                tokens.add(token)
                request["ContinuationToken"] = token
        return sorted(found, key=lambda info: info.key)

    def delete(self, key: str) -> None:
        with self._errors("DELETE", key):
            self._bounded("DELETE", key, lambda: self._client.delete_object(Bucket=self.bucket, Key=self._key(key)))

    def _addressable(self, name: str) -> None:
        """UnsafeObjectError for a listed key that ``_key`` would map to another object: ``a//b``, ``/a``,
        ``a/../b`` (S3 keeps them literally). Listed, it would be read as, or deleted as, ``a/b`` (GC, tmp
        cleanup and quarantine delete what they list), or fail as missing after a fingerprint counted it."""
        if any(part in ("", ".", "..") for part in name.split("/")):
            found = f"s3://{self.bucket}/{self.prefix}/{name}" if self.prefix else f"s3://{self.bucket}/{name}"
            raise UnsafeObjectError(
                f"{found} has an empty, '.' or '..' segment, so this store cannot address it (it would read or "
                "delete another key); expected keys of non-empty segments: rename or remove it"
            )


def _check_length(uri: str, size: int, max_bytes: int | None, close: Callable[[], None]) -> None:
    if max_bytes is not None and size > max_bytes:
        close()
        raise ObjectTooLargeError(f"{uri} holds {size} bytes or more; expected at most {max_bytes} (not read)")
