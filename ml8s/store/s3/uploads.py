"""S3 multipart uploads in progress: listed page by page, aborted one by one.

A writer killed outright (SIGKILL, a lost node) never aborts its upload, and S3 bills its parts until someone
does (or a bucket lifecycle rule AbortIncompleteMultipartUpload): ``ml8s tmp-cleanup`` lists and aborts the
stale ones to its tmp keys through these.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from ml8s.errors import NotFoundError, StoreError
from ml8s.store.base import Upload
from ml8s.store.s3.client import S3Base
from ml8s.text import shown

if TYPE_CHECKING:
    from mypy_boto3_s3.type_defs import (
        AbortMultipartUploadOutputTypeDef,
        ListMultipartUploadsOutputTypeDef,
        ListMultipartUploadsRequestTypeDef,
    )


class S3Uploads(S3Base):
    def uploads(self, prefix: str) -> list[Upload]:
        rel, root = "/".join(p for p in prefix.split("/") if p), f"{self.prefix}/" if self.prefix else ""
        # "a/" lists inside folder a only: the prefix "a" alone would take uploads to "ab/..." too
        wanted = (self._key(rel) + ("/" if prefix.endswith("/") else "")) if rel else root
        request: ListMultipartUploadsRequestTypeDef = {"Bucket": self.bucket, "Prefix": wanted}
        request["MaxUploads"] = self.page_size
        found: dict[tuple[str, str], Upload] = {}
        markers: set[tuple[str, str]] = set()
        last = ""  # the key marker of the page before: S3 lists uploads in key order, so a marker never goes back
        with self._errors("LIST uploads", rel):
            while True:  # page by page, each request within the deadline
                page = self._bounded("LIST uploads", rel, functools.partial(self._list_uploads, request))
                for item in page.get("Uploads", []):
                    full, upload_id, stamp = item.get("Key", ""), item.get("UploadId", ""), item.get("Initiated")
                    name = full.removeprefix(root)
                    # only what this store can address as that same key (not "a//b", nor a key outside the root
                    # that a broken server lists): an abort goes to the key listed, never to another
                    if full.startswith(wanted) and upload_id and self._addresses(name, full):
                        initiated = stamp.timestamp() if stamp else None
                        found[(name, upload_id)] = Upload(key=name, upload_id=upload_id, initiated=initiated)
                if not page.get("IsTruncated"):
                    break
                key_marker, id_marker = page.get("NextKeyMarker", ""), page.get("NextUploadIdMarker", "")
                self._check_markers(rel, key_marker, id_marker, last, markers)
                markers.add((key_marker, id_marker))
                last = key_marker
                request["KeyMarker"], request["UploadIdMarker"] = key_marker, id_marker
        return [found[pair] for pair in sorted(found)]

    def abort_upload(self, key: str, upload_id: str) -> bool:
        try:
            with self._errors("multipart abort", key):
                self._bounded("multipart abort", key, functools.partial(self._abort_listed, self._key(key), upload_id))
        except NotFoundError:  # NoSuchUpload: completed or aborted since listed (or a try whose answer was lost)
            return False
        return True

    def _list_uploads(self, request: ListMultipartUploadsRequestTypeDef) -> ListMultipartUploadsOutputTypeDef:
        return self._client.list_multipart_uploads(**request)

    def _abort_listed(self, full_key: str, upload_id: str) -> AbortMultipartUploadOutputTypeDef:
        return self._client.abort_multipart_upload(Bucket=self.bucket, Key=full_key, UploadId=upload_id)

    def _addresses(self, name: str, full: str) -> bool:
        try:
            return bool(name) and self._key(name) == full
        except StoreError:  # a "." or ".." segment
            return False

    def _check_markers(self, rel: str, key: str, upload_id: str, last: str, seen: set[tuple[str, str]]) -> None:
        """StoreError for markers that would not lead on: none (stopping would leave uploads out), or the
        listing going back or round (pages sent over and over never end)."""
        if not key:
            raise StoreError(
                f"LIST uploads {self.uri(rel)}: {self.endpoint} said the listing goes on (IsTruncated) but sent no "
                "NextKeyMarker; expected markers to fetch the rest (a short listing leaves uploads out)"
            )
        if key < last or (key, upload_id) in seen:
            raise StoreError(
                f"LIST uploads {self.uri(rel)}: {self.endpoint} sent the markers {shown(key)[:80]!r}, "
                f"{shown(upload_id)[:80]!r} after {shown(last)[:80]!r}; expected markers further on in key order "
                "(the listing would never end)"
            )
