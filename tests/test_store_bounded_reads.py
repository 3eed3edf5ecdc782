"""Metadata read whole from a store is bounded: anyone who can write the store could plant a multi-GB shard
metadata file, ``history.json``, generation manifest, run record or registry claim, and every reader loaded
it into memory whole. Each is now refused before its bytes are read (the listed or announced size), with
ObjectTooLargeError naming the object, its size and the bound, locally and on S3."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest
from records_support import PREFIX as HISTORY
from records_support import write_history
from s3_servers import S3Endpoint
from shards_support import CID, PREFIX, SMALL, make_state
from test_s3_hostile import CREDENTIALS, answering

from ml8s.contract import layout
from ml8s.errors import NotFoundError, ObjectTooLargeError, UnsafeObjectError
from ml8s.inference.model_files import read_run_files
from ml8s.records import RecordStore
from ml8s.records import store as records_store
from ml8s.records import verify as records_verify
from ml8s.records.models import INDEX_MAX_BYTES, INDEX_NAME, MANIFEST_MAX_BYTES, manifest_name
from ml8s.registry.claim import read_claim
from ml8s.shards import layout as shards_layout
from ml8s.shards import load_state_dict, save_state_dict, verify_checkpoint
from ml8s.store import LocalStore, S3Store, Store

RUN = "0123456789ab"
SMALL_BOUND = 1000  # on S3 the bounds are lowered to this, so the planted object stays small


def _plant(store: Store, key: str, bound: int) -> None:
    """An object one byte over ``bound`` at ``key``: locally a sparse file (no disk used), on S3 real bytes."""
    if isinstance(store, LocalStore):
        path = Path(store.root, *key.split("/"))
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "wb") as handle:
            handle.truncate(bound + 1)
    else:
        store.put_atomic(key, b"{" + b" " * bound, tmp_key=f".tmp/{os.getpid()}")


@pytest.fixture(params=["local", "moto"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    if request.param == "local":
        return LocalStore(str(tmp_path / "root"))
    endpoint: S3Endpoint = request.getfixturevalue("moto_server")
    return S3Store(f"s3://{endpoint.make_bucket()}/some/prefix", env=endpoint.env())


def _bound(store: Store, monkeypatch: pytest.MonkeyPatch, module: object, name: str, real: int) -> int:
    """The bound in force: the real one locally (a sparse file costs nothing), a small one on S3."""
    if isinstance(store, LocalStore):
        return real
    monkeypatch.setattr(module, name, SMALL_BOUND)
    return SMALL_BOUND


def _refused(action: Callable[[], object], store: Store, key: str, bound: int) -> None:
    with pytest.raises(ObjectTooLargeError) as info:
        action()
    message = str(info.value)
    assert store.uri(key) in message and str(bound + 1) in message and f"at most {bound}" in message, message


def test_a_huge_shard_metadata_file_is_refused_unread(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    save_state_dict(store, PREFIX, make_state(), world_size=2, checkpoint_id=CID, config=SMALL)
    key = shards_layout.metadata_key(PREFIX)
    bound = _bound(store, monkeypatch, shards_layout, "METADATA_MAX_BYTES", shards_layout.METADATA_MAX_BYTES)
    _plant(store, key, bound)
    _refused(lambda: load_state_dict(store, PREFIX), store, key, bound)
    _refused(lambda: verify_checkpoint(store, PREFIX), store, key, bound)


def test_a_huge_history_index_or_manifest_is_refused_unread(
    store: Store, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    if isinstance(store, LocalStore):
        write_history(store.root)
    else:
        local = write_history(str(tmp_path / "local")).store
        for info in local.list(""):
            store.put_atomic(info.key, local.get(info.key), tmp_key=".tmp/copy")
    history = RecordStore(store, HISTORY)
    manifest = history.key(manifest_name(1))
    bound = _bound(store, monkeypatch, records_verify, "MANIFEST_MAX_BYTES", MANIFEST_MAX_BYTES)
    _plant(store, manifest, bound)
    _refused(history.open, store, manifest, bound)
    index = history.key(INDEX_NAME)
    bound = _bound(store, monkeypatch, records_store, "INDEX_MAX_BYTES", INDEX_MAX_BYTES)
    _plant(store, index, bound)
    _refused(history.index, store, index, bound)


def test_huge_run_records_and_claims_are_refused_unread(store: Store, request: pytest.FixtureRequest) -> None:
    monkeypatch: pytest.MonkeyPatch = request.getfixturevalue("monkeypatch")
    if isinstance(store, S3Store):  # read_run_files opens the store from its URI and the environment
        endpoint: S3Endpoint = request.getfixturevalue("moto_server")
        for name, value in endpoint.env().items():
            monkeypatch.setenv(name, value)
    bound = _bound(store, monkeypatch, layout, "RECORD_MAX_BYTES", layout.RECORD_MAX_BYTES)
    prefix = layout.run_prefix(RUN)
    store.put_atomic(f"{prefix}/{layout.SUCCESS_MARKER}", b"", tmp_key=".tmp/m")
    metadata = f"{prefix}/{layout.TRAINING_METADATA}"
    _plant(store, metadata, bound)
    _refused(lambda: read_run_files(store.root_uri, RUN), store, metadata, bound)
    claim = "registry/claims/model.json"
    _plant(store, claim, bound)
    _refused(lambda: read_claim(store, claim), store, claim, bound)


def test_a_server_that_announces_no_size_is_cut_at_the_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    """A chunked answer has no Content-Length to refuse by: the body is not read past the bound."""
    monkeypatch.setattr(records_store, "INDEX_MAX_BYTES", SMALL_BOUND)
    body = b"{" + b" " * (4 * SMALL_BOUND)
    with answering(200, body, {"ETag": '"e"', "Transfer-Encoding": "chunked"}) as (url, _):
        store = S3Store("s3://bkt/p", env={**CREDENTIALS, "AWS_ENDPOINT_URL": url})
        with pytest.raises(ObjectTooLargeError, match=r"history\.json holds \d+ bytes or more; expected at most"):
            RecordStore(store, HISTORY).index()


def test_a_ranged_read_returns_only_the_range(store: Store, tmp_path: Path) -> None:
    """get_range (what verify reads a shard's fixed header with, when no metadata bounds its size): the bytes
    asked for and no more, fewer at the end of the object, none for an empty range; a missing key is
    NotFoundError, and locally a symbolic link is refused unread."""
    data = bytes(range(256)) * 40
    store.put_atomic("dir/object", data, tmp_key=".tmp/object")
    assert store.get_range("dir/object", 0, 104) == data[:104]
    assert store.get_range("dir/object", 1000, 3000) == data[1000:4000]
    assert store.get_range("dir/object", len(data) - 10, 100) == data[-10:]
    assert store.get_range("dir/object", 5, 0) == b""
    with pytest.raises(NotFoundError):
        store.get_range("dir/absent", 0, 10)
    if isinstance(store, LocalStore):
        Path(store.root, "dir", "link").symlink_to(Path(store.root, "dir", "object"))
        with pytest.raises(UnsafeObjectError, match="a symbolic link"):
            store.get_range("dir/link", 0, 10)
