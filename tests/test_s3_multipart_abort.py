"""An S3 multipart upload that fails or is cut short is aborted: its parts, billed while it exists, never stay.

Against moto's server; failures are injected between parts (a part refused, a read of the source failing) and
in the requests around them: the abort's first try dropped, a create whose first answer was lost (the server
made an upload the writer never learned of, and botocore tried again)."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ConnectionClosedError
from s3_servers import S3Endpoint

from ml8s.errors import StoreError
from ml8s.interrupts import Interrupted
from ml8s.store import S3Store

MiB = 1024 * 1024


def _store(endpoint: S3Endpoint) -> S3Store:
    return S3Store(
        f"s3://{endpoint.make_bucket()}/up", env=endpoint.env(), multipart_threshold=5 * MiB, part_size=5 * MiB
    )


def _uploads(endpoint: S3Endpoint, store: S3Store) -> list[str]:
    listed = endpoint.client().list_multipart_uploads(Bucket=store.bucket)
    return sorted(u["Key"] for u in listed.get("Uploads", []))


def _on_send(store: S3Store, operation: str, handler: Callable[..., Any]) -> None:
    """``handler`` on every try of ``operation``, whichever of the store's clients sends it."""
    for tries in range(1, store.attempts + 1):
        store._clients.with_tries(tries).meta.events.register(f"before-send.s3.{operation}", handler)


def _dropped_once(calls: list[str], before: Callable[[Any], None] = lambda request: None) -> Callable[..., None]:
    def drop(request: Any, **_: Any) -> None:
        calls.append(request.url)
        if len(calls) == 1:
            before(request)
            raise ConnectionClosedError(endpoint_url=request.url)

    return drop


def _fail_second_part(store: S3Store, monkeypatch: pytest.MonkeyPatch, failure: BaseException) -> None:
    real, parts = store._upload_part, []

    def second_fails(request: Any) -> Any:
        parts.append(request["PartNumber"])
        if len(parts) == 2:
            raise failure
        return real(request)

    monkeypatch.setattr(store, "_upload_part", second_fails)


@pytest.mark.parametrize(
    "failure",
    [StoreError("part PUT: the endpoint refused part 2 (injected)"), Interrupted(signal.SIGTERM)],
    ids=["refused", "sigterm"],
)
def test_a_failed_upload_is_aborted_though_the_abort_s_first_try_is_dropped(
    moto_server: S3Endpoint, monkeypatch: pytest.MonkeyPatch, failure: BaseException
) -> None:
    """The abort was tried once and its failure silenced: the endpoint that failed the upload (a dropped
    connection, a 5xx) failed its abort too, and the upload stayed, its parts billed, for ever. The same for
    an upload a signal stops between its parts (SIGTERM unwinds as Interrupted)."""
    store = _store(moto_server)
    _fail_second_part(store, monkeypatch, failure)
    aborts: list[str] = []
    _on_send(store, "AbortMultipartUpload", _dropped_once(aborts))
    with pytest.raises(type(failure)):
        store.put_atomic("big.bin", os.urandom(12 * MiB), tmp_key=".tmp/big-w.bin")
    assert _uploads(moto_server, store) == []
    assert len(aborts) == 2  # the dropped try and the one after it
    assert not store.exists("big.bin") and store.list("") == []


def test_an_upload_whose_create_answer_was_lost_leaves_none_behind(
    moto_server: S3Endpoint, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """CreateMultipartUpload landed but its answer was lost, and botocore tried again: the first upload's id never
    reached the writer, which aborted (or completed) only the second. Now every upload to its own tmp key goes,
    whether its source read fails between parts or the upload completes."""
    store = _store(moto_server)
    client = moto_server.client()
    creates: list[str] = []

    def lands(request: Any) -> None:  # the server makes the upload; the answer never arrives
        client.create_multipart_upload(Bucket=store.bucket, Key="up/.tmp/big-w.bin")

    _on_send(store, "CreateMultipartUpload", _dropped_once(creates, lands))
    source = tmp_path / "big.bin"
    source.write_bytes(os.urandom(12 * MiB))
    real_open, reads = open, []

    class FailsAfterAPart:  # a source whose read fails between the first part and the second (a disk error)
        def __init__(self, path: str) -> None:
            self._file = real_open(path, "rb")

        def read(self, size: int = -1) -> bytes:
            reads.append(size)
            if len(reads) == 2:
                raise OSError(5, "Input/output error")
            return self._file.read(size)

        def __enter__(self) -> FailsAfterAPart:
            return self

        def __exit__(self, *exc: object) -> None:
            self._file.close()

    import ml8s.store.s3.writes as writes

    monkeypatch.setattr(writes, "open", lambda path, mode="r": FailsAfterAPart(path), raising=False)
    with pytest.raises(StoreError, match=rf"cannot read {source} while uploading it to .*big\.bin: Input/output error"):
        store.put_file_atomic("big.bin", str(source), tmp_key=".tmp/big-w.bin")
    assert len(creates) == 2 and _uploads(moto_server, store) == []
    monkeypatch.undo()
    creates.clear()
    done = store.put_file_atomic("big.bin", str(source), tmp_key=".tmp/big-w.bin")  # completed: the other goes too
    assert done.size == 12 * MiB and store.get("big.bin") == source.read_bytes()
    assert len(creates) == 2 and _uploads(moto_server, store) == []
