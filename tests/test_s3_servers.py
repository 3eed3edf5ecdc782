"""Smoke tests for the real-S3 fixtures in s3_servers.py (moto's HTTP server and Ceph radosgw)."""

from __future__ import annotations

import threading

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError
from s3_servers import RadosGW, S3Endpoint


def _status(exc: ClientError) -> int:
    return int(exc.response["ResponseMetadata"]["HTTPStatusCode"])


def test_env_points_at_endpoint(s3_server: S3Endpoint) -> None:
    env = s3_server.env()
    assert env["AWS_ENDPOINT_URL"] == s3_server.url
    assert env["AWS_ACCESS_KEY_ID"] == s3_server.access_key
    assert env["AWS_SECRET_ACCESS_KEY"] == s3_server.secret_key
    assert env["AWS_DEFAULT_REGION"] == s3_server.region
    assert env["AWS_EC2_METADATA_DISABLED"] == "true"
    assert s3_server.url.startswith("http://127.0.0.1:")


def test_put_get_list_and_conditional_puts(s3_server: S3Endpoint) -> None:
    s3 = s3_server.client()
    bucket = s3_server.make_bucket()
    assert bucket != s3_server.make_bucket()  # unique names

    put = s3.put_object(Bucket=bucket, Key="dir/a.txt", Body=b"one")
    assert s3.get_object(Bucket=bucket, Key="dir/a.txt")["Body"].read() == b"one"
    listed = s3.list_objects_v2(Bucket=bucket, Prefix="dir/")
    assert [o["Key"] for o in listed["Contents"]] == ["dir/a.txt"]

    # create-only put on an existing key -> 412
    with pytest.raises(ClientError) as info:
        s3.put_object(Bucket=bucket, Key="dir/a.txt", Body=b"two", IfNoneMatch="*")
    assert _status(info.value) == 412
    assert s3.get_object(Bucket=bucket, Key="dir/a.txt")["Body"].read() == b"one"

    # compare-and-swap on the (unquoted) etag
    etag = put["ETag"].strip('"')
    swapped = s3.put_object(Bucket=bucket, Key="dir/a.txt", Body=b"three", IfMatch=etag)
    assert swapped["ETag"] != put["ETag"]
    head = s3.head_object(Bucket=bucket, Key="dir/a.txt")
    assert head["ETag"] == swapped["ETag"]
    with pytest.raises(ClientError) as info:
        s3.put_object(Bucket=bucket, Key="dir/a.txt", Body=b"four", IfMatch=etag)  # stale
    assert _status(info.value) == 412
    assert s3.get_object(Bucket=bucket, Key="dir/a.txt")["Body"].read() == b"three"


def test_radosgw_stop_and_start_keep_data(radosgw_server: RadosGW) -> None:
    s3 = radosgw_server.client(connect_timeout=1, read_timeout=5, retries={"max_attempts": 1})
    bucket = radosgw_server.make_bucket()
    s3.put_object(Bucket=bucket, Key="survives", Body=b"still here")

    radosgw_server.stop()
    try:
        with pytest.raises(EndpointConnectionError):
            s3.get_object(Bucket=bucket, Key="survives")
    finally:
        radosgw_server.start()
    assert s3.get_object(Bucket=bucket, Key="survives")["Body"].read() == b"still here"


@pytest.mark.parametrize("round_", range(3))
def test_radosgw_conditional_create_has_one_winner(radosgw_server: RadosGW, round_: int) -> None:
    bucket = radosgw_server.make_bucket()
    racers = 16
    clients = [radosgw_server.client(max_pool_connections=2) for _ in range(racers)]
    barrier = threading.Barrier(racers)
    outcomes: list[int | str] = [0] * racers

    def race(i: int) -> None:
        barrier.wait()
        try:
            clients[i].put_object(Bucket=bucket, Key="claim", Body=f"racer {i}".encode(), IfNoneMatch="*")
            outcomes[i] = 200
        except ClientError as exc:
            outcomes[i] = _status(exc)
        except Exception as exc:  # pragma: no cover - reported in the assertion below
            outcomes[i] = repr(exc)

    threads = [threading.Thread(target=race, args=(i,)) for i in range(racers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert outcomes.count(200) == 1, outcomes
    assert all(o in (200, 409, 412) for o in outcomes), outcomes
    winner = outcomes.index(200)
    body = clients[0].get_object(Bucket=bucket, Key="claim")["Body"].read()
    assert body == f"racer {winner}".encode()
