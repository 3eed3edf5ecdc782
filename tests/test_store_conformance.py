"""One store contract, three backends: the local filesystem, moto's S3 server and Ceph radosgw (SPEC §3).

The first half runs against every backend through the ``store`` fixture; the second half covers what only
S3 has (multipart, pagination, endpoints, server-side checksums, unknown outcomes) on moto and radosgw.
"""

from __future__ import annotations

import hashlib
import io
import logging
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
from botocore.exceptions import ClientError, ConnectionClosedError, ReadTimeoutError, ResponseStreamingError
from botocore.stub import Stubber
from s3_servers import S3Endpoint, free_port

import ml8s.store._files as files_module
import ml8s.store.s3.digest as s3_digest
import ml8s.store.s3.writes as s3_writes
from ml8s.errors import (
    ConfigError,
    IntegrityError,
    NotFoundError,
    PreconditionFailedError,
    RetryableStoreError,
    StoreError,
    StoreUnavailableError,
)
from ml8s.store import LocalStore, S3Store, Store, Versioned, open_store

MiB = 1024 * 1024


@pytest.fixture(params=["local", "moto", "radosgw"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    """A fresh, empty store of each backend (S3: a new bucket, rooted below a prefix)."""
    if request.param == "local":
        return LocalStore(str(tmp_path / "root"))
    endpoint: S3Endpoint = request.getfixturevalue(f"{request.param}_server")
    return S3Store(f"s3://{endpoint.make_bucket()}/some/prefix", env=endpoint.env())


def s3_store(endpoint: S3Endpoint, **options: int) -> S3Store:
    return S3Store(f"s3://{endpoint.make_bucket()}/some/prefix", env=endpoint.env(), **options)


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# -- every backend ------------------------------------------------------------------------------


def test_put_atomic_exact_bytes_and_no_tmp(store: Store) -> None:
    data = b'{"a": 1}\n' * 100
    result = store.put_atomic("run/a/b.json", data, tmp_key="run/.tmp/b-w1.json")
    assert (result.key, result.size, result.sha256) == ("run/a/b.json", len(data), sha(data))
    assert store.get("run/a/b.json") == data
    assert not store.exists("run/.tmp/b-w1.json")
    assert [info.key for info in store.list("run")] == ["run/a/b.json"]
    store.put_atomic("run/a/b.json", b"second", tmp_key="run/.tmp/b-w1.json")
    assert store.get("run/a/b.json") == b"second"


def test_put_file_atomic_and_download(store: Store, tmp_path: Path) -> None:
    src = tmp_path / "src.bin"
    src.write_bytes(os.urandom(5 * MiB + 7))
    result = store.put_file_atomic("model/m.bin", str(src), tmp_key=".tmp/m-w.bin")
    assert (result.size, result.sha256) == (src.stat().st_size, sha(src.read_bytes()))
    assert not store.exists(".tmp/m-w.bin")
    got = store.download("model/m.bin", str(tmp_path / "out" / "m.bin"))
    assert (got.size, got.sha256) == (result.size, result.sha256)
    assert (tmp_path / "out" / "m.bin").read_bytes() == src.read_bytes()


def test_get_if_match_and_versions(store: Store) -> None:
    store.put_atomic("k", b"v1", tmp_key=".tmp/k-1")
    first = store.get_versioned("k")
    assert first.data == b"v1"
    assert store.get("k", if_match=first.token) == b"v1"
    store.put_atomic("k", b"v2", tmp_key=".tmp/k-2")
    assert store.get_versioned("k").token != first.token
    with pytest.raises(PreconditionFailedError, match="changed"):
        store.get("k", if_match=first.token)


def test_put_if_absent(store: Store) -> None:
    assert store.put_if_absent("m/success.marker", b"") is True
    assert store.put_if_absent("m/success.marker", b"x") is False
    assert store.get("m/success.marker") == b""


def test_put_if_match_compare_and_swap(store: Store) -> None:
    token = store.put_if_match("claims/h.json", b"1", None)
    with pytest.raises(PreconditionFailedError):
        store.put_if_match("claims/h.json", b"2", None)  # None: only if absent
    token2 = store.put_if_match("claims/h.json", b"2", token)
    assert token2 != token
    with pytest.raises(PreconditionFailedError):
        store.put_if_match("claims/h.json", b"3", token)  # stale
    assert store.get_versioned("claims/h.json") == Versioned(data=b"2", token=token2)
    store.delete("claims/h.json")
    with pytest.raises(PreconditionFailedError):
        store.put_if_match("claims/h.json", b"4", token2)  # deleted since


def test_list_sorted_recursive_relative(store: Store) -> None:
    keys = ["b/2", "a/1", "b/10", "a/.hidden", "a/sub/deep", "ab/x"]
    for key in keys:
        store.put_atomic(key, key.encode(), tmp_key=f".tmp/{key.replace('/', '_')}")
    listed = store.list("")
    assert [info.key for info in listed] == sorted(keys)
    assert all(info.size == len(info.key) and info.mtime > 0 for info in listed)
    # the checksum a listing carries is free: the ETag on S3; locally none (it would read every file)
    assert all(
        info.checksum == (None if isinstance(store, LocalStore) else store.checksum(info.key)) for info in listed
    )
    assert [info.key for info in store.list("a")] == ["a/.hidden", "a/1", "a/sub/deep"]  # not ab/x
    assert [info.key for info in store.list("a/")] == ["a/.hidden", "a/1", "a/sub/deep"]
    assert [info.key for info in store.list("a/1")] == ["a/1"]
    assert store.list("nope") == []
    assert [info.key for info in store.list("b")] == ["b/10", "b/2"]


def test_checksum_is_the_version_token(store: Store) -> None:
    store.put_atomic("d/k", b"v1", tmp_key=".tmp/k")
    token = store.get_versioned("d/k").token
    assert store.checksum("d/k") == token
    assert store.get("d/k", if_match=store.checksum("d/k")) == b"v1"
    store.put_atomic("d/k", b"v2", tmp_key=".tmp/k")
    assert store.checksum("d/k") == store.get_versioned("d/k").token != token
    with pytest.raises(NotFoundError):
        store.checksum("d/nope")


def test_digest_is_the_size_and_sha256_of_the_bytes(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """What finalization checks each artifact with: streamed, never the object whole in memory (no ``get``)."""
    data = bytes(range(256)) * 9000  # 2.3 MB: several read chunks
    store.put_atomic("d/big", data, tmp_key=".tmp/big")
    monkeypatch.setattr(type(store), "get", _refuse_whole_read)
    monkeypatch.setattr(type(store), "get_versioned", _refuse_whole_read)
    found = store.digest("d/big")
    assert (found.key, found.size, found.sha256) == ("d/big", len(data), hashlib.sha256(data).hexdigest())
    with pytest.raises(NotFoundError):
        store.digest("d/nope")


def _refuse_whole_read(*args: object, **kwargs: object) -> bytes:
    raise AssertionError("the object was read whole into memory")


def test_listing_reads_no_object(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """A listing costs names and sizes, never contents: no file is opened locally, no GET or HEAD on S3."""
    for key in ("a/1", "a/b/2", "c"):
        store.put_atomic(key, key.encode() * 1000, tmp_key=".tmp/x")
    opened: list[str] = []
    if isinstance(store, LocalStore):
        os.chmod(os.path.join(store.root, "a", "1"), 0)  # unreadable (unless running as root: hence the patches)

        def refuse(file: object, *args: object, **kwargs: object) -> object:
            opened.append(str(file))
            raise PermissionError(13, "opened during a listing", str(file))

        monkeypatch.setattr("builtins.open", refuse)
        monkeypatch.setattr(os, "open", refuse)
    else:
        assert isinstance(store, S3Store)
        for operation in ("GetObject", "HeadObject"):
            store._client.meta.events.register(f"before-call.s3.{operation}", lambda **_: opened.append("request"))
    assert [(i.key, i.size) for i in store.list("")] == [("a/1", 3000), ("a/b/2", 5000), ("c", 1000)]
    assert [i.key for i in store.list("a/")] == ["a/1", "a/b/2"]
    assert [i.key for i in store.list("c")] == ["c"]
    assert opened == []


class _CountingFile(io.FileIO):
    """A file that adds every byte read from it to ``counts[name]``."""

    counts: ClassVar[dict[str, int]] = {}

    def _count(self, n: int) -> int:
        self.counts[str(self.name)] = self.counts.get(str(self.name), 0) + n
        return n

    def readinto(self, buffer: Any) -> int:
        return self._count(super().readinto(buffer) or 0)

    def read(self, size: int = -1) -> bytes:
        data = super().read(size)
        self._count(len(data))
        return data

    def readall(self) -> bytes:
        data = super().readall()
        self._count(len(data))
        return data


class _Counted:
    """A hash object that adds the bytes it hashes to ``counts[name]``."""

    def __init__(self, name: str, counts: dict[str, int], data: bytes = b"", **options: bool) -> None:
        self._hash, self._name, self._counts = hashlib.new(name, **options), name, counts
        self.update(data)

    def update(self, data: Any) -> None:
        self._counts[self._name] += memoryview(data).nbytes
        self._hash.update(data)

    def digest(self) -> bytes:
        return self._hash.digest()

    def hexdigest(self) -> str:
        return self._hash.hexdigest()


class _CountingHashlib:
    """Stands in for ``hashlib`` in the store modules: counts the bytes each algorithm hashes there."""

    def __init__(self) -> None:
        self.counts = {"sha256": 0, "md5": 0}

    def sha256(self, data: bytes = b"") -> _Counted:
        return _Counted("sha256", self.counts, data)

    def md5(self, data: bytes = b"", *, usedforsecurity: bool = True) -> _Counted:
        return _Counted("md5", self.counts, data, usedforsecurity=usedforsecurity)

    def file_digest(self, handle: Any, name: str) -> _Counted:
        counted = _Counted(name, self.counts)
        while chunk := handle.read(MiB):
            counted.update(chunk)
        return counted


def test_put_file_atomic_reads_the_source_once(store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The source is read once and each byte hashed once while writing (one pass): locally the tmp file is never
    read back. S3 hashes a single-request upload once per algorithm, and the server checks the checksum."""
    src = tmp_path / "src.bin"
    src.write_bytes(os.urandom(9 * MiB + 5))
    size = src.stat().st_size
    counts: dict[str, int] = {}
    monkeypatch.setattr(_CountingFile, "counts", counts)
    hashes = _CountingHashlib()
    for module in (files_module, s3_digest):
        monkeypatch.setattr(module, "hashlib", hashes)
    real_open = open

    def counting_open(file: Any, mode: str = "r", buffering: int = -1, *args: Any, **kwargs: Any) -> Any:
        if mode == "rb" and not args and not kwargs:
            raw = _CountingFile(file, "r")
            return raw if buffering == 0 else io.BufferedReader(raw)
        return real_open(file, mode, buffering, *args, **kwargs)

    monkeypatch.setattr("builtins.open", counting_open)
    result = store.put_file_atomic("model/m.bin", str(src), tmp_key=".tmp/m-w.bin")
    monkeypatch.undo()
    assert (result.size, result.sha256) == (size, sha(src.read_bytes()))
    assert counts.pop(str(src)) == size
    if isinstance(store, LocalStore):
        assert counts == {}
        assert hashes.counts == {"sha256": size, "md5": 0}
    else:
        assert counts == {}
        # plus the few bytes of the part digests that the ETag and composite checksum are made of
        assert size <= hashes.counts["sha256"] < size + 1024 and size <= hashes.counts["md5"] < size + 1024
    assert store.get("model/m.bin") == src.read_bytes()


def test_missing_objects(store: Store, tmp_path: Path) -> None:
    with pytest.raises(NotFoundError):
        store.get("nope")
    with pytest.raises(NotFoundError):
        store.get_versioned("dir/nope")
    with pytest.raises(NotFoundError):
        store.download("nope", str(tmp_path / "nope.bin"))
    assert not (tmp_path / "nope.bin").exists()
    assert not store.exists("nope")
    store.delete("nope")
    store.put_atomic("gone", b"x", tmp_key=".tmp/gone")
    store.delete("gone")
    assert not store.exists("gone")


def test_uri_and_keys(store: Store) -> None:
    assert store.uri("a/b.json") == f"{store.root_uri}/a/b.json"
    assert store.uri("") == store.root_uri
    assert store.root_uri.startswith(("file:///", "s3://")) and store.root_uri.endswith(("/root", "/some/prefix"))
    with pytest.raises(StoreError, match=r"'\.\.'"):
        store.put_atomic("../escape", b"x", tmp_key=".tmp/escape")


# -- S3 only: moto and radosgw -------------------------------------------------------------------


@pytest.mark.parametrize("copy", ["CopyObject", "UploadPartCopy"])
def test_multipart_upload(s3_server: S3Endpoint, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, copy: str) -> None:
    if copy == "UploadPartCopy":  # what objects over 5 GiB take, here with 11 MiB
        monkeypatch.setattr(s3_writes, "MAX_COPY", MiB)
    store = s3_store(s3_server, multipart_threshold=5 * MiB, part_size=5 * MiB)
    src = tmp_path / "big.bin"
    src.write_bytes(os.urandom(11 * MiB + 3))
    result = store.put_file_atomic("big.bin", str(src), tmp_key=".tmp/big-w.bin")
    assert (result.size, result.sha256) == (src.stat().st_size, sha(src.read_bytes()))
    [info] = store.list("")
    assert info.key == "big.bin"
    assert info.checksum.endswith("-3") or copy == "CopyObject"  # part copies keep the upload's 3 parts
    assert store.get("big.bin") == src.read_bytes()


def test_prefix_isolation_and_pagination(s3_server: S3Endpoint) -> None:
    store = s3_store(s3_server, page_size=2)
    client = s3_server.client()
    for key in ("some/prefixed", "other/x", "some/prefix/dir/"):  # outside the root, and a "directory"
        client.put_object(Bucket=store.bucket, Key=key, Body=b"")
    keys = [f"k/{i:02d}" for i in range(7)]
    for key in reversed(keys):
        store.put_if_absent(key, key.encode())
    calls: list[str] = []
    store._client.meta.events.register("before-call.s3.ListObjectsV2", lambda **_: calls.append("page"))
    assert [info.key for info in store.list("")] == keys
    assert len(calls) == 4  # 7 keys, 2 per page


def test_body_cut_short_is_fetched_again(
    s3_server: S3Endpoint, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    store = s3_store(s3_server)
    store.put_atomic("k", b"x" * 100_000, tmp_key=".tmp/k")
    real, calls = store._client.get_object, []

    def cut_first(**request: Any) -> Any:
        response = real(**request)
        calls.append(request)
        if len(calls) == 1:
            response["Body"].iter_chunks = _cut_short
        return response

    for tries in range(1, store.attempts + 1):  # a try after a cut one goes through the client with the tries left
        monkeypatch.setattr(store._clients.with_tries(tries), "get_object", cut_first)
    assert store.get("k") == b"x" * 100_000
    assert len(calls) == 2
    calls.clear()  # the streamed digest starts its hash again too: the cut bytes are not counted twice
    found = store.digest("k")
    assert (found.size, found.sha256) == (100_000, hashlib.sha256(b"x" * 100_000).hexdigest())
    assert len(calls) == 2
    calls.clear()  # a download hashes as it writes: the file and its hash both start again, nothing read back
    done = store.download("k", str(tmp_path / "k"))
    assert (tmp_path / "k").read_bytes() == b"x" * 100_000
    assert (done.size, done.sha256) == (100_000, hashlib.sha256(b"x" * 100_000).hexdigest())
    assert len(calls) == 2


def test_a_part_tried_again_after_a_late_try_has_the_tries_left(
    s3_server: S3Endpoint, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A part upload's call was bound to the store's first client before it was sent: a try after a late one kept
    botocore's AWS_MAX_ATTEMPTS retries instead of the tries the request had left."""
    monkeypatch.setattr("ml8s.store.s3.deadline.MIN_RATE", 1 << 40)  # the allowance: 1 s, whatever the part's size
    env = {**s3_server.env(), "AWS_MAX_ATTEMPTS": "3", "ML8S_S3_REQUEST_DEADLINE": "1"}
    store = S3Store(f"s3://{s3_server.make_bucket()}/p", env=env, multipart_threshold=5 * MiB, part_size=5 * MiB)
    used: list[int] = []  # the tries of the client each part upload went through
    for tries in (1, 2, 3):
        client = store._clients.with_tries(tries)

        def upload_part(real: Any = client.upload_part, tries: int = tries, **request: Any) -> Any:
            used.append(tries)
            if len(used) == 1:
                time.sleep(2)  # the first try is late
            return real(**request)

        monkeypatch.setattr(client, "upload_part", upload_part)
    data = bytes(range(256)) * (6 * MiB // 256)
    assert store.put_atomic("k", data, tmp_key=".tmp/k").size == len(data)
    assert used[:2] == [3, 2], used  # part 1: late, then tried with 2 tries left


def _cut_short(size: int) -> Iterator[bytes]:
    yield b"x" * 10
    raise ResponseStreamingError(error="connection reset by peer")


def test_unreachable_endpoint_fails_fast() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    env = {"AWS_ENDPOINT_URL": url, "AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s", "AWS_MAX_ATTEMPTS": "2"}
    store = S3Store("s3://b/p", env=env)
    sent: list[str] = []
    for client in (store._client, store._once):
        client.meta.events.register("before-send.s3", lambda event_name, **_: sent.append(event_name.split(".")[-1]))
    started = time.monotonic()
    with pytest.raises(StoreUnavailableError, match=rf"cannot reach S3 endpoint {url} for GET s3://b/p/k: connection"):
        store.get("k")
    assert sent == ["GetObject", "GetObject"]  # AWS_MAX_ATTEMPTS in all
    with pytest.raises(StoreUnavailableError, match="conditional PUT s3://b/p/m"):
        store.put_if_absent("m", b"")
    assert sent[2:] == ["PutObject"]  # a conditional write is sent once, and not read back: it never left
    assert time.monotonic() - started < 10


def test_each_failed_attempt_is_said_and_an_answer_is_not(
    s3_server: S3Endpoint, caplog: pytest.LogCaptureFixture
) -> None:
    """botocore retries in silence: against a hung endpoint a user waited minutes without a word."""
    url = f"http://127.0.0.1:{free_port()}"
    env = {"AWS_ENDPOINT_URL": url, "AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s", "AWS_MAX_ATTEMPTS": "3"}
    with caplog.at_level(logging.WARNING, logger="ml8s.store.s3"):
        with pytest.raises(StoreUnavailableError):
            S3Store("s3://b/p", env=env).get("k")
        said = [r.getMessage() for r in caplog.records if r.name == "ml8s.store.s3"]
        assert len(said) == 3, said
        for attempt, line in enumerate(said, start=1):
            assert line.startswith(f"S3 GetObject at {url}: attempt {attempt} of 3 failed (Could not connect"), line
        assert [line.endswith("; trying again") for line in said] == [True, True, False]
        caplog.clear()
        store = S3Store(f"s3://{s3_server.make_bucket()}/p", env=s3_server.env())
        with pytest.raises(NotFoundError):
            store.get("absent")  # a 404 is an answer
        assert store.put_if_absent("k", b"1") and store.get("k") == b"1"
        assert [r for r in caplog.records if r.name == "ml8s.store.s3"] == []


def test_missing_bucket_is_named(s3_server: S3Endpoint) -> None:
    store = S3Store("s3://ml8s-no-such-bucket/p", env=s3_server.env())
    for action in (lambda: store.get("k"), lambda: store.exists("k"), lambda: store.list("")):
        with pytest.raises(StoreError, match="bucket 'ml8s-no-such-bucket' does not exist") as info:
            action()
        assert not isinstance(info.value, NotFoundError)


def test_environment_sources(moto_server: S3Endpoint, monkeypatch: pytest.MonkeyPatch) -> None:
    bucket = moto_server.make_bucket()
    flyte = {
        "FLYTE_AWS_ENDPOINT": moto_server.url,
        "FLYTE_AWS_ACCESS_KEY_ID": moto_server.access_key,
        "FLYTE_AWS_SECRET_ACCESS_KEY": moto_server.secret_key,
    }
    via_flyte = S3Store(f"s3://{bucket}/p", env=flyte)
    assert via_flyte.put_if_absent("f", b"1")
    assert via_flyte._client.meta.region_name == "us-east-1"  # the default
    assert via_flyte._client.meta.config.s3 == {"addressing_style": "path"}  # an endpoint is set
    regions = {"AWS_REGION": "eu-west-3", "AWS_DEFAULT_REGION": "us-west-2"}
    assert S3Store("s3://b", env=regions)._client.meta.region_name == "eu-west-3"
    closed = {**flyte, "FLYTE_AWS_ENDPOINT": f"http://127.0.0.1:{free_port()}", "AWS_ENDPOINT_URL": moto_server.url}
    assert S3Store(f"s3://{bucket}/p", env=closed).get("f") == b"1"  # AWS_* wins over FLYTE_*
    for name, value in moto_server.env().items():
        monkeypatch.setenv(name, value)
    opened = open_store(f"s3://{bucket}/p/")
    assert isinstance(opened, S3Store) and opened.root_uri == f"s3://{bucket}/p"
    with pytest.raises(ConfigError):
        S3Store("s3:///p")
    with pytest.raises(ConfigError, match="AWS_MAX_ATTEMPTS"):
        S3Store("s3://b", env={"AWS_MAX_ATTEMPTS": "0"})


def test_wrong_checksum_header_is_caught(s3_server: S3Endpoint, monkeypatch: pytest.MonkeyPatch) -> None:
    """A checksum header that disagrees with the body: radosgw answers BadDigest; moto stores the claim."""
    store = s3_store(s3_server)
    store.put_atomic("k", b"old", tmp_key=".tmp/k")
    real = s3_digest.Digest.add

    def wrong_headers(self: s3_digest.Digest, data: bytes) -> tuple[str, str]:
        real(self, data)  # the digests of what is sent stay right; the headers claim other bytes
        return real(s3_digest.Digest(), b"other bytes")

    monkeypatch.setattr(s3_digest.Digest, "add", wrong_headers)
    with pytest.raises(IntegrityError, match="BadDigest" if s3_server.kind == "radosgw" else r"checksum o\+rV7trV"):
        store.put_atomic("k", b"new", tmp_key=".tmp/k")
    assert store.get("k") == b"old"
    assert not store.exists(".tmp/k")


def test_bytes_changed_in_transit_are_caught(s3_server: S3Endpoint, monkeypatch: pytest.MonkeyPatch) -> None:
    store = s3_store(s3_server)
    real = store._client.put_object

    def corrupt(**request: Any) -> Any:
        return real(**{**request, "Body": request["Body"][:-1] + b"!"})

    monkeypatch.setattr(store._client, "put_object", corrupt)
    # radosgw checks Content-MD5 (BadDigest); moto checks nothing, so the ETag check after the upload fails
    with pytest.raises(IntegrityError, match="BadDigest" if s3_server.kind == "radosgw" else "expected 5 bytes"):
        store.put_atomic("k", b"hello", tmp_key=".tmp/k")
    assert not store.exists("k") and not store.exists(".tmp/k")


def _fail_after(real: Callable[..., object], error: Exception, send: bool) -> Callable[..., object]:
    def put_object(**request: object) -> object:
        if send:
            real(**request)
        raise error

    return put_object


TIMEOUT = ReadTimeoutError(endpoint_url="http://s3")
CLOSED = ConnectionClosedError(endpoint_url="http://s3")
SERVER_ERROR = ClientError({"Error": {"Code": "InternalError"}, "ResponseMetadata": {"HTTPStatusCode": 500}}, "Put")


@pytest.mark.parametrize("error", [TIMEOUT, CLOSED, SERVER_ERROR], ids=["timeout", "closed", "500"])
def test_unknown_outcome_that_landed_is_ours(
    s3_server: S3Endpoint, monkeypatch: pytest.MonkeyPatch, error: Exception
) -> None:
    store = s3_store(s3_server)
    token = store.put_if_match("h", b"1", None)
    monkeypatch.setattr(store._once, "put_object", _fail_after(store._once.put_object, error, send=True))
    assert store.put_if_match("h", b"2", token) == store.get_versioned("h").token
    assert store.get("h") == b"2"
    assert store.put_if_absent("marker", b"") is True


def test_unknown_outcome_that_did_not_land(s3_server: S3Endpoint, monkeypatch: pytest.MonkeyPatch) -> None:
    store = s3_store(s3_server)
    token = store.put_if_match("h", b"1", None)
    store.put_if_match("taken", b"theirs", None)
    monkeypatch.setattr(store._once, "put_object", _fail_after(store._once.put_object, TIMEOUT, send=False))
    with pytest.raises(RetryableStoreError, match="outcome unknown: read back, the object is version"):
        store.put_if_match("h", b"2", token)
    with pytest.raises(RetryableStoreError, match="the object is absent"):
        store.put_if_absent("marker", b"")
    assert store.put_if_absent("taken", b"mine") is False  # someone else's bytes: create-only lost
    monkeypatch.undo()
    assert store.put_if_match("h", b"2", token)  # retrying is safe
    assert store.get("h") == b"2"


def test_conditional_request_conflict_is_retryable(moto_server: S3Endpoint) -> None:
    store = s3_store(moto_server)
    with Stubber(store._once) as stub:
        stub.add_client_error("put_object", "ConditionalRequestConflict", http_status_code=409)
        with pytest.raises(RetryableStoreError, match="409 ConditionalRequestConflict"):
            store.put_if_match("h", b"1", None)
        stub.assert_no_pending_responses()
    assert not store.exists("h")
