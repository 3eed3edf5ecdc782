"""A save over an existing sharded checkpoint is atomic: cut short anywhere (a write that fails, a process
killed), it leaves the old set whole or the new one, never a mix of both; a reader of either finds every shard."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from s3_servers import S3Endpoint
from shards_support import CID, OTHER_CID, PREFIX, SMALL, make_state

from ml8s.errors import StoreError, WrongCheckpointError
from ml8s.shards import (
    collect_receipts,
    load_state_dict,
    read_metadata,
    save_state_dict,
    split_state_dict,
    verify_checkpoint,
    write_metadata,
    write_shard,
)
from ml8s.store import LocalStore, S3Store, Store

REPO = Path(__file__).resolve().parents[1]
DIRECTORY = PREFIX.rsplit("/", 1)[0]


@pytest.fixture(params=["local", "moto"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    if request.param == "local":
        return LocalStore(str(tmp_path / "root"))
    endpoint: S3Endpoint = request.getfixturevalue("moto_server")
    return S3Store(f"s3://{endpoint.make_bucket()}/resave", env=endpoint.env())


def _holds(store: Store, checkpoint_id: str, seed: int) -> None:
    """The checkpoint at PREFIX verifies, is ``checkpoint_id``'s, and loads as make_state(seed)."""
    report = verify_checkpoint(store, PREFIX)
    assert report.ok and report.checkpoint_id == checkpoint_id, report.findings
    state, loaded = make_state(seed), load_state_dict(store, PREFIX)
    assert loaded.keys() == state.keys() and all(torch.equal(loaded[k], v) for k, v in state.items())


def _shard_files(store: Store) -> list[str]:
    return [i.key.rsplit("/", 1)[-1] for i in store.list(DIRECTORY) if "_shard_" in i.key]


