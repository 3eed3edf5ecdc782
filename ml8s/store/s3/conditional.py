"""S3 conditional writes: If-Match / If-None-Match puts, sent once, an unknown outcome resolved by reading back."""

from __future__ import annotations

from botocore import exceptions as boto
from botocore.exceptions import ClientError

from ml8s.errors import NotFoundError, PreconditionFailedError, RetryableStoreError, StoreError
from ml8s.store.base import Versioned
from ml8s.store.s3.client import http_status, log, unquote
from ml8s.store.s3.digest import Digest
from ml8s.store.s3.reads import S3Reads
from ml8s.store.s3.writes import S3Writes


class S3ConditionalWrites(S3Writes, S3Reads):
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
        request = self._put_request(key, data, Digest())
        if token is None:
            request["IfNoneMatch"] = "*"
        else:
            request["IfMatch"] = unquote(token)
        expected = f"version {token}" if token else "no object (create only)"
        try:
            with self._errors("conditional PUT", key, expected, attempts=1):
                answer = self._bounded("conditional PUT", key, lambda: self._once.put_object(**request), tries=1)
                return self._etag(answer.get("ETag"), "conditional PUT", key)
        except NotFoundError as exc:  # AWS answers If-Match on a missing object with 404
            raise PreconditionFailedError(f"{self.uri(key)} changed: expected {expected}, found <absent>") from exc
        except RetryableStoreError as exc:
            cause = exc.__cause__
            if isinstance(cause, (boto.EndpointConnectionError, boto.ConnectTimeoutError)) or (
                isinstance(cause, ClientError) and http_status(cause) < 500
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
