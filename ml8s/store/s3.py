"""S3 backend (boto3; AWS, MinIO, radosgw): tmp upload, validate, copy, delete; conditional writes on ETags.

Uploads carry our sha256 (``x-amz-checksum-sha256``) and md5 (``Content-MD5``), so a server checking either
rejects corrupted bytes (AWS checks both, radosgw 16 the md5, moto neither). The stored object is then checked:
its size, and its ETag against our md5 (the server computes it from the bytes it got) or, where the ETag is no
md5 (SSE-KMS, SSE-C), the sha256 the server verified. Every sha256 the server reports must match too.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import io
import logging
import os
import random
import time
from collections.abc import Iterator, Mapping
from typing import IO, TYPE_CHECKING

import boto3
import botocore.session
from botocore import exceptions as boto
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from ml8s.errors import (
    ConfigError,
    IntegrityError,
    NotFoundError,
    PreconditionFailedError,
    RetryableStoreError,
    StoreError,
    StoreUnavailableError,
)
from ml8s.store.base import ObjectInfo, Store, Versioned, WriteResult

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client
    from mypy_boto3_s3.type_defs import CompletedPartTypeDef, GetObjectRequestTypeDef, PutObjectRequestTypeDef

log = logging.getLogger(__name__)
MiB = 1024 * 1024
MAX_COPY = 5 * 1024 * MiB  # CopyObject's limit; larger objects are copied part by part
_CUT_SHORT = (boto.HTTPClientError, boto.IncompleteReadError, boto.FlexibleChecksumError)  # while reading a body
_DIGEST = {"BadDigest", "InvalidDigest", "XAmzContentSHA256Mismatch", "XAmzContentChecksumMismatch"}
_SLOW = {"SlowDown", "Throttling", "ThrottlingException", "RequestTimeout", "OperationAborted"}


class _Digest:
    """sha256 and md5 of what was uploaded, with the per-part digests S3 combines for multipart objects.

    Each part is hashed once for its request headers; the whole-object digests are the part's own while
    there is one part (every single-request PUT), and are computed apart only once a second part arrives.
    """

    def __init__(self) -> None:
        self.sha, self.md5, self.size = hashlib.sha256(), hashlib.md5(usedforsecurity=False), 0
        self.parts: list[tuple[bytes, bytes, int]] = []  # (sha256, md5, size) of each part
        self._first: bytes | None = None  # the lone part's bytes, hashed into sha/md5 if a second one comes

    def add(self, data: bytes) -> tuple[str, str]:
        """Account for one part; returns its base64 sha256 and md5, the request's checksum headers."""
        part = (hashlib.sha256(data).digest(), hashlib.md5(data, usedforsecurity=False).digest(), len(data))
        if self.parts:
            for earlier in (self._first, data) if self._first is not None else (data,):
                self.sha.update(earlier)
                self.md5.update(earlier)
            self._first = None
        else:
            self._first = data
        self.size += len(data)
        self.parts.append(part)
        return _b64(part[0]), _b64(part[1])

    def sha256(self) -> bytes:
        return self.parts[0][0] if len(self.parts) == 1 else self.sha.digest()

    def md5_hex(self) -> str:
        return self.parts[0][1].hex() if len(self.parts) == 1 else self.md5.hexdigest()

    def etags(self) -> set[str]:
        """ETags a server computes for these bytes: the md5, or the md5 of the part md5s and ``-N``."""
        joined = hashlib.md5(b"".join(p[1] for p in self.parts), usedforsecurity=False).hexdigest()
        return {self.md5_hex(), f"{joined}-{len(self.parts)}"}

    def checksums(self) -> set[str]:
        """SHA256 checksums a server reports: full-object, or composite (sha256 of the part sha256s)."""
        composite = _b64(hashlib.sha256(b"".join(p[0] for p in self.parts)).digest())
        return {_b64(self.sha256()), composite, f"{composite}-{len(self.parts)}"}


