"""S3 atomic writes: upload to a tmp key (multipart above the threshold), check what the server stored, copy."""

from __future__ import annotations

import contextlib
import functools
import io
import os
from collections.abc import Iterator
from typing import IO, TYPE_CHECKING

from ml8s.errors import IntegrityError, NotFoundError, PreconditionFailedError, StoreError, StoreUnavailableError
from ml8s.store.base import WriteResult
from ml8s.store.s3.client import MiB, S3Base, encrypted, log, unquote
from ml8s.store.s3.digest import Digest

if TYPE_CHECKING:
    from typing import TypedDict

    from mypy_boto3_s3.type_defs import (
        AbortMultipartUploadOutputTypeDef,
        CompletedMultipartUploadTypeDef,
        CompletedPartTypeDef,
        PutObjectRequestTypeDef,
        UploadPartCopyOutputTypeDef,
        UploadPartCopyRequestTypeDef,
        UploadPartOutputTypeDef,
        UploadPartRequestTypeDef,
    )

    class _Upload(TypedDict):
        Bucket: str
        Key: str
        UploadId: str


MAX_COPY = 5 * 1024 * MiB  # CopyObject's limit; larger objects are copied part by part


class S3Writes(S3Base):
    # The running job's client, looked up on its thread when the part is sent (a partial of self._client's method
    # would keep the first try's client, and its botocore retries, for every try after a late one).
    def _upload_part(self, request: UploadPartRequestTypeDef) -> UploadPartOutputTypeDef:
        return self._client.upload_part(**request)

    def _upload_part_copy(self, request: UploadPartCopyRequestTypeDef) -> UploadPartCopyOutputTypeDef:
        return self._client.upload_part_copy(**request)

    # -- atomic writes --------------------------------------------------------------------------
    def put_atomic(self, key: str, data: bytes, *, tmp_key: str) -> WriteResult:
        return self._put_validated(key, tmp_key, io.BytesIO(data), len(data))

    def put_file_atomic(self, key: str, path: str, *, tmp_key: str) -> WriteResult:
        try:
            size, handle = os.path.getsize(path), open(path, "rb")  # closed below
        except OSError as exc:
            raise StoreError(f"cannot read {path} to upload it to {self.uri(key)}: {exc.strerror or exc}") from exc
        with handle:
            try:
                return self._put_validated(key, tmp_key, handle, size)
            except OSError as exc:  # reading the source (boto's own failures are BotoCoreErrors, mapped)
                raise StoreError(
                    f"cannot read {path} while uploading it to {self.uri(key)}: {exc.strerror or exc}; expected a "
                    f"readable file ({self.uri(key)} not written)"
                ) from exc

    def _put_validated(self, key: str, tmp_key: str, source: IO[bytes], size: int) -> WriteResult:
        """Upload to ``tmp_key`` hashing as it reads, check what the server stored, copy to ``key``, delete tmp."""
        tmp, digest = self._key(tmp_key), Digest()
        if size <= self.multipart_threshold:
            request = self._put_request(tmp_key, source.read(), digest)
            with self._errors("PUT", tmp_key):
                self._bounded("PUT", tmp_key, lambda: self._client.put_object(**request), sent=size)
        else:
            with self._multipart(tmp_key, size, own_key=True) as (upload, parts):
                while chunk := source.read(max(self.part_size, -(-size // 10_000))):
                    sha, md5 = digest.add(chunk)
                    number = len(parts) + 1
                    part: UploadPartRequestTypeDef = {
                        "Bucket": upload["Bucket"],
                        "Key": upload["Key"],
                        "UploadId": upload["UploadId"],
                        "PartNumber": number,
                        "Body": chunk,
                        "ChecksumAlgorithm": "SHA256",
                        "ChecksumSHA256": sha,
                        "ContentMD5": md5,
                    }
                    send = functools.partial(self._upload_part, part)
                    out = self._bounded("part PUT", tmp_key, send, sent=len(chunk))
                    self._etag(out.get("ETag"), "part PUT", tmp_key)  # refuses an answer without one
                    # as the server sent it (quoted): what CompleteMultipartUpload compares
                    parts.append(_part(number, out["ETag"], out.get("ChecksumSHA256")))
        try:
            etag = self._validate(tmp_key, digest)
        except IntegrityError:
            self._delete_quietly(tmp_key)
            raise
        try:
            if digest.size > MAX_COPY:
                self._copy_parts(key, tmp, etag, digest)
                self._validate(key, digest)
            else:
                with self._errors("COPY", key, f"{self.uri(tmp_key)} unchanged since validated (ETag {etag})"):
                    copy = self._bounded(  # copied by the server: as long as sending the bytes may take
                        "COPY",
                        key,
                        lambda: self._client.copy_object(
                            Bucket=self.bucket,
                            Key=self._key(key),
                            CopySource={"Bucket": self.bucket, "Key": tmp},
                            CopySourceIfMatch=etag,
                            ChecksumAlgorithm="SHA256",
                        ),
                        sent=digest.size,
                    )
                result, kms = copy["CopyObjectResult"], encrypted(copy)
                self._check(key, digest, digest.size, result.get("ETag", ""), result.get("ChecksumSHA256"), kms)
        except PreconditionFailedError as exc:  # the tmp object changed after it was validated
            raise IntegrityError(exc.message) from exc
        self._delete_quietly(tmp_key)  # on failure the final object is in place; the cleanup job takes the tmp key
        return WriteResult(key=key, size=digest.size, sha256=digest.sha256().hex())

    def _copy_parts(self, key: str, tmp: str, etag: str, digest: Digest) -> None:
        """Copy over 5 GiB by UploadPartCopy on the upload's part boundaries (so the same multipart ETag)."""
        start = 0
        with self._multipart(key, digest.size) as (upload, parts):
            for _, _, size in digest.parts:
                request: UploadPartCopyRequestTypeDef = {
                    "Bucket": upload["Bucket"],
                    "Key": upload["Key"],
                    "UploadId": upload["UploadId"],
                    "PartNumber": len(parts) + 1,
                    "CopySource": {"Bucket": self.bucket, "Key": tmp},
                    "CopySourceIfMatch": etag,
                    "CopySourceRange": f"bytes={start}-{start + size - 1}",
                }
                copy = functools.partial(self._upload_part_copy, request)
                out = self._bounded("part COPY", key, copy, sent=size)["CopyPartResult"]
                start += size
                parts.append(_part(len(parts) + 1, out.get("ETag", ""), out.get("ChecksumSHA256")))

    @contextlib.contextmanager
    def _multipart(
        self, key: str, size: int, *, own_key: bool = False
    ) -> Iterator[tuple[_Upload, list[CompletedPartTypeDef]]]:
        """A multipart upload of ``size`` bytes to ``key``: completed with the parts the caller appends, aborted on
        any failure (completing takes the server a time that grows with the size, so the deadline does too).

        ``own_key``: ``key`` is this writer's alone (a tmp key): every other upload to it is one this writer
        started and never learned of (a create whose answer was lost, tried again), aborted too, done or failed.
        """
        parts: list[CompletedPartTypeDef] = []
        op = "multipart PUT"
        with self._errors(op, key):
            created = self._bounded(
                op,
                key,
                lambda: self._client.create_multipart_upload(
                    Bucket=self.bucket, Key=self._key(key), ChecksumAlgorithm="SHA256"
                ),
            )
            upload: _Upload = {"Bucket": self.bucket, "Key": self._key(key), "UploadId": created["UploadId"]}
            try:
                yield upload, parts
                done: CompletedMultipartUploadTypeDef = {"Parts": parts}
                self._bounded(
                    op, key, lambda: self._client.complete_multipart_upload(**upload, MultipartUpload=done), sent=size
                )
            except BaseException:
                self._abort_uploads(key, upload["UploadId"], others=own_key)
                raise
            if own_key:
                self._abort_uploads(key, None, others=True)

    def _abort_uploads(self, key: str, upload_id: str | None, *, others: bool) -> None:
        """Abort upload ``upload_id`` of ``key`` and (``others``) every other upload to it the server lists; a
        warning for one that could not be. An upload never aborted keeps its parts, billed, for ever: it was tried
        once, its failure silenced, so the endpoint failing the upload (a 5xx, a dropped connection) lost it too.
        Tried AWS_MAX_ATTEMPTS times: an abort is idempotent (one that landed answers NoSuchUpload after)."""
        full = self._key(key)
        if upload_id is not None and not self._aborted(key, full, upload_id):
            return  # the endpoint does not answer: listing it would wait as long again, for nothing
        if not others:
            return
        try:
            with self._errors("LIST uploads", key):
                listed = self._bounded(
                    "LIST uploads", key, lambda: self._client.list_multipart_uploads(Bucket=self.bucket, Prefix=full)
                )
        except StoreError as exc:
            log.warning("could not list the multipart uploads of %s to abort them: %s", self.uri(key), exc)
            return
        found = sorted({u.get("UploadId", "") for u in listed.get("Uploads", []) if u.get("Key") == full})
        for other in (i for i in found if i and i != upload_id):
            if not self._aborted(key, full, other):
                return

    def _aborted(self, key: str, full: str, upload_id: str) -> bool:
        """Abort one upload (gone already counts); False, with a warning, when the endpoint did not answer."""
        try:
            with self._errors("multipart abort", key):
                self._bounded("multipart abort", key, functools.partial(self._abort_upload, full, upload_id))
        except NotFoundError:
            return True  # NoSuchUpload: aborted already (a try whose answer was lost) or completed
        except StoreError as exc:
            log.warning(
                "could not abort multipart upload %s of %s: %s; its parts stay billed until it is aborted (a bucket "
                "lifecycle rule AbortIncompleteMultipartUpload does it)",
                upload_id,
                self.uri(key),
                exc,
            )
            return not isinstance(exc, StoreUnavailableError)
        return True

    def _abort_upload(self, full_key: str, upload_id: str) -> AbortMultipartUploadOutputTypeDef:
        return self._client.abort_multipart_upload(Bucket=self.bucket, Key=full_key, UploadId=upload_id)

    def _validate(self, key: str, digest: Digest) -> str:
        """HeadObject ``key`` and check it against ``digest``; returns its ETag."""
        with self._errors("HEAD", key):
            head = self._bounded(
                "HEAD",
                key,
                lambda: self._client.head_object(Bucket=self.bucket, Key=self._key(key), ChecksumMode="ENABLED"),
            )
        kms = encrypted(head)
        etag = self._etag(head.get("ETag"), "HEAD", key)
        self._check(key, digest, head.get("ContentLength", -1), etag, head.get("ChecksumSHA256"), kms)
        return etag

    def _check(self, key: str, digest: Digest, size: int, etag: str, checksum: str | None, kms: bool) -> None:
        """The size must match, a reported sha256 must match, and the ETag be our md5 (encrypted: the sha256)."""
        sum_ok = checksum in digest.checksums() if checksum else None
        if size == digest.size and sum_ok is not False and (sum_ok if kms else unquote(etag) in digest.etags()):
            return
        raise IntegrityError(
            f"{self.uri(key)}: expected {digest.size} bytes sha256 {digest.sha256().hex()} (ETag one of "
            f"{sorted(digest.etags())}); the server has {size} bytes, ETag {etag}, checksum {checksum or '<none>'}"
        )

    def _put_request(self, key: str, data: bytes, digest: Digest) -> PutObjectRequestTypeDef:
        sha, md5 = digest.add(data)
        return {
            "Bucket": self.bucket,
            "Key": self._key(key),
            "Body": data,
            "ChecksumAlgorithm": "SHA256",
            "ChecksumSHA256": sha,
            "ContentMD5": md5,
        }


def _part(number: int, etag: str, checksum: str | None) -> CompletedPartTypeDef:
    """A part for CompleteMultipartUpload, with its sha256 only where the server reported one."""
    part: CompletedPartTypeDef = {"PartNumber": number, "ETag": etag}
    if checksum:
        part["ChecksumSHA256"] = checksum
    return part
