"""The S3 backend against what a hostile operator or endpoint hands it: settings with bad values, keys the
store cannot address, credentials written into URIs. Each case was an unnamed error, a misread or a leak."""

from __future__ import annotations

import argparse
import contextlib
import logging
import pathlib
import re
from collections.abc import Iterator

import pytest
from loopback_http import QuietHandler, loopback_server
from s3_servers import S3Endpoint, free_port

from ml8s.cli.args import command_root, tracking_uri_arg
from ml8s.data.sources import fingerprint_data, read_verified
from ml8s.errors import (
    ConfigError,
    DataError,
    ObjectTooLargeError,
    RootUriError,
    StoreError,
    StoreUnavailableError,
    UnsafeObjectError,
)
from ml8s.identity.uri import parse_root_uri
from ml8s.store import S3Store

CREDENTIALS = {"AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s", "AWS_MAX_ATTEMPTS": "1"}


@contextlib.contextmanager
def answering(status: int, body: bytes, headers: dict[str, str]) -> Iterator[tuple[str, list[str]]]:
    """An HTTP server on 127.0.0.1 that answers every request alike: its URL, and the requests it got."""
    seen: list[str] = []

    class Handler(QuietHandler):
        def answer(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            seen.append(f"{self.command} {self.path}")
            chunked = headers.get("Transfer-Encoding") == "chunked"
            self.send_response(status)
            for name, value in (headers if chunked else {**headers, "Content-Length": str(len(body))}).items():
                self.send_header(name, value)
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body) if chunked else body)

        do_GET = do_PUT = do_HEAD = do_POST = do_DELETE = answer

    with loopback_server(Handler) as url:
        yield url, seen


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("AWS_ENDPOINT_URL", "not a url"),
        ("AWS_ENDPOINT_URL", "127.0.0.1:9000"),  # no scheme
        ("AWS_ENDPOINT_URL", "http://[::1"),
        ("AWS_ENDPOINT_URL", "ftp://127.0.0.1:9"),
        ("AWS_ENDPOINT_URL", "http://127.0.0.1:99999"),
        ("FLYTE_AWS_ENDPOINT", "minio:9000"),
        ("AWS_REGION", "bad region!"),
        ("AWS_DEFAULT_REGION", "us-east-1\n"),  # botocore's own check lets it through; every signature breaks
    ],
)
def test_a_bad_endpoint_or_region_is_a_config_error_naming_it(name: str, value: str) -> None:
    """These were a bare ValueError or botocore's InvalidRegionError (``ml8s: INTERNAL_ERROR``), or a
    connection error per request."""
    env = {"AWS_ENDPOINT_URL": "http://127.0.0.1:9", **CREDENTIALS, name: value}
    if name == "FLYTE_AWS_ENDPOINT":
        del env["AWS_ENDPOINT_URL"]
    with pytest.raises(ConfigError, match=rf"^CONFIG_ERROR: {name}=.* expected"):
        S3Store("s3://bkt/p", env=env)


@pytest.mark.parametrize("attempts", ["0", "\uff13", "\u00b2", "21", "99999999", "-1", ""])
def test_aws_max_attempts_is_an_ascii_number_from_1_to_20(attempts: str) -> None:
    """'３' (full width) was read as 3 and '²' was INTERNAL_ERROR ValueError; 99999999 retried a dead endpoint for
    days, each attempt backing off longer."""
    env = {"AWS_ENDPOINT_URL": "http://127.0.0.1:9", **CREDENTIALS, "AWS_MAX_ATTEMPTS": attempts}
    with pytest.raises(ConfigError, match=r"^CONFIG_ERROR: AWS_MAX_ATTEMPTS=.* expected a whole number from 1 to 20"):
        S3Store("s3://bkt/p", env=env)


def test_an_endpoint_with_credentials_is_not_echoed() -> None:
    env = {**CREDENTIALS, "AWS_ENDPOINT_URL": "http://user:s3cret@127.0.0.1:99999"}
    with pytest.raises(ConfigError) as info:
        S3Store("s3://bkt/p", env=env)
    assert "s3cret" not in str(info.value)


