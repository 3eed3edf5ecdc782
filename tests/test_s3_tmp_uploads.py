"""``ml8s tmp-cleanup`` aborts the S3 multipart uploads to tmp keys that a killed writer left open.

A writer killed outright (SIGKILL, a lost node) never aborts its upload: no object is listed for it, so the tmp
entries' sweep never saw it, and S3 billed its parts for ever. Against moto's server, whose listing says every
upload began on 2010-11-10: an after-call hook sets the time real S3 would give (one initiated now), and pages the
listing as real S3 does (moto sends every upload in one page), markers and all.
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

import pytest
from botocore.awsrequest import AWSResponse
from s3_servers import S3Endpoint
from test_verify import clean_env, ml8s

from ml8s.ops.tmp_cleanup import cleanup_tmp
from ml8s.store import LocalStore, S3Store

RUN = "abcdef012345"
NOW = datetime(2026, 3, 1, tzinfo=UTC).timestamp()  # the store's time the cleanups are given
DAY = 86400.0
OLD = {  # moto: initiated 2010-11-10, years before NOW
    f"root/ml8s_training_runs/{RUN}/.tmp/model-w1.bin",
    "root/ml8s_incidents/.tmp/incident-w1.json",
    "root/ml8s_quarantine/.tmp/quarantine-w1.bin",
    "root/.tmp/stage-w1",
}
YOUNG = {f"root/ml8s_training_runs/{RUN}/.tmp/metrics-w2.json": NOW - 0.5 * DAY}
FOREIGN = {  # never a tmp key of this root: never aborted, however old
    f"root/ml8s_training_runs/{RUN}/model/model_native.safetensors",  # a copy over 5 GiB in flight
    f"root/ml8s_training_runs/{RUN}/model/.tmp/model.shard-7.tmp",
    f"root/ml8s_training_runs/{RUN}/.tmpx/a",
    "root/ml8s_training_runs/not-a-run-id/.tmp/a",
    "root/ml8s_training_runs/.tmp/a",
    "root/ml8s_chain/.tmp/w-1",  # the chain GC's business
    "root/ml8s_incidents/x/.tmp/a",
    "root/.tmpx",
    "root2/.tmp/a",  # another root whose name starts with this one's
    ".tmp/a",  # the bucket's root, outside this store's
    "root//.tmp/a",  # an empty segment: this store would address it as root/.tmp/a
    "root/.tmp//a",
}


def _store(endpoint: S3Endpoint, bucket: str, **options: int) -> S3Store:
    return S3Store(f"s3://{bucket}/root", env=endpoint.env(), **options)


def _begin(client: Any, bucket: str, key: str) -> str:
    """An upload begun, one part sent, never completed nor aborted: what SIGKILL leaves."""
    upload = client.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
    client.upload_part(Bucket=bucket, Key=key, UploadId=upload, PartNumber=1, Body=b"part one")
    return str(upload)


def _open(client: Any, bucket: str) -> set[tuple[str, str]]:
    return {(u["Key"], u["UploadId"]) for u in client.list_multipart_uploads(Bucket=bucket).get("Uploads", [])}


def _planted(endpoint: S3Endpoint, keys: set[str]) -> tuple[str, dict[str, str]]:
    client, bucket = endpoint.client(), endpoint.make_bucket()
    return bucket, {key: _begin(client, bucket, key) for key in sorted(keys)}


def _after_listing(store: S3Store, edit: Callable[[str, dict[str, Any]], None]) -> None:
    """``edit(url, parsed)`` on each ListMultipartUploads answer, whichever of the store's clients got it."""

    def hook(http_response: AWSResponse, parsed: dict[str, Any], **_: Any) -> None:
        edit(str(http_response.url), parsed)

    for tries in range(1, store.attempts + 1):
        store._clients.with_tries(tries).meta.events.register("after-call.s3.ListMultipartUploads", hook)


