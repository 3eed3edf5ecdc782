"""``ml8s tmp-cleanup``'s multipart part: the S3 uploads to tmp keys that a killed writer never aborted.

A writer stages a large object at its tmp key by a multipart upload and aborts it on any failure it lives
through (:mod:`ml8s.store.s3.writes`). SIGKILL or a lost node leaves it open, and S3 bills its parts until it
is aborted: no object is listed for it, so the tmp entries' sweep never sees it. Here the uploads to tmp keys
(:func:`ml8s.ops.tmp_keys.is_tmp_key`, nothing else: an upload to a final key is another writer's copy in
flight) are aged by the store's clock, from the time the server says each was initiated, and the older ones
aborted with the entries' retention and one-hour floor: a write in flight is younger, as its upload began
with it. One whose listing gives no time is kept (its age unknown). A local store has no uploads.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from ml8s.errors import StoreError
from ml8s.ops.tmp_keys import LISTED, is_tmp_key
from ml8s.store import Store, Upload
from ml8s.text import shown

_DAY_S = 86400.0


class TmpUpload(BaseModel):
    """An upload aborted (in a dry run: to abort): its key's URI and upload id, escaped, and its age."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    uri: str
    upload_id: str
    age_days: float


class UploadsCleanup(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    aborted: tuple[TmpUpload, ...]
    kept: int
    # what could not be done and why: "abort upload ID of URI: why", "list the multipart uploads under URI/: why"
    failed: tuple[str, ...]


def tmp_uploads(store: Store) -> tuple[list[Upload], list[str]]:
    """The uploads in progress to tmp keys under the pipeline root, sorted by key and upload id, and the
    failures of the folders that could not be listed ("list the multipart uploads under URI/: why")."""
    found: list[Upload] = []
    failed: list[str] = []
    for prefix in LISTED:
        try:
            found.extend(u for u in store.uploads(f"{prefix}/") if is_tmp_key(u.key))
        except StoreError as exc:  # one folder unlisted must not keep the others' uploads
            failed.append(f"list the multipart uploads under {shown(store.uri(prefix))}/: {shown(exc.message)}")
    return sorted(found, key=lambda u: (u.key, u.upload_id)), failed


def cleanup_uploads(store: Store, current: float, min_age_days: float, *, dry_run: bool) -> UploadsCleanup:
    """Abort (unless ``dry_run``) the uploads to tmp keys initiated more than ``min_age_days`` before ``current``
    (the store's time; 0: every one)."""
    listed, failed = tmp_uploads(store)
    aborted: list[TmpUpload] = []
    kept = 0
    for upload in listed:
        if upload.initiated is None:
            kept += 1
            continue
        age = (current - upload.initiated) / _DAY_S
        if min_age_days > 0 and age <= min_age_days:
            kept += 1
            continue
        uri = shown(store.uri(upload.key))
        if not dry_run:
            try:
                if not store.abort_upload(upload.key, upload.upload_id):
                    continue  # completed or aborted since listed: nothing of it is left to abort
            except StoreError as exc:  # one that will not go must not keep the others
                failed.append(f"abort upload {shown(upload.upload_id)} of {uri}: {shown(exc.message)}")
                continue
        aborted.append(TmpUpload(uri=uri, upload_id=shown(upload.upload_id), age_days=round(age, 3)))
    return UploadsCleanup(aborted=tuple(aborted), kept=kept, failed=tuple(failed))
