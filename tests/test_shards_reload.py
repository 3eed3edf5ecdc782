"""A loader that read the old metadata while a save over the checkpoint committed: the save deletes the old set's
shards right after its commit, so the loader's first shard was NOT_FOUND. It now reads the metadata once more and
loads the new set whole (never a mix); when the metadata did not change, the missing shard stays NOT_FOUND. The
interleaving is forced by a hook at the loader's first shard open, never by a race."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from s3_servers import S3Endpoint
from shards_support import CID, OTHER_CID, PREFIX, SMALL, make_state

from ml8s.errors import NotFoundError
from ml8s.shards import (
    load_resharded,
    load_shard,
    load_state_dict,
    read_metadata,
    save_state_dict,
    split_state_dict,
)
from ml8s.shards import loader as shard_loader
from ml8s.shards.layout import file_key
from ml8s.store import LocalStore, S3Store, Store


@pytest.fixture(params=["local", "moto"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    if request.param == "local":
        return LocalStore(str(tmp_path / "root"))
    endpoint: S3Endpoint = request.getfixturevalue("moto_server")
    return S3Store(f"s3://{endpoint.make_bucket()}/reload", env=endpoint.env())


def _before_first_open(monkeypatch: pytest.MonkeyPatch, act: Callable[[int], None]) -> list[int]:
    """Run ``act`` once, when the loader opens its first shard (after it read the metadata), given its rank."""
    real, calls = shard_loader._Shards.get, []

    def late(self: shard_loader._Shards, rank: int) -> object:
        calls.append(rank)
        if len(calls) == 1:
            act(rank)
        return real(self, rank)

    monkeypatch.setattr(shard_loader._Shards, "get", late)
    return calls


def _resave(store: Store, world_size: int = 2) -> Callable[[int], None]:
    def act(_: int) -> None:
        save_state_dict(store, PREFIX, make_state(1), world_size=world_size, checkpoint_id=OTHER_CID, config=SMALL)

    return act


def _equal(loaded: dict[str, torch.Tensor], state: dict[str, torch.Tensor]) -> bool:
    return loaded.keys() == state.keys() and all(torch.equal(loaded[k], v) for k, v in state.items())


def test_a_load_during_a_resave_loads_the_new_set(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    save_state_dict(store, PREFIX, make_state(0), world_size=3, checkpoint_id=CID, config=SMALL)
    calls = _before_first_open(monkeypatch, _resave(store))
    loaded = load_state_dict(store, PREFIX)  # was NOT_FOUND: model_shard_0.shard of the old set
    assert calls and _equal(loaded, make_state(1))  # the new set whole, nothing of the old one


def test_a_shard_and_resharded_load_during_a_resave_load_the_new_set(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    save_state_dict(store, PREFIX, make_state(0), world_size=3, checkpoint_id=CID, config=SMALL)
    _before_first_open(monkeypatch, _resave(store))
    pieces = load_shard(store, PREFIX, 1)
    wanted = split_state_dict(make_state(1), 2, SMALL.plan)[1]
    assert [(p.name, p.row_start) for p in pieces] == [(p.name, p.row_start) for p in wanted]
    assert all(torch.equal(p.tensor, w.tensor) for p, w in zip(pieces, wanted, strict=True))
    monkeypatch.undo()
    save_state_dict(store, PREFIX, make_state(0), world_size=3, checkpoint_id=CID, config=SMALL)
    _before_first_open(monkeypatch, _resave(store, world_size=3))
    resharded = load_resharded(store, PREFIX, 1, 0)
    assert _equal({p.name: p.tensor for p in resharded}, make_state(1))


def test_a_shard_deleted_under_unchanged_metadata_stays_not_found(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No save moved the metadata: a deleted shard is damage, named as before, never retried into another set."""
    meta = save_state_dict(store, PREFIX, make_state(0), world_size=3, checkpoint_id=CID, config=SMALL)
    gone: list[str] = []

    def delete(rank: int) -> None:
        gone.append(file_key(PREFIX, next(s.file for s in meta.shards if s.rank == rank)))
        store.delete(gone[0])

    calls = _before_first_open(monkeypatch, delete)
    with pytest.raises(NotFoundError) as caught:
        load_state_dict(store, PREFIX)
    assert type(caught.value) is NotFoundError and caught.value.message == f"{store.uri(gone[0])} does not exist"
    assert len(calls) == 1  # not opened again: the metadata was read again, unchanged, and the load stopped


def test_a_load_given_old_metadata_is_told_the_checkpoint_was_replaced(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The caller's metadata names the old set: loading another checkpoint under it would contradict what the
    caller holds, so it is told the metadata was replaced (still NOT_FOUND), never handed the new tensors."""
    save_state_dict(store, PREFIX, make_state(0), world_size=3, checkpoint_id=CID, config=SMALL)
    old = read_metadata(store, PREFIX)
    _before_first_open(monkeypatch, _resave(store))
    with pytest.raises(NotFoundError, match=f"replaced since the metadata given was read.*{OTHER_CID}"):
        load_state_dict(store, PREFIX, metadata=old)
    monkeypatch.undo()
    assert _equal(load_state_dict(store, PREFIX), make_state(1))