def _as_s3(store: S3Store, initiated: Mapping[str, float], page: int = 0) -> None:
    """The listing as real S3 sends it: each upload's own time (``initiated``, else moto's), in key order, and
    (``page`` > 0) ``page`` uploads a page after the request's KeyMarker and UploadIdMarker."""

    def edit(url: str, parsed: dict[str, Any]) -> None:
        uploads = sorted(parsed.get("Uploads", []), key=lambda u: (u["Key"], u["UploadId"]))
        for upload in uploads:
            if upload["Key"] in initiated:
                upload["Initiated"] = datetime.fromtimestamp(initiated[upload["Key"]], UTC)
        if page:
            query = urllib.parse.parse_qs(urllib.parse.urlsplit(url).query)
            after = (query.get("key-marker", [""])[0], query.get("upload-id-marker", [""])[0])
            rest = [u for u in uploads if (u["Key"], u["UploadId"]) > after]
            uploads = rest[:page]
            parsed["IsTruncated"] = len(rest) > page
            if parsed["IsTruncated"]:
                parsed["NextKeyMarker"], parsed["NextUploadIdMarker"] = uploads[-1]["Key"], uploads[-1]["UploadId"]
        parsed["Uploads"] = uploads

    _after_listing(store, edit)


@pytest.mark.parametrize("page", [0, 2], ids=["one-page", "pages-of-two"])
def test_old_tmp_uploads_are_aborted_young_and_foreign_ones_never(moto_server: S3Endpoint, page: int) -> None:
    bucket, ids = _planted(moto_server, OLD | set(YOUNG) | FOREIGN)
    store = _store(moto_server, bucket)
    _as_s3(store, YOUNG, page)
    report = cleanup_tmp(store, 1, now=NOW)
    assert sorted(u.uri for u in report.aborted_uploads) == sorted(f"s3://{bucket}/{k}" for k in OLD)
    assert {u.upload_id for u in report.aborted_uploads} == {ids[k] for k in OLD}
    assert {u.age_days for u in report.aborted_uploads} == {
        round((NOW - datetime(2010, 11, 10, 20, 48, 33, tzinfo=UTC).timestamp()) / DAY, 3)
    }
    assert report.kept_uploads == 1 and report.failed_uploads == () and report.complete
    assert _open(moto_server.client(), bucket) == {(k, ids[k]) for k in set(YOUNG) | FOREIGN}


def test_the_one_hour_floor_holds_unless_short_grace_is_allowed(moto_server: S3Endpoint) -> None:
    """A retention of 0 would abort an upload in flight: as for entries, one under an hour old is kept."""
    key = f"root/ml8s_training_runs/{RUN}/.tmp/model-w3.bin"
    bucket, ids = _planted(moto_server, {key})
    store = _store(moto_server, bucket)
    _as_s3(store, {key: NOW - 1800})
    kept = cleanup_tmp(store, 0, now=NOW)
    assert (kept.aborted_uploads, kept.kept_uploads) == ((), 1)
    assert _open(moto_server.client(), bucket) == {(key, ids[key])}
    done = cleanup_tmp(store, 0, now=NOW, allow_short_grace=True)
    assert [(u.upload_id, u.age_days) for u in done.aborted_uploads] == [(ids[key], round(1800 / DAY, 3))]
    assert _open(moto_server.client(), bucket) == set()


def test_an_upload_listed_without_its_time_is_kept(moto_server: S3Endpoint) -> None:
    """Real S3 sends Initiated; an endpoint that does not gives no age to judge by: kept, never taken for old."""
    key = "root/.tmp/stage-w4"
    bucket, ids = _planted(moto_server, {key})
    store = _store(moto_server, bucket)
    _after_listing(store, lambda url, parsed: [u.pop("Initiated", None) for u in parsed.get("Uploads", [])])
    report = cleanup_tmp(store, 0, now=NOW, allow_short_grace=True)
    assert (report.aborted_uploads, report.kept_uploads) == ((), 1)
    assert _open(moto_server.client(), bucket) == {(key, ids[key])}


def test_a_dry_run_aborts_nothing_and_lists_what_it_would(moto_server: S3Endpoint) -> None:
    bucket, ids = _planted(moto_server, OLD | FOREIGN)
    store = _store(moto_server, bucket)
    report = cleanup_tmp(store, 1, now=NOW, dry_run=True)
    assert report.dry_run and {u.upload_id for u in report.aborted_uploads} == {ids[k] for k in OLD}
    assert _open(moto_server.client(), bucket) == {(k, ids[k]) for k in OLD | FOREIGN}