@pytest.mark.parametrize(
    "uri",
    [
        "s3://AKIAEXAMPLE:s3cretKey@my-bucket/runs",
        "s3://AKIAEXAMPLE:s3cret/Key+x@my-bucket/runs",  # a secret with "/" ends the authority before the "@"
        "s3://:s3cretKey@my-bucket",
    ],
)
def test_credentials_in_a_root_or_tracking_uri_are_never_echoed(uri: str) -> None:
    """The bucket ('AKIAEXAMPLE:s3cretKey@my-bucket') was quoted as invalid, secret and all; ``--root`` echoed
    the whole value."""
    with pytest.raises(RootUriError) as info:
        parse_root_uri(uri, variable="PIPELINE_ROOT_URI")
    assert "s3cret" not in str(info.value) and "credentials" in str(info.value)
    with pytest.raises(RootUriError) as given:
        command_root(argparse.Namespace(root=uri))
    assert "s3cret" not in str(given.value) and "--root=" in str(given.value)
    with pytest.raises(argparse.ArgumentTypeError) as tracking:
        tracking_uri_arg("mongodb://bot:s3cretKey@db/mlflow")  # a scheme MLflow has no registry for
    assert "s3cret" not in str(tracking.value)


@pytest.mark.parametrize("stray", ["x//y", "/x/y", "x/./y", "x/../y", "x/y/.."])
def test_a_listed_key_the_store_cannot_address_is_refused(moto_server: S3Endpoint, stray: str) -> None:
    """S3 keeps ``x//y`` literally, the store's keys fold it to ``x/y``: the listing offered ``x//y``, and
    reading or deleting it (GC, tmp cleanup and quarantine delete what they list) reached ``x/y``."""
    store = S3Store(f"s3://{moto_server.make_bucket()}/some/prefix", env=moto_server.env())
    store.put_atomic("x/y", b"ours", tmp_key=".tmp/x-y")
    moto_server.client().put_object(Bucket=store.bucket, Key=f"some/prefix/{stray}", Body=b"stray")
    for prefix in ("", "x") if stray.startswith("x") else ("",):
        with pytest.raises(UnsafeObjectError, match=rf"some/prefix/{re.escape(stray)} has an empty, '.' or '..'"):
            store.list(prefix)
    assert store.get("x/y") == b"ours"


def test_an_endpoint_that_redirects_is_a_store_error_after_one_request() -> None:
    """A proxy sending http to https (301, an HTML body): botocore's region redirector asked HeadBucket for the
    bucket's region, got a 301 and asked again, ~80 requests deep, until a RecursionError (INTERNAL_ERROR)."""
    moved = {"Location": "https://minio.example/", "Content-Type": "text/html"}
    with answering(301, b"<html>Moved</html>", moved) as (url, seen):
        store = S3Store("s3://bkt/p", env={**CREDENTIALS, "AWS_ENDPOINT_URL": url})
        for action in (lambda: store.get("k"), lambda: store.put_if_absent("k", b"x"), lambda: store.list("")):
            seen.clear()
            with pytest.raises(StoreError, match=r"HTTP 301: redirected to https://minio.example/; expected AWS_END"):
                action()
            assert len(seen) == 1, seen


def _listing(keys: list[str], truncated: bool) -> bytes:
    contents = "".join(
        f"<Contents><Key>{key}</Key><LastModified>2024-01-01T00:00:00.000Z</LastModified><ETag>&quot;e&quot;</ETag>"
        "<Size>3</Size></Contents>"
        for key in keys
    )
    return (
        '<?xml version="1.0" encoding="UTF-8"?><ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
        f"<Name>bkt</Name><IsTruncated>{str(truncated).lower()}</IsTruncated>{contents}</ListBucketResult>"
    ).encode()


