"""The artifact store interface: one set of verbs, a backend per URI scheme.

Keys are ``/``-separated paths relative to the store's root URI. Every backend guarantees:
- ``put_atomic`` never exposes a partial object at the final key (tmp write, validate, move);
- ``put_if_absent`` creates an object only when none exists (the run marker);
- ``put_if_match`` replaces an object only when its current version token matches (compare-and-swap);
- ``list`` returns entries sorted by key, at a cost proportional to the number of objects: names,
  sizes, times, and a checksum only where the backend has one for free (S3's ETag). A local listing
  reads no file's contents (``checksum`` is None); a caller that needs a checksum asks for it, per
  key, with :meth:`Store.checksum`.
"""

from __future__ import annotations

import abc

from pydantic import BaseModel, ConfigDict

from ml8s.errors import IntegrityError, StoreError


class ObjectInfo(BaseModel):
    """A listed object: key relative to the store root, size in bytes, modification time (epoch seconds).

    ``checksum`` is what the listing carries at no extra cost: the ETag on S3 (unquoted), None locally,
    where it would mean reading every byte listed. It equals :meth:`Store.checksum` of the key when set.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    key: str
    size: int
    checksum: str | None = None
    mtime: float
    # When the object last changed by the store's clock, where that differs from ``mtime`` and cannot be
    # set back: locally max(st_mtime, st_ctime) (utime moves st_ctime to now). None: ``mtime`` is that
    # already (S3's LastModified, which the server sets on every write).
    changed: float | None = None

    @property
    def changed_at(self) -> float:
        """The time an age is measured from that no writer can backdate (``changed``, else ``mtime``)."""
        return self.mtime if self.changed is None else self.changed


class Upload(BaseModel):
    """A multipart upload begun and neither completed nor aborted: ``key`` relative to the store root, the server's
    ``upload_id``, and ``initiated`` (epoch seconds by the store's clock; None where the listing gave no time)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    key: str
    upload_id: str
    initiated: float | None


class Versioned(BaseModel):
    """An object's bytes with the token that ``put_if_match`` compares (ETag, or sha256 locally)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    data: bytes
    token: str


class WriteResult(BaseModel):
    """What an atomic write validated: final key, byte count and sha256."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    key: str
    size: int
    sha256: str


class Store(abc.ABC):
    """Common interface of the local and S3 backends."""

    root_uri: str

    @abc.abstractmethod
    def put_atomic(self, key: str, data: bytes, *, tmp_key: str) -> WriteResult:
        """Write ``data`` to ``tmp_key``, validate size and sha256, then move it to ``key``."""

    @abc.abstractmethod
    def put_file_atomic(self, key: str, path: str, *, tmp_key: str) -> WriteResult:
        """Like :meth:`put_atomic` for a local file, streamed."""

    def put_file_expecting(self, key: str, path: str, *, tmp_key: str, sha256: str, size: int) -> WriteResult:
        """:meth:`put_file_atomic` of a file the caller has already hashed (``sha256``, ``size``): what landed
        must equal that, else :class:`ml8s.errors.IntegrityError` (the file changed since it was hashed) and
        ``key`` does not hold the file (this default deletes what it stored; the local backend moves nothing).
        A backend that can check the landed bytes against the expected hash directly overrides this to
        spare a hashing pass (the local one does)."""
        landed = self.put_file_atomic(key, path, tmp_key=tmp_key)
        if (landed.sha256, landed.size) != (sha256, size):
            self.delete(key)
            raise IntegrityError(
                f"{self.uri(key)}: stored {landed.size} bytes sha256 {landed.sha256} from {path}, expected "
                f"{size} bytes sha256 {sha256} (the file changed since it was hashed)"
            )
        return landed

    def put_staged(self, key: str, path: str, *, tmp_key: str, sha256: str, size: int) -> WriteResult:
        """:meth:`put_file_expecting` of a private copy the caller staged in this store (the local backend's
        ``stage``): a backend that can moves it into place without copying it again (the local one does)."""
        return self.put_file_expecting(key, path, tmp_key=tmp_key, sha256=sha256, size=size)

    @abc.abstractmethod
    def put_if_absent(self, key: str, data: bytes) -> bool:
        """Create ``key`` only if it does not exist; False when it already did."""

    @abc.abstractmethod
    def put_if_match(self, key: str, data: bytes, token: str | None) -> str:
        """Replace ``key`` only if its token equals ``token`` (None: only if absent). Returns the new token.

        Raises :class:`ml8s.errors.PreconditionFailedError` when the object changed.
        """

    def irregular(self, prefix: str) -> list[str]:
        """Keys under ``prefix`` that are no regular file or directory (a symbolic link, FIFO, device):
        none in an object store, which holds nothing but objects; the local backend overrides this."""
        del prefix
        return []

    def link_info(self, key: str) -> ObjectInfo | None:
        """The symbolic link at ``key`` itself (its own size and times; a listing gives its target's), None when
        no link is there: always None in an object store, which holds no links; the local backend overrides it."""
        del key
        return None

    def uploads(self, prefix: str) -> list[Upload]:
        """The multipart uploads in progress to keys under ``prefix`` (``prefix`` ending in "/": inside that folder),
        sorted by key and upload id: none in a store without them (a local one); the S3 backend overrides this."""
        del prefix
        return []

    def abort_upload(self, key: str, upload_id: str) -> bool:
        """Abort upload ``upload_id`` of ``key`` (its parts freed); False when the server has no such upload (completed
        or aborted since it was listed). This default refuses (StoreError): only a store that lists uploads has any."""
        del upload_id
        raise StoreError(f"{self.uri(key)}: this store has no multipart uploads to abort; expected an S3 store")

    def clock(self, probe_key: str) -> float:
        """The store's own current time (epoch seconds): the modification time it gives an object written
        now at ``probe_key`` (deleted again). Ages compared with it are ordered by one clock, the store's,
        however far the local clock is off (S3 times have whole seconds: up to 1 s behind)."""
        self.put_if_absent(probe_key, b"")
        try:
            found = [info.changed_at for info in self.list(probe_key) if info.key == probe_key]
        finally:
            self.delete(probe_key)
        if not found:
            raise IntegrityError(f"{self.uri(probe_key)}: written to read the store's time, but not listed")
        return found[0]

    @abc.abstractmethod
    def get(self, key: str, *, if_match: str | None = None, max_bytes: int | None = None) -> bytes:
        """The object's bytes; :class:`ml8s.errors.NotFoundError` when absent.

        With ``max_bytes``, a strict read: an object larger than that is
        :class:`ml8s.errors.ObjectTooLargeError` before its bytes are read, and locally a symbolic link is
        :class:`ml8s.errors.UnsafeObjectError` (never followed). A FIFO or device is refused either way.

        With ``if_match``, only if the object's version token (ETag on S3, sha256 locally) still equals
        it: :class:`ml8s.errors.PreconditionFailedError` otherwise. The data loader reads this way, so
        the bytes parsed are the bytes that were fingerprinted.
        """

    @abc.abstractmethod
    def get_versioned(self, key: str, *, max_bytes: int | None = None) -> Versioned:
        """The object's bytes and its compare-and-swap token (``max_bytes``: a strict read, as :meth:`get`)."""

    def get_range(self, key: str, start: int, length: int) -> bytes:
        """At most ``length`` bytes of the object from byte ``start`` (fewer where it ends first), never more
        read or sent: a large object's header without its body. :class:`ml8s.errors.NotFoundError` when
        absent; locally a symbolic link, FIFO or device is :class:`ml8s.errors.UnsafeObjectError`. This
        default refuses (StoreError); the local and S3 backends read the range."""
        del start, length
        raise StoreError(f"{self.uri(key)}: this store reads no byte ranges; expected a local or S3 store")

    @abc.abstractmethod
    def download(self, key: str, path: str) -> WriteResult:
        """Copy the object to a local file, returning its size and sha256."""

    @abc.abstractmethod
    def digest(self, key: str) -> WriteResult:
        """The object's size and sha256, streamed, never held in memory whole (a feature matrix can be gigabytes);
        :class:`ml8s.errors.NotFoundError` when absent."""

    @abc.abstractmethod
    def exists(self, key: str) -> bool: ...

    @abc.abstractmethod
    def list(self, prefix: str) -> list[ObjectInfo]:
        """Every object under ``prefix`` (recursive), sorted by key; never reads an object's contents."""

    def checksum(self, key: str) -> str:
        """The object's version token, the value ``get(if_match=)`` compares: its ETag on S3, its sha256 locally.

        Costs one request on S3 and one streamed read of the file locally; :class:`ml8s.errors.NotFoundError`
        when absent. This default reads the object; the backends override it with the cheaper way.
        """
        return self.get_versioned(key).token

    @abc.abstractmethod
    def delete(self, key: str) -> None:
        """Delete ``key``; deleting a missing key is not an error. Locally, the directories this leaves empty
        are removed too, up to (not including) the root."""

    def uri(self, key: str) -> str:
        return f"{self.root_uri}/{key}" if key else self.root_uri