@pytest.mark.parametrize("markers", [{}, {"NextKeyMarker": "root/.tmp/stage-w1", "NextUploadIdMarker": "x"}])
def test_a_listing_that_would_not_end_or_would_stop_short_is_a_failure_not_a_guess(
    moto_server: S3Endpoint, markers: dict[str, str]
) -> None:
    """IsTruncated without markers (stopping there would leave uploads out), or the same markers over and over
    (the listing would never end): named as a failure, the other folders' uploads still aborted."""
    bucket, ids = _planted(moto_server, OLD)
    store = _store(moto_server, bucket)

    def endless(url: str, parsed: dict[str, Any]) -> None:
        if "prefix=root%2F.tmp%2F" in url:
            parsed.update(IsTruncated=True, **markers)

    _after_listing(store, endless)
    report = cleanup_tmp(store, 1, now=NOW)
    assert len(report.failed_uploads) == 1 and not report.complete
    assert report.failed_uploads[0].startswith(f"list the multipart uploads under s3://{bucket}/root/.tmp/: LIST")
    assert {u.upload_id for u in report.aborted_uploads} == {ids[k] for k in OLD if not k.startswith("root/.tmp/")}
    assert _open(moto_server.client(), bucket) == {("root/.tmp/stage-w1", ids["root/.tmp/stage-w1"])}


def test_an_abort_refused_is_named_and_the_others_still_go(moto_server: S3Endpoint) -> None:
    bucket, ids = _planted(moto_server, OLD)
    store = _store(moto_server, bucket)
    stuck = f"root/ml8s_training_runs/{RUN}/.tmp/model-w1.bin"
    denied = b"<Error><Code>AccessDenied</Code><Message>Access Denied</Message></Error>"

    def refuse(request: Any, **_: Any) -> AWSResponse | None:
        if ids[stuck] in request.url:
            return AWSResponse(request.url, 403, {}, _Raw(denied))
        return None

    for tries in range(1, store.attempts + 1):
        store._clients.with_tries(tries).meta.events.register("before-send.s3.AbortMultipartUpload", refuse)
    report = cleanup_tmp(store, 1, now=NOW)
    assert {u.upload_id for u in report.aborted_uploads} == {ids[k] for k in OLD - {stuck}}
    assert len(report.failed_uploads) == 1
    assert report.failed_uploads[0].startswith(f"abort upload {ids[stuck]} of s3://{bucket}/{stuck}: ")
    assert "access denied" in report.failed_uploads[0]
    assert _open(moto_server.client(), bucket) == {(stuck, ids[stuck])}


def test_an_upload_gone_since_listed_is_not_reported_as_aborted(moto_server: S3Endpoint) -> None:
    """Its writer completed it (or another cleanup aborted it) between the listing and the abort: NoSuchUpload,
    no failure, and the report claims only the aborts that happened."""
    bucket, ids = _planted(moto_server, OLD)
    store = _store(moto_server, bucket)
    gone = "root/.tmp/stage-w1"
    moto_server.client().abort_multipart_upload(Bucket=bucket, Key=gone, UploadId=ids[gone])
    _after_listing(  # the listing from before it went
        store,
        lambda url, parsed: (
            parsed.setdefault("Uploads", []).append(
                {"Key": gone, "UploadId": ids[gone], "Initiated": datetime(2010, 1, 1, tzinfo=UTC)}
            )
            if "prefix=root%2F.tmp%2F" in url
            else None
        ),
    )
    report = cleanup_tmp(store, 1, now=NOW)
    assert {u.upload_id for u in report.aborted_uploads} == {ids[k] for k in OLD - {gone}}
    assert report.complete and _open(moto_server.client(), bucket) == set()


def test_a_local_store_has_no_uploads(tmp_path: Any) -> None:
    report = cleanup_tmp(LocalStore(str(tmp_path)), 0, allow_short_grace=True)
    assert (report.aborted_uploads, report.kept_uploads, report.failed_uploads) == ((), 0, ())


class _Raw:
    """A urllib3-like body for a forged answer."""

    def __init__(self, data: bytes) -> None:
        self._data = data

    def stream(self, *_: Any, **__: Any) -> Any:
        yield self._data


