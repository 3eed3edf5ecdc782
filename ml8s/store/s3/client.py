"""The S3 client and its settings, key mapping, and boto3 failures mapped to ml8s errors.

:class:`S3Base` holds what every S3 operation needs; reads, atomic writes and conditional writes are the
mixins beside it (``reads``, ``writes``, ``conditional``), combined into :class:`~ml8s.store.s3.S3Store`.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, TypeVar

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
    without_credentials,
)
from ml8s.store.base import Store
from ml8s.store.s3.clients import Clients
from ml8s.store.s3.deadline import VARIABLE, Late, request_deadline, running_job, within
from ml8s.store.s3.environment import endpoint_url, first, region_name
from ml8s.text import is_digits, quoted

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

log = logging.getLogger("ml8s.store.s3")
MiB = 1024 * 1024
# AWS_MAX_ATTEMPTS bound: each attempt backs off longer, so a mistyped 99999999 would retry a dead endpoint for days
MAX_ATTEMPTS = 20
CUT_SHORT = (boto.HTTPClientError, boto.IncompleteReadError, boto.FlexibleChecksumError)  # while reading a body
_DIGEST = {"BadDigest", "InvalidDigest", "XAmzContentSHA256Mismatch", "XAmzContentChecksumMismatch"}
_SLOW = {"SlowDown", "Throttling", "ThrottlingException", "RequestTimeout", "OperationAborted"}
# botocore's own check ends in "$", which lets a trailing newline through (it then breaks every signature)
_T = TypeVar("_T")


class S3Base(Store):
    """What every S3 operation needs: the bucket and prefix, boto3 clients (.clients), key mapping, error mapping.

    Read once from ``env`` (default ``os.environ``): ``AWS_ENDPOINT_URL`` (else ``FLYTE_AWS_ENDPOINT``; when
    set, path-style addressing), ``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY`` (else ``FLYTE_AWS_*``; else
    boto3's credential chain), ``AWS_SESSION_TOKEN``, ``AWS_REGION``/``AWS_DEFAULT_REGION`` (default
    us-east-1), ``AWS_MAX_ATTEMPTS`` (default 4 tries of an idempotent request, botocore's retries included),
    ``ML8S_S3_REQUEST_DEADLINE`` (default 300 s, each try's total time: :mod:`ml8s.store.s3.deadline`).
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
            raise ConfigError(f"invalid S3 URI {quoted(uri)}; expected s3://bucket/prefix")
        if not 5 * MiB <= part_size <= multipart_threshold:
            raise ConfigError(f"S3 part size {part_size}: expected ≥ 5 MiB and ≤ multipart_threshold")
        attempts = env.get("AWS_MAX_ATTEMPTS", "4")
        if not is_digits(attempts) or not 1 <= int(attempts) <= MAX_ATTEMPTS:
            raise ConfigError(f"AWS_MAX_ATTEMPTS={quoted(attempts)}; expected a whole number from 1 to {MAX_ATTEMPTS}")
        self.bucket, self.prefix = bucket, "/".join(p for p in prefix.split("/") if p)
        self.root_uri = f"s3://{bucket}/{self.prefix}".rstrip("/")
        self.multipart_threshold, self.part_size, self.page_size = multipart_threshold, part_size, page_size
        self.attempts, self.deadline, self._bucket_seen = int(attempts), request_deadline(env), False
        endpoint = endpoint_url(env)
        core = botocore.session.get_session()
        core.set_config_variable("ignore_configured_endpoint_urls", True)  # the endpoint is the one from env
        session = boto3.session.Session(
            aws_access_key_id=first(env, "AWS_ACCESS_KEY_ID", "FLYTE_AWS_ACCESS_KEY_ID"),
            aws_secret_access_key=first(env, "AWS_SECRET_ACCESS_KEY", "FLYTE_AWS_SECRET_ACCESS_KEY"),
            aws_session_token=first(env, "AWS_SESSION_TOKEN"),
            region_name=region_name(env),
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
        # botocore retries in silence (a hung endpoint: AWS_MAX_ATTEMPTS x 30 s); each failed attempt is said
        said, hook = self._say_failed_attempt, _no_region_redirects if endpoint else None
        self._clients = Clients(session, endpoint, config, self.attempts, on_retry=said, on_build=hook)
        self._once = self._clients.with_tries(1)  # see _conditional_put
        # shown in every error and warning: a user:password in AWS_ENDPOINT_URL stays out of them, whatever
        # handler (not only ml8s's scrubbing one) the warnings reach
        self.endpoint = without_credentials(self._once.meta.endpoint_url)

    @property
    def _client(self) -> S3Client:
        """The client for the request running on this thread: its botocore retries stop at the tries it has left."""
        return self._clients.running()

    def _say_failed_attempt(
        self, attempts: int, caught_exception: Exception | None = None, response: object = None, **kwargs: object
    ) -> None:
        """A WARNING per failed attempt of a request (connection, timeout, 5xx, throttling), none otherwise."""
        if caught_exception is not None:
            said = str(caught_exception).splitlines()[0] if str(caught_exception) else type(caught_exception).__name__
            why = without_credentials(said)  # botocore's message quotes the request URL
        else:
            status, code = _status_and_code(response)
            if status < 500 and code not in _SLOW:
                return  # an answer (2xx, or a 4xx that is not retried): nothing to say
            why = f"HTTP {status} {code if code != str(status) else ''}".rstrip()
        if (job := running_job()) is not None and job.abandoned:  # given up, and said so, already
            return
        # numbered among the whole request's tries
        number, tries = (job.first - 1 + attempts, job.first - 1 + job.limit) if job else (attempts, self.attempts)
        self._say(getattr(kwargs.get("operation"), "name", "request"), number, tries, why)

    def _say(self, operation: str, attempt: int, tries: int, why: str) -> None:
        more = "; trying again" if attempt < tries else ""
        log.warning("S3 %s at %s: attempt %d of %d failed (%s)%s", operation, self.endpoint, attempt, tries, why, more)

    def _bounded(self, op: str, key: str, call: Callable[[], _T], *, sent: int = 0, tries: int | None = None) -> _T:
        """``call()``, one boto3 request, within the request deadline (:mod:`.deadline`); a late one is tried again:
        AWS_MAX_ATTEMPTS tries with botocore's (``tries``: 1 for a request never repeated blindly); ``sent``: bytes."""
        tries = self.attempts if tries is None else tries
        used = 0
        while used < tries:
            job = self._clients.job(first=used + 1, limit=tries - used)
            try:
                return within(lambda _: call(), seconds=self.deadline, sent=sent, job=job)
            except Late as late:
                used += job.used
                self._say(op, used, tries, str(late))
        raise self._late(op, key, tries)

    def _late(self, op: str, key: str, tries: int) -> StoreUnavailableError:
        return StoreUnavailableError(
            f"{op} {self.uri(key)}: S3 endpoint {self.endpoint} sent no complete answer within the request deadline "
            f"of {self.deadline} s ({VARIABLE}, plus 1 s per MiB moved) in {tries} attempt(s); expected an endpoint "
            "that answers in time (one sending its answer a byte at a time never trips the 30 s read timeout)"
        )

    # -- helpers --------------------------------------------------------------------------------
    def _key(self, key: str) -> str:
        parts = [p for p in key.split("/") if p]
        if not parts or any(p in (".", "..") for p in parts):
            raise StoreError(f"invalid key {key!r} under {self.root_uri}: empty, or with '.' or '..'")
        return "/".join([self.prefix, *parts] if self.prefix else parts)

    def _etag(self, etag: str | None, op: str, key: str) -> str:
        """The unquoted ETag of an answer; a StoreError naming the endpoint when it sent none (was a KeyError)."""
        if not etag:
            landed = " (the write may have landed all the same)" if "PUT" in op else ""
            raise StoreError(
                f"{op} {self.uri(key)}: {self.endpoint} answered without an ETag; expected one, as S3 sends with "
                f"every object{landed}"
            )
        return unquote(etag)

    def _delete_quietly(self, key: str) -> None:
        full_key = self._key(key)
        try:
            self._bounded("DELETE", key, lambda: self._client.delete_object(Bucket=self.bucket, Key=full_key))
        except (ClientError, BotoCoreError, StoreUnavailableError) as exc:
            log.warning("could not delete %s (the tmp cleanup job will): %s", self.uri(key), exc)

    @contextlib.contextmanager
    def _errors(self, op: str, key: str, expected: str = "", attempts: int | None = None) -> Iterator[None]:
        """Turn boto3 failures into ml8s errors naming the operation, the URI and what was expected."""
        try:
            yield
        except (ClientError, BotoCoreError) as exc:
            raise self._error(exc, op, self.uri(key), f"; expected {expected}" if expected else "", attempts) from exc
        except ValueError as exc:  # botocore's parser on a malformed header or field (a timestamp, a number)
            raise StoreError(
                f"{op} {self.uri(key)}: {self.endpoint} sent an answer that does not parse ({exc}); expected an "
                "S3 answer"
            ) from exc

    def _error(self, exc: ClientError | BotoCoreError, op: str, uri: str, want: str, tries: int | None) -> StoreError:
        tried = f"{tries or self.attempts} attempt(s)"
        if isinstance(exc, boto.NoCredentialsError):
            return StoreError(f"{op} {uri}: no S3 credentials; expected AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY")
        if isinstance(exc, boto.FlexibleChecksumError):
            return IntegrityError(f"{op} {uri}: the bytes received do not match the object's checksum ({exc}){want}")
        if isinstance(exc, (boto.ConnectionError, *CUT_SHORT)):
            reason = next((e.strerror.lower() for e in _chain(exc) if isinstance(e, OSError) and e.strerror), str(exc))
            what = "cannot reach" if isinstance(exc, boto.ConnectionError) else "lost the connection to"
            return StoreUnavailableError(
                f"{what} S3 endpoint {self.endpoint} for {op} {uri}: {reason} ({tried}); expected a reachable S3 "
                "endpoint (AWS_ENDPOINT_URL)"
            )
        if not isinstance(exc, ClientError):
            return StoreError(f"{op} {uri}: {exc}{want}")
        code, status = exc.response.get("Error", {}).get("Code", ""), http_status(exc)
        detail = f"{op} {uri}: HTTP {status}" + (f" {code}" if code and code != str(status) else "")
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
        if status in (301, 302, 303, 307, 308):
            to = exc.response.get("ResponseMetadata", {}).get("HTTPHeaders", {}).get("location", "")
            return StoreError(
                f"{detail}: redirected{f' to {to}' if to else ''}; expected AWS_ENDPOINT_URL to name the S3 endpoint "
                "itself (its scheme, host and port)"
            )
        message = exc.response.get("Error", {}).get("Message") or "no S3 error in the answer"
        return StoreError(f"{detail}: {message}{want}")

    def _bucket_exists(self) -> bool:
        """HeadObject's 404 has no body, so a missing bucket looks like a missing key: ask (once)."""
        if not self._bucket_seen:
            try:
                self._bounded("HEAD", "", lambda: self._client.head_bucket(Bucket=self.bucket), tries=1)
            except ClientError as exc:
                return http_status(exc) != 404
            except (BotoCoreError, StoreUnavailableError):
                return True  # unknown: keep the original error
            self._bucket_seen = True
        return True


if TYPE_CHECKING:
    from typing import TypedDict

    class _Upload(TypedDict):
        Bucket: str
        Key: str
        UploadId: str


def _no_region_redirects(context: dict[str, object], **kwargs: object) -> None:
    """Mark a request as redirected already, so botocore's region redirector leaves it alone: an AWS region
    means nothing to a custom endpoint, and a 301 from one (a proxy sending http to https) made the
    redirector ask HeadBucket for the region, whose 301 asked again, ~80 requests deep: a RecursionError."""
    redirect = context.get("s3_redirect")
    if isinstance(redirect, dict):
        redirect["redirected"] = True


def unquote(etag: str) -> str:
    return etag.strip().removeprefix("W/").strip('"')


def http_status(exc: ClientError) -> int:
    return exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)


def encrypted(output: Mapping[str, object]) -> bool:
    """SSE-KMS and SSE-C objects have ETags that are no md5 of their bytes."""
    return "kms" in str(output.get("ServerSideEncryption", "")) or bool(output.get("SSECustomerAlgorithm"))


def _chain(exc: BaseException | None) -> Iterator[BaseException]:
    while exc is not None:
        yield exc
        exc = exc.__cause__ or exc.__context__


def _status_and_code(response: object) -> tuple[int, str]:
    """The HTTP status and S3 error code of botocore's ``(http_response, parsed)`` pair (0, "" when absent)."""
    if not isinstance(response, tuple) or len(response) != 2:
        return 0, ""
    http, parsed = response
    status = getattr(http, "status_code", 0)
    error = parsed.get("Error", {}) if isinstance(parsed, dict) else {}
    code = error.get("Code", "") if isinstance(error, dict) else ""
    return (status if isinstance(status, int) else 0), (code if isinstance(code, str) else "")