def test_a_listing_the_server_cuts_short_is_an_error_and_keys_outside_the_root_are_not_listed() -> None:
    """botocore's paginator ends in silence on IsTruncated without NextContinuationToken: the listing lacked
    every key after the first page. A key outside the root was listed as if under it (``q/a`` as ``p/q/a``)."""
    xml = {"Content-Type": "application/xml"}
    with answering(200, _listing(["p/a.csv"], truncated=True), xml) as (url, _):
        store = S3Store("s3://bkt/p", env={**CREDENTIALS, "AWS_ENDPOINT_URL": url})
        with pytest.raises(StoreError, match=r"LIST s3://bkt/p: .* \(IsTruncated\) but sent no NextContinuationToken"):
            store.list("")
    with answering(200, _listing(["p/a.csv", "q/a.csv", "pq/b.csv"], truncated=False), xml) as (url, _):
        store = S3Store("s3://bkt/p", env={**CREDENTIALS, "AWS_ENDPOINT_URL": url})
        assert [info.key for info in store.list("")] == ["a.csv"]


def test_a_listing_whose_pages_repeat_with_new_tokens_is_an_error() -> None:
    """A server that sends the same page again under a fresh token each time: the listing held each key once a
    page (GC and tmp-cleanup counted them over and over) and, sent forever, never ended. This one stops after 20
    pages; the listing is refused at the second."""
    pages: list[str] = []

    class Handler(QuietHandler):
        def answer(self) -> None:
            pages.append(self.path)
            token = f"<NextContinuationToken>t{len(pages)}</NextContinuationToken>" if len(pages) < 20 else ""
            body = _listing(["p/a.csv"], truncated=len(pages) < 20).replace(b"</ListBucketResult>", b"")
            body += token.encode() + b"</ListBucketResult>"
            self.send_response(200)
            self.send_header("Content-Type", "application/xml")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = answer

    with loopback_server(Handler) as url:
        store = S3Store("s3://bkt/p", env={**CREDENTIALS, "AWS_ENDPOINT_URL": url})
        with pytest.raises(StoreError, match=r"sent a page starting at 'p/a.csv', not after the page before"):
            store.list("")
    assert len(pages) == 2


def test_an_answer_without_content_length_is_read_and_one_without_etag_is_a_store_error() -> None:
    """Both were a KeyError (``ml8s: INTERNAL_ERROR``): a GET answered in chunks (no Content-Length, plain
    HTTP/1.1) could not be read at all, and an answer without an ETag failed every read and conditional PUT."""
    with answering(200, b"hey", {"ETag": '"e"', "Transfer-Encoding": "chunked"}) as (url, _):
        store = S3Store("s3://bkt/p", env={**CREDENTIALS, "AWS_ENDPOINT_URL": url})
        assert store.get_versioned("k").data == b"hey" and store.digest("k").size == 3
        with pytest.raises(ObjectTooLargeError):
            store.get("k", max_bytes=2)
    with answering(200, b"", {}) as (url, _):
        store = S3Store("s3://bkt/p", env={**CREDENTIALS, "AWS_ENDPOINT_URL": url})
        for op, action in (("GET", store.get), ("HEAD", store.checksum), ("conditional PUT", store.put_if_absent)):
            with pytest.raises(StoreError, match=rf"^STORE_ERROR: {op} s3://bkt/p/k: {url} answered without an ETag"):
                action("k", *([b"x"] if op.endswith("PUT") else []))


def test_an_answer_that_does_not_parse_is_a_store_error() -> None:
    """botocore's parser raises a bare ValueError on a malformed timestamp or number (``ml8s: INTERNAL_ERROR``)."""
    with answering(200, b"hey", {"ETag": '"e"', "Last-Modified": "yesterday"}) as (url, _):
        store = S3Store("s3://bkt/p", env={**CREDENTIALS, "AWS_ENDPOINT_URL": url})
        for op, action in (("GET", store.get), ("HEAD", store.checksum)):
            with pytest.raises(StoreError, match=rf"^STORE_ERROR: {op} s3://bkt/p/k: {url} sent an answer that does"):
                action("k")
    listing = _listing(["p/a.csv"], truncated=False).replace(b"2024-01-01T00:00:00.000Z", b"yesterday")
    with answering(200, listing, {"Content-Type": "application/xml"}) as (url, _):
        store = S3Store("s3://bkt/p", env={**CREDENTIALS, "AWS_ENDPOINT_URL": url})
        with pytest.raises(StoreError, match=r"^STORE_ERROR: LIST s3://bkt/p: .* does not parse \(Invalid timestamp"):
            store.list("")