# -- the command ------------------------------------------------------------------------------------
def test_the_command_reports_aborts_escaped_in_text_and_json_and_a_dry_run_aborts_none(
    moto_server: S3Endpoint,
) -> None:
    odd = f"root/ml8s_training_runs/{RUN}/.tmp/a\u202etxt.exe\u2028b"
    bucket, ids = _planted(moto_server, {*OLD, odd, *FOREIGN})
    env = clean_env(**moto_server.env(), PIPELINE_ROOT_URI=f"s3://{bucket}/root")
    planted = {(k, ids[k]) for k in {*OLD, odd, *FOREIGN}}
    shown_odd = f"s3://{bucket}/root/ml8s_training_runs/{RUN}/.tmp/a\\u202etxt.exe\\u2028b"
    dry = ml8s(env, "tmp-cleanup", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "\u202e" not in dry.stdout + dry.stderr and "\u2028" not in dry.stdout + dry.stderr
    assert f"would abort multipart upload {ids[odd]} to {shown_odd} (" in dry.stdout
    for key in OLD:
        assert f"would abort multipart upload {ids[key]} to s3://{bucket}/{key} (" in dry.stdout
    assert "would abort 5 multipart uploads to tmp keys older than 7 days; kept 0 younger ones" in dry.stdout
    assert not any(k in dry.stdout for k in FOREIGN if k.startswith("root/ml8s_training_runs"))
    assert _open(moto_server.client(), bucket) == planted
    done = ml8s(env, "tmp-cleanup", "--json")
    assert done.returncode == 0, done.stderr
    assert "\u202e" not in done.stdout
    report = json.loads(done.stdout)
    assert [u["uri"] for u in report["aborted_uploads"]] == sorted([shown_odd, *(f"s3://{bucket}/{k}" for k in OLD)])
    assert {u["upload_id"] for u in report["aborted_uploads"]} == {ids[k] for k in {*OLD, odd}}
    assert (report["kept_uploads"], report["failed_uploads"], report["dry_run"]) == (0, [], False)
    assert _open(moto_server.client(), bucket) == {(k, ids[k]) for k in FOREIGN}


def test_a_root_at_the_bucket_s_top_aborts_its_own_tmp_uploads_only(moto_server: S3Endpoint) -> None:
    bucket, ids = _planted(moto_server, {".tmp/stage-w1", f"ml8s_training_runs/{RUN}/.tmp/m.bin", "x/.tmp/a", ".tmpa"})
    report = cleanup_tmp(S3Store(f"s3://{bucket}", env=moto_server.env()), 1, now=NOW)
    assert [u.uri for u in report.aborted_uploads] == [
        f"s3://{bucket}/.tmp/stage-w1",
        f"s3://{bucket}/ml8s_training_runs/{RUN}/.tmp/m.bin",
    ]
    assert _open(moto_server.client(), bucket) == {("x/.tmp/a", ids["x/.tmp/a"]), (".tmpa", ids[".tmpa"])}


def test_the_command_names_an_abort_refused_and_exits_1(
    moto_server: S3Endpoint, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from ml8s.cli.main import main
    from ml8s.errors import StoreError
    from ml8s.store.s3.uploads import S3Uploads

    bucket, ids = _planted(moto_server, OLD)
    stuck = "root/.tmp/stage-w1"
    real = S3Uploads.abort_upload

    def refused(self: S3Uploads, key: str, upload_id: str) -> bool:
        if upload_id == ids[stuck]:
            raise StoreError(f"multipart abort {self.uri(key)}: HTTP 403 AccessDenied: access denied (injected)")
        return real(self, key, upload_id)

    monkeypatch.setattr(S3Uploads, "abort_upload", refused)
    for name, value in moto_server.env().items():
        monkeypatch.setenv(name, value)
    capsys.readouterr()
    assert main(["tmp-cleanup", "--root", f"s3://{bucket}/root"]) == 1
    out, err = capsys.readouterr()
    assert "aborted 3 multipart uploads to tmp keys older than 7 days; kept 0 younger ones" in out
    assert f"ml8s: STORE_ERROR: could not abort upload {ids[stuck]} of s3://{bucket}/{stuck}: multipart abort" in err
    assert "Traceback" not in err
    assert _open(moto_server.client(), bucket) == {(stuck, ids[stuck])}