class S3Store(Store):
    """A store rooted at ``s3://bucket/prefix``; keys are relative to the prefix.

    Read once from ``env`` (default ``os.environ``): ``AWS_ENDPOINT_URL`` (else ``FLYTE_AWS_ENDPOINT``; when
    set, path-style addressing), ``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY`` (else ``FLYTE_AWS_*``; else
    boto3's credential chain), ``AWS_SESSION_TOKEN``, ``AWS_REGION``/``AWS_DEFAULT_REGION`` (default
    us-east-1), ``AWS_MAX_ATTEMPTS`` (default 4, for idempotent requests).
    """

    def __init__(
        self,
        uri: str,
        env: Mapping[str, str] | None = None,
        *,
        multipart_threshold: int = 64 * MiB,
        part_size: int = 16 * MiB,
        page_size: int = 1000,
    ) -> None:
        bucket, _, prefix = uri.removeprefix("s3://").partition("/")
        env = os.environ if env is None else env
        if not uri.startswith("s3://") or not bucket:
            raise ConfigError(f"invalid S3 URI {uri!r}; expected s3://bucket/prefix")
        if not 5 * MiB <= part_size <= multipart_threshold:
            raise ConfigError(f"S3 part size {part_size}: expected ≥ 5 MiB and ≤ multipart_threshold")
        if not (attempts := env.get("AWS_MAX_ATTEMPTS", "4")).isdigit() or int(attempts) < 1:
            raise ConfigError(f"AWS_MAX_ATTEMPTS={attempts!r}; expected a positive integer")
        self.bucket, self.prefix = bucket, "/".join(p for p in prefix.split("/") if p)
        self.root_uri = f"s3://{bucket}/{self.prefix}".rstrip("/")
        self.multipart_threshold, self.part_size, self.page_size = multipart_threshold, part_size, page_size
        self.attempts, self._bucket_seen = int(attempts), False
        endpoint = _first(env, "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "FLYTE_AWS_ENDPOINT")
        core = botocore.session.get_session()
        core.set_config_variable("ignore_configured_endpoint_urls", True)  # the endpoint is the one from env
        session = boto3.session.Session(
            aws_access_key_id=_first(env, "AWS_ACCESS_KEY_ID", "FLYTE_AWS_ACCESS_KEY_ID"),
            aws_secret_access_key=_first(env, "AWS_SECRET_ACCESS_KEY", "FLYTE_AWS_SECRET_ACCESS_KEY"),
            aws_session_token=_first(env, "AWS_SESSION_TOKEN"),
            region_name=_first(env, "AWS_REGION", "AWS_DEFAULT_REGION") or "us-east-1",
            botocore_session=core,
        )
        # Bounded waits: a hung endpoint fails a request within seconds (and the chain's retry loop says so on
        # stderr) instead of holding a commit for minutes; a part upload's answer still fits in 30 s.
        config = Config(
            connect_timeout=5,
            read_timeout=30,
            s3={"addressing_style": "path" if endpoint else "auto"},
            retries={"mode": "standard", "total_max_attempts": self.attempts},
            request_checksum_calculation="when_required",  # we send our own sha256: no CRC32 trailers
        )
        self._client: S3Client = session.client("s3", endpoint_url=endpoint, config=config)
        once = config.merge(Config(retries={"mode": "standard", "total_max_attempts": 1}))  # see _conditional_put
        self._once: S3Client = session.client("s3", endpoint_url=endpoint, config=once)
        self.endpoint = self._client.meta.endpoint_url

    # -- atomic writes --------------------------------------------------------------------------
    def put_atomic(self, key: str, data: bytes, *, tmp_key: str) -> WriteResult:
        return self._put_validated(key, tmp_key, io.BytesIO(data), len(data))

    def put_file_atomic(self, key: str, path: str, *, tmp_key: str) -> WriteResult:
        try:
            size, handle = os.path.getsize(path), open(path, "rb")  # closed below
        except OSError as exc:
            raise StoreError(f"cannot read {path} to upload it to {self.uri(key)}: {exc.strerror or exc}") from exc
        with handle:
            return self._put_validated(key, tmp_key, handle, size)

    def _put_validated(self, key: str, tmp_key: str, source: IO[bytes], size: int) -> WriteResult:
        """Upload to ``tmp_key`` hashing as it reads, check what the server stored, copy to ``key``, delete tmp."""
        tmp, digest = self._key(tmp_key), _Digest()
        if size <= self.multipart_threshold:
            with self._errors("PUT", tmp_key):
                self._client.put_object(**self._put_request(tmp_key, source.read(), digest))
        else:
            with self._multipart(tmp_key) as (upload, parts):
                while chunk := source.read(max(self.part_size, -(-size // 10_000))):
                    sha, md5 = digest.add(chunk)
                    number = len(parts) + 1
                    out = self._client.upload_part(
                        **upload,
                        PartNumber=number,
                        Body=chunk,
                        ChecksumAlgorithm="SHA256",
                        ChecksumSHA256=sha,
                        ContentMD5=md5,
                    )
                    parts.append(_part(number, out["ETag"], out.get("ChecksumSHA256")))
        try:
            etag = self._validate(tmp_key, digest)
        except IntegrityError:
            self._delete_quietly(tmp)
            raise
        try:
            if digest.size > MAX_COPY:
                self._copy_parts(key, tmp, etag, digest)
                self._validate(key, digest)
            else:
                with self._errors("COPY", key, f"{self.uri(tmp_key)} unchanged since validated (ETag {etag})"):
                    copy = self._client.copy_object(
                        Bucket=self.bucket,
                        Key=self._key(key),
                        CopySource={"Bucket": self.bucket, "Key": tmp},
                        CopySourceIfMatch=etag,
                        ChecksumAlgorithm="SHA256",
                    )
                result, kms = copy["CopyObjectResult"], _encrypted(copy)
                self._check(key, digest, digest.size, result.get("ETag", ""), result.get("ChecksumSHA256"), kms)
        except PreconditionFailedError as exc:  # the tmp object changed after it was validated
            raise IntegrityError(exc.message) from exc
        self._delete_quietly(tmp)  # on failure the final object is in place; the cleanup job takes the tmp key
        return WriteResult(key=key, size=digest.size, sha256=digest.sha256().hex())

    def _copy_parts(self, key: str, tmp: str, etag: str, digest: _Digest) -> None:
        """Copy over 5 GiB by UploadPartCopy on the upload's part boundaries (so the same multipart ETag)."""
        start = 0
        with self._multipart(key) as (upload, parts):
            for _, _, size in digest.parts:
                out = self._client.upload_part_copy(
                    **upload,
                    PartNumber=len(parts) + 1,
                    CopySource={"Bucket": self.bucket, "Key": tmp},
                    CopySourceIfMatch=etag,
                    CopySourceRange=f"bytes={start}-{start + size - 1}",
                )["CopyPartResult"]
                start += size
                parts.append(_part(len(parts) + 1, out.get("ETag", ""), out.get("ChecksumSHA256")))

    @contextlib.contextmanager
    def _multipart(self, key: str) -> Iterator[tuple[_Upload, list[CompletedPartTypeDef]]]:
        """A multipart upload to ``key``: completed with the parts the caller appends, aborted on any failure."""
        parts: list[CompletedPartTypeDef] = []
        with self._errors("multipart PUT", key):
            created = self._client.create_multipart_upload(
                Bucket=self.bucket, Key=self._key(key), ChecksumAlgorithm="SHA256"
            )
            upload: _Upload = {"Bucket": self.bucket, "Key": self._key(key), "UploadId": created["UploadId"]}
            try:
                yield upload, parts
                self._client.complete_multipart_upload(**upload, MultipartUpload={"Parts": parts})
            except BaseException:
                with contextlib.suppress(ClientError, BotoCoreError):
                    self._client.abort_multipart_upload(**upload)
                raise

    def _validate(self, key: str, digest: _Digest) -> str:
        """HeadObject ``key`` and check it against ``digest``; returns its ETag."""
        with self._errors("HEAD", key):
            head = self._client.head_object(Bucket=self.bucket, Key=self._key(key), ChecksumMode="ENABLED")
        kms = _encrypted(head)
        self._check(key, digest, head["ContentLength"], head["ETag"], head.get("ChecksumSHA256"), kms)
        return _unquote(head["ETag"])

    def _check(self, key: str, digest: _Digest, size: int, etag: str, checksum: str | None, kms: bool) -> None:
        """The size must match, a reported sha256 must match, and the ETag be our md5 (encrypted: the sha256)."""
        sum_ok = checksum in digest.checksums() if checksum else None
        if size == digest.size and sum_ok is not False and (sum_ok if kms else _unquote(etag) in digest.etags()):
            return
        raise IntegrityError(
            f"{self.uri(key)}: expected {digest.size} bytes sha256 {digest.sha256().hex()} (ETag one of "
            f"{sorted(digest.etags())}); the server has {size} bytes, ETag {etag}, checksum {checksum or '<none>'}"
        )

    # -- conditional writes ---------------------------------------------------------------------
    def put_if_absent(self, key: str, data: bytes) -> bool:
        try:
            self._conditional_put(key, data, None)
        except PreconditionFailedError:
            return False
        return True

    def put_if_match(self, key: str, data: bytes, token: str | None) -> str:
        return self._conditional_put(key, data, token)

    def _conditional_put(self, key: str, data: bytes, token: str | None) -> str:
        """PutObject with If-Match (the ETag unquoted: radosgw 16 412s quoted ones) or If-None-Match ``*``.

        Sent once: a retry of a write that did land would fail its own precondition and report a race we
        won. When the outcome is unknown (connection lost after sending, timeout, 5xx) the object is read
        back. Exactly our bytes: the write counts as ours and we return its ETag (put_if_absent: True).
        Another writer's identical bytes cannot be told apart, so callers that must know who wrote (claims,
        leases) write bytes naming the writer; for identical-content writes (the zero-byte success.marker)
        both answers describe the same state. Create-only and other bytes there: lost (False). Otherwise
        (absent, or still another version) RetryableStoreError: repeating the call is safe, since a late
        landing of ours then fails its precondition.
        """
        request = self._put_request(key, data, _Digest())
        if token is None:
            request["IfNoneMatch"] = "*"
        else:
            request["IfMatch"] = _unquote(token)
        expected = f"version {token}" if token else "no object (create only)"
        try:
            with self._errors("conditional PUT", key, expected, attempts=1):
                return _unquote(self._once.put_object(**request)["ETag"])
        except NotFoundError as exc:  # AWS answers If-Match on a missing object with 404
            raise PreconditionFailedError(f"{self.uri(key)} changed: expected {expected}, found <absent>") from exc
        except RetryableStoreError as exc:
            cause = exc.__cause__
            if isinstance(cause, (boto.EndpointConnectionError, boto.ConnectTimeoutError)) or (
                isinstance(cause, ClientError) and _status(cause) < 500
            ):
                raise  # the outcome is known: the request was not sent, or was refused
            try:
                found: Versioned | None = self.get_versioned(key)
            except NotFoundError:
                found = None
            except StoreError as again:
                raise RetryableStoreError(
                    f"{exc.message}; outcome unknown, reading back failed: {again.message}"
                ) from exc
            if found is not None and found.data == data:
                log.warning("%s: outcome unknown, but %s holds exactly our bytes", exc.message, self.uri(key))
                return found.token
            if token is None and found is not None:
                raise PreconditionFailedError(f"{exc.message}; read back, {self.uri(key)} holds other bytes") from exc
            now = "absent" if found is None else f"version {found.token} with other bytes"
            raise RetryableStoreError(
                f"{exc.message}; outcome unknown: read back, the object is {now}, so our write has not landed "
                "(yet); repeating the call is safe"
            ) from exc

    def _put_request(self, key: str, data: bytes, digest: _Digest) -> PutObjectRequestTypeDef:
        sha, md5 = digest.add(data)
        return {
            "Bucket": self.bucket,
            "Key": self._key(key),
            "Body": data,
            "ChecksumAlgorithm": "SHA256",
            "ChecksumSHA256": sha,
            "ContentMD5": md5,
        }

    # -- reads ----------------------------------------------------------------------------------
    def get(self, key: str, *, if_match: str | None = None) -> bytes:
        buffer = io.BytesIO()
        self._read(key, if_match, buffer)
        return buffer.getvalue()

    def get_versioned(self, key: str) -> Versioned:
        buffer = io.BytesIO()
        token = self._read(key, None, buffer)
        return Versioned(data=buffer.getvalue(), token=token)

    def download(self, key: str, path: str) -> WriteResult:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        try:
            with open(path, "wb") as handle:
                self._read(key, None, handle)
                handle.flush()
                os.fsync(handle.fileno())
            with open(path, "rb") as handle:
                digest = hashlib.file_digest(handle, "sha256").hexdigest()
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(path)
            raise
        return WriteResult(key=key, size=os.path.getsize(path), sha256=digest)

    def _read(self, key: str, if_match: str | None, out: IO[bytes]) -> str:
        """Stream the object into ``out``; returns its ETag. A body cut short is fetched again (GET is idempotent)."""
        request: GetObjectRequestTypeDef = {"Bucket": self.bucket, "Key": self._key(key)}
        if if_match is not None:
            request["IfMatch"] = _unquote(if_match)
        for attempt in range(1, self.attempts + 1):
            out.seek(0)
            out.truncate()
            with self._errors("GET", key, f"version {if_match}" if if_match else ""):
                response = self._client.get_object(**request)
                try:
                    for chunk in response["Body"].iter_chunks(MiB):
                        out.write(chunk)
                    return _unquote(response["ETag"])
                except _CUT_SHORT:
                    if attempt == self.attempts:
                        raise
            time.sleep(random.uniform(0, 0.05 * 2**attempt))
        raise AssertionError("unreachable")

    def checksum(self, key: str) -> str:
        """The object's ETag (unquoted), from one HeadObject: what a listing reports, without the listing."""
        with self._errors("HEAD", key):
            head = self._client.head_object(Bucket=self.bucket, Key=self._key(key))
        return _unquote(head["ETag"])

    def exists(self, key: str) -> bool:
        try:
            with self._errors("HEAD", key):
                self._client.head_object(Bucket=self.bucket, Key=self._key(key))
        except NotFoundError:
            return False
        return True

    def list(self, prefix: str) -> list[ObjectInfo]:
        rel, root = "/".join(p for p in prefix.split("/") if p), f"{self.prefix}/" if self.prefix else ""
        found: list[ObjectInfo] = []
        with self._errors("LIST", rel):
            pages = self._client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket,
                Prefix=self._key(rel) if rel else root,
                PaginationConfig={"PageSize": self.page_size},
            )
            for item in (item for page in pages for item in page.get("Contents", [])):
                name, stamp = item.get("Key", "").removeprefix(root), item.get("LastModified")
                # S3 prefixes are strings, not directories: keep ``rel`` itself and the keys below it, as locally;
                # "folder" keys (ending in "/", the root's own marker shows as "") are not objects of the store
                if name and not name.endswith("/") and (not rel or name == rel or name.startswith(f"{rel}/")):
                    etag, mtime = _unquote(item.get("ETag", "")), stamp.timestamp() if stamp else 0.0
                    found.append(ObjectInfo(key=name, size=item.get("Size", 0), checksum=etag, mtime=mtime))
        return sorted(found, key=lambda info: info.key)

    def delete(self, key: str) -> None:
        with self._errors("DELETE", key):
            self._client.delete_object(Bucket=self.bucket, Key=self._key(key))

    # -- helpers --------------------------------------------------------------------------------
    def _key(self, key: str) -> str:
        parts = [p for p in key.split("/") if p]
        if not parts or any(p in (".", "..") for p in parts):
            raise StoreError(f"invalid key {key!r} under {self.root_uri}: empty, or with '.' or '..'")
        return "/".join([self.prefix, *parts] if self.prefix else parts)

    def _delete_quietly(self, full_key: str) -> None:
        try:
            self._client.delete_object(Bucket=self.bucket, Key=full_key)
        except (ClientError, BotoCoreError) as exc:
            log.warning("could not delete s3://%s/%s (the tmp cleanup job will): %s", self.bucket, full_key, exc)

    @contextlib.contextmanager
    def _errors(self, op: str, key: str, expected: str = "", attempts: int | None = None) -> Iterator[None]:
        """Turn boto3 failures into ml8s errors naming the operation, the URI and what was expected."""
        try:
            yield
        except (ClientError, BotoCoreError) as exc:
            raise self._error(exc, op, self.uri(key), f"; expected {expected}" if expected else "", attempts) from exc

    def _error(self, exc: ClientError | BotoCoreError, op: str, uri: str, want: str, tries: int | None) -> StoreError:
        tried = f"{tries or self.attempts} attempt(s)"
        if isinstance(exc, boto.NoCredentialsError):
            return StoreError(f"{op} {uri}: no S3 credentials; expected AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY")
        if isinstance(exc, boto.FlexibleChecksumError):
            return IntegrityError(f"{op} {uri}: the bytes received do not match the object's checksum ({exc}){want}")
        if isinstance(exc, (boto.ConnectionError, *_CUT_SHORT)):
            reason = next((e.strerror.lower() for e in _chain(exc) if isinstance(e, OSError) and e.strerror), str(exc))
            what = "cannot reach" if isinstance(exc, boto.ConnectionError) else "lost the connection to"
            return StoreUnavailableError(
                f"{what} S3 endpoint {self.endpoint} for {op} {uri}: {reason} ({tried}); expected a reachable S3 "
                "endpoint (AWS_ENDPOINT_URL)"
            )
        if not isinstance(exc, ClientError):
            return StoreError(f"{op} {uri}: {exc}{want}")
        code, status = exc.response.get("Error", {}).get("Code", ""), _status(exc)
        detail = f"{op} {uri}: HTTP {status}" + (f" {code}" if code != str(status) else "")
        if code == "NoSuchBucket" or (code in ("404", "NotFound") and not self._bucket_exists()):
            return StoreError(f"{detail}: bucket {self.bucket!r} does not exist at {self.endpoint}; create it first")
        if status == 412 or code == "PreconditionFailed":
            return PreconditionFailedError(f"{uri} changed: {op} precondition failed{want}")
        if status == 404 or code == "NoSuchKey":
            return NotFoundError(f"{uri} does not exist")
        if code in _DIGEST:
            return IntegrityError(f"{detail}: the server found the bytes do not match their checksum{want}")
        if status == 403:
            return StoreError(f"{detail}: access denied; expected credentials allowed to {op} in {self.bucket!r}")
        if status in (409, 429) or status >= 500 or code in _SLOW:
            return RetryableStoreError(f"{detail} ({tried}): a transient failure, retry later{want}")
        return StoreError(f"{detail}: {exc.response.get('Error', {}).get('Message') or exc}{want}")

    def _bucket_exists(self) -> bool:
        """HeadObject's 404 has no body, so a missing bucket looks like a missing key: ask (once)."""
        if not self._bucket_seen:
            try:
                self._client.head_bucket(Bucket=self.bucket)
            except ClientError as exc:
                return _status(exc) != 404
            except BotoCoreError:
                return True  # unknown: keep the original error
            self._bucket_seen = True
        return True


if TYPE_CHECKING:
    from typing import TypedDict

    class _Upload(TypedDict):
        Bucket: str
        Key: str
        UploadId: str


def _part(number: int, etag: str, checksum: str | None) -> CompletedPartTypeDef:
    """A part for CompleteMultipartUpload, with its sha256 only where the server reported one."""
    part: CompletedPartTypeDef = {"PartNumber": number, "ETag": etag}
    if checksum:
        part["ChecksumSHA256"] = checksum
    return part


def _encrypted(output: Mapping[str, object]) -> bool:
    """SSE-KMS and SSE-C objects have ETags that are no md5 of their bytes."""
    return "kms" in str(output.get("ServerSideEncryption", "")) or bool(output.get("SSECustomerAlgorithm"))


def _first(env: Mapping[str, str], *names: str) -> str | None:
    return next((env[n] for n in names if env.get(n)), None)


def _b64(digest: bytes) -> str:
    return base64.b64encode(digest).decode("ascii")


def _unquote(etag: str) -> str:
    return etag.strip().removeprefix("W/").strip('"')


def _status(exc: ClientError) -> int:
    return exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)


def _chain(exc: BaseException | None) -> Iterator[BaseException]:
    while exc is not None:
        yield exc
        exc = exc.__cause__ or exc.__context__