def test_a_data_root_naming_an_object_at_the_bucket_top_is_that_object(moto_server: S3Endpoint) -> None:
    """DATA_ROOT=s3://bucket/data.csv was 'lists no objects' (only s3://bucket/dir/data.csv named an object)."""
    bucket = moto_server.make_bucket()
    moto_server.client().put_object(Bucket=bucket, Key="data.csv", Body=b"a,b\n1,2\n")
    with pytest.MonkeyPatch.context() as patch:
        for name, value in moto_server.env().items():
            patch.setenv(name, value)
        found = fingerprint_data(f"s3://{bucket}/data.csv")
        assert [(e.relative_path, e.size) for e in found.entries] == [("data.csv", 8)]
        assert [data for _, data in read_verified(found)] == [b"a,b\n1,2\n"]
        with pytest.raises(DataError, match="lists no objects"):
            fingerprint_data(f"s3://{moto_server.make_bucket()}")  # a bucket is a prefix, never an object


def test_a_password_in_the_endpoint_stays_out_of_the_warnings(caplog: pytest.LogCaptureFixture) -> None:
    """Each failed attempt's warning named the endpoint, and botocore's message its URL, password and all; only
    ml8s's own log handler scrubbed it, not pytest's, Flyte's or a library user's."""
    url = f"http://bot:s3cret@127.0.0.1:{free_port()}"
    with caplog.at_level(logging.WARNING, logger="ml8s.store.s3"):
        with pytest.raises(StoreUnavailableError):
            S3Store("s3://bkt/p", env={**CREDENTIALS, "AWS_ENDPOINT_URL": url}).get("k")
    said = [record.getMessage() for record in caplog.records if record.name == "ml8s.store.s3"]
    assert said and not any("s3cret" in line for line in said), said


def test_a_download_into_a_full_disk_is_a_store_error_and_leaves_no_file(tmp_path: pathlib.Path) -> None:
    """The local side of a download failed as a bare OSError (``ml8s: INTERNAL_ERROR``); LocalStore's names it."""
    with answering(200, b"x" * 70_000, {"ETag": '"e"'}) as (url, _):
        store = S3Store("s3://bkt/p", env={**CREDENTIALS, "AWS_ENDPOINT_URL": url})
        full = tmp_path / "weights.bin"
        full.symlink_to("/dev/full")  # the link is removed, never the device
        # /dev/full refuses the sink's truncate (EINVAL) before any write (ENOSPC): either is named
        with pytest.raises(
            StoreError, match=rf"^STORE_ERROR: (no space left writing|cannot write) {re.escape(str(full))}"
        ):
            store.download("k", str(full))
        assert not full.is_symlink() and pathlib.Path("/dev/full").exists()
        (tmp_path / "file").write_bytes(b"")
        with pytest.raises(StoreError, match=r"^STORE_ERROR: cannot write .*/file/w\.bin: "):
            store.download("k", str(tmp_path / "file" / "w.bin"))


@pytest.mark.parametrize("chunked", [False, True])
def test_a_server_that_ignores_a_range_is_cut_off_at_the_range(chunked: bool) -> None:
    """get_range asks for a shard's 104-byte header (verify with no metadata, collect_receipts, the loaders): a
    server answering with the whole object instead (200, not 206) is refused at the range's length, unread
    past it, announced or not (chunked), instead of being taken in whole."""
    headers = {"Transfer-Encoding": "chunked"} if chunked else {}
    with answering(200, b"x" * (1 << 20), headers) as (url, seen):
        store = S3Store("s3://bkt/p", env={**CREDENTIALS, "AWS_ENDPOINT_URL": url})
        with pytest.raises(ObjectTooLargeError, match=r"p/k holds \d+ bytes or more; expected at most 104"):
            store.get_range("k", 0, 104)
        assert seen == ["GET /bkt/p/k"]