def test_a_resave_whose_write_fails_midway_leaves_the_old_set_whole(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The second rank's upload fails: before, the first rank's new shard had replaced the old one in place, and
    the old metadata's header hash refused it (the old set no longer loaded, the new one was never committed)."""
    save_state_dict(store, PREFIX, make_state(0), world_size=3, checkpoint_id=CID, config=SMALL)
    old_files = _shard_files(store)
    real, calls = store.put_file_atomic, []

    def fails_second(key: str, path: str, *, tmp_key: str) -> object:
        calls.append(key)
        if len(calls) == 2:
            raise StoreError(f"cannot write {key}: No space left on device")
        return real(key, path, tmp_key=tmp_key)

    monkeypatch.setattr(store, "put_file_atomic", fails_second)
    with pytest.raises(StoreError, match="No space left"):
        save_state_dict(store, PREFIX, make_state(1), world_size=3, checkpoint_id=OTHER_CID, config=SMALL)
    monkeypatch.undo()
    _holds(store, CID, 0)
    assert set(old_files) <= set(_shard_files(store))  # untouched; rank 0's new generation lies beside them
    save_state_dict(store, PREFIX, make_state(1), world_size=2, checkpoint_id=OTHER_CID, config=SMALL)
    _holds(store, OTHER_CID, 1)
    meta = read_metadata(store, PREFIX)
    assert _shard_files(store) == [s.file for s in meta.shards]  # the old set and the cut-short one removed
    assert all(s.file == f"model_shard_{s.rank}.shard.{s.header_sha256[:16]}" for s in meta.shards)
    save_state_dict(store, PREFIX, make_state(0), world_size=3, checkpoint_id=CID, config=SMALL)  # and again
    _holds(store, CID, 0)
    assert len(_shard_files(store)) == 3


def test_the_same_save_again_keeps_its_files(tmp_path: Path) -> None:
    """Saved again as it is (the same shards: the same headers), a checkpoint keeps its plain names and bytes:
    only a shard another than the one the metadata lists under a name goes under its generation name."""
    store = LocalStore(str(tmp_path / "root"))
    save_state_dict(store, PREFIX, make_state(0), world_size=3, checkpoint_id=CID, config=SMALL)
    before = {key: store.get(key) for key in (i.key for i in store.list(DIRECTORY))}
    save_state_dict(store, PREFIX, make_state(0), world_size=3, checkpoint_id=CID, config=SMALL)
    assert {i.key: store.get(i.key) for i in store.list(DIRECTORY)} == before
    assert _shard_files(store) == [f"model_shard_{rank}.shard" for rank in range(3)]


_KILLED = textwrap.dedent(
    """
    import os, signal, sys
    sys.path.insert(0, sys.argv[3])
    from shards_support import OTHER_CID, PREFIX, SMALL, make_state
    from ml8s.shards import save_state_dict
    from ml8s.store import LocalStore
    store, at, calls = LocalStore(sys.argv[1]), sys.argv[2], []
    method = "put_file_atomic" if at.startswith("shard") else "delete"
    real = getattr(store, method)

    def killed(*args, **kwargs):
        done = real(*args, **kwargs)
        calls.append(args)
        if len(calls) == int(at[-1]):  # right after that write (or delete) landed
            os.kill(os.getpid(), signal.SIGKILL)  # no handler, no cleanup: as the OOM killer ends it
        return done

    setattr(store, method, killed)
    save_state_dict(store, PREFIX, make_state(1), world_size=3, checkpoint_id=OTHER_CID, config=SMALL)
    """
)


@pytest.mark.parametrize("at", ["shard-1", "shard-3", "delete-1"])
def test_a_resave_killed_midway_leaves_the_old_set_or_the_new_one(tmp_path: Path, at: str) -> None:
    """A process killed (SIGKILL) while saving over a checkpoint: before its metadata is committed (after its
    first or last shard was written) the old set verifies and loads as it was; after (while removing the old
    files) the new one loads, and verify names the old files left as strays, which the next save removes."""
    store = LocalStore(str(tmp_path / "root"))
    save_state_dict(store, PREFIX, make_state(0), world_size=3, checkpoint_id=CID, config=SMALL)
    proc = subprocess.run(
        [sys.executable, "-c", _KILLED, store.root, at, str(Path(__file__).parent)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=300,
        check=False,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-3000:]
    if at.startswith("shard"):
        _holds(store, CID, 0)
    else:
        assert verify_checkpoint(store, PREFIX).checks == {"stray_shard"}
        state, loaded = make_state(1), load_state_dict(store, PREFIX)
        assert all(torch.equal(loaded[k], v) for k, v in state.items())
    save_state_dict(store, PREFIX, make_state(1), world_size=3, checkpoint_id=OTHER_CID, config=SMALL)
    _holds(store, OTHER_CID, 1)
    assert len(_shard_files(store)) == 3


def test_a_link_where_the_metadata_belongs_does_not_stop_a_save(tmp_path: Path) -> None:
    """A symbolic link in the metadata's place (planted, or left by a clumsy copy) is no checkpoint: the save
    reads nothing through it, writes its shards beside it, and its metadata replaces the link itself."""
    store = LocalStore(str(tmp_path / "root"))
    outside = tmp_path / "outside.json"
    outside.write_text("{}")
    (tmp_path / "root" / DIRECTORY).mkdir(parents=True)
    (tmp_path / "root" / f"{PREFIX}.metadata.json").symlink_to(outside)
    save_state_dict(store, PREFIX, make_state(0), world_size=2, checkpoint_id=CID, config=SMALL)
    _holds(store, CID, 0)
    assert outside.read_text() == "{}" and not (tmp_path / "root" / f"{PREFIX}.metadata.json").is_symlink()


def test_receipts_of_a_resave_are_recovered_from_its_own_shards(store: Store) -> None:
    """A rank 0 that could not gather its ranks' receipts recovers them from the store: after a save over a
    checkpoint, the new shards lie under their generation names beside the old set's, and the recovered receipts
    (so the metadata written from them) were the old set's, committing the old tensors for the new save."""
    save_state_dict(store, PREFIX, make_state(0), world_size=2, checkpoint_id=CID, config=SMALL)
    for rank, pieces in enumerate(split_state_dict(make_state(1), 2, SMALL.plan)):
        write_shard(store, PREFIX, rank, 2, pieces, checkpoint_id=CID, config=SMALL)  # no metadata yet
    write_metadata(store, PREFIX, collect_receipts(store, PREFIX, 2, CID), plan=SMALL.plan)
    _holds(store, CID, 1)
    assert all(".shard." in name for name in _shard_files(store))  # the old set removed by the commit


def test_two_unlisted_generations_of_a_rank_are_named_not_guessed(store: Store) -> None:
    save_state_dict(store, PREFIX, make_state(0), world_size=2, checkpoint_id=CID, config=SMALL)
    for seed in (1, 2):  # two saves cut short before their metadata: which is the newer cannot be told
        for rank, pieces in enumerate(split_state_dict(make_state(seed), 2, SMALL.plan)):
            write_shard(store, PREFIX, rank, 2, pieces, checkpoint_id=CID, config=SMALL)
    with pytest.raises(WrongCheckpointError, match=r"rank 0 has 2 shards the metadata .* does not list"):
        collect_receipts(store, PREFIX, 2, CID)
    _holds(store, CID, 0)  # the committed set is untouched
