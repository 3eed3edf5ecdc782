"""The shard verifier on the local store and on moto's S3 server: every problem found, each by its name."""

from __future__ import annotations

import hashlib
import json
import os
import struct
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from s3_servers import S3Endpoint
from shards_support import CID, OTHER_CID, PREFIX, SMALL, flip, make_state, reseal, rewrite

from ml8s.errors import (
    NotFoundError,
    ShardChecksumError,
    ShardFormatError,
    ShardVerificationError,
    UnsafeObjectError,
)
from ml8s.shards import (
    collect_receipts,
    load_resharded,
    load_state_dict,
    pieces_for_rank,
    save_state_dict,
    verify_checkpoint,
)
from ml8s.shards.reader import ShardFile, scan_shard
from ml8s.store import LocalStore, S3Store, Store

SHARD0, SHARD1 = f"{PREFIX}_shard_0.shard", f"{PREFIX}_shard_1.shard"
META = f"{PREFIX}.metadata.json"


@pytest.fixture(params=["local", "moto"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    """A 2-rank checkpoint in a fresh store of each backend (S3: a new bucket, rooted below a prefix)."""
    if request.param == "local":
        store: Store = LocalStore(str(tmp_path / "root"))
    else:
        endpoint: S3Endpoint = request.getfixturevalue("moto_server")
        store = S3Store(f"s3://{endpoint.make_bucket()}/some/prefix", env=endpoint.env())
    save_state_dict(store, PREFIX, make_state(), world_size=2, checkpoint_id=CID, config=SMALL)
    return store


def _findings(store: Store) -> dict[str, set[str]]:
    """file -> names of the checks that failed on it."""
    found: dict[str, set[str]] = {}
    for f in verify_checkpoint(store, PREFIX).findings:
        found.setdefault(f.file, set()).add(f.check)
    return found


def test_intact_checkpoint(store: Store) -> None:
    report = verify_checkpoint(store, PREFIX)
    assert report.ok and report.findings == () and report.checkpoint_id == CID and report.world_size == 2
    assert report.files == (META, SHARD0, SHARD1)
    report.raise_for_findings()
    assert verify_checkpoint(store, PREFIX, read_data=False).ok
    state = make_state()
    loaded = load_state_dict(store, PREFIX)
    assert loaded.keys() == state.keys() and all(torch.equal(loaded[k], v) for k, v in state.items())
    pieces = load_resharded(store, PREFIX, 3, 1)
    assert [p.name for p in pieces] == [p.name for p in pieces_for_rank(state, 1, 3, SMALL.plan)]


def _delete(store: Store) -> None:
    store.delete(SHARD1)


def _truncate(store: Store) -> None:
    rewrite(store, SHARD1, store.get(SHARD1)[:-100])


def _flip_data(store: Store) -> None:
    piece = json.loads(store.get(META))["tensors"]["layer.weight"]["pieces"][1]
    assert piece["rank"] == 1
    rewrite(store, SHARD1, flip(store.get(SHARD1), piece["offset"] + 100))


def _flip_header(store: Store) -> None:
    rewrite(store, SHARD1, flip(store.get(SHARD1), 130))


def _stray(store: Store) -> None:
    rewrite(store, f"{PREFIX}_shard_7.shard", store.get(SHARD0))


def _metadata_size(store: Store) -> None:
    raw = json.loads(store.get(META))
    raw["shards"][1]["size"] += 5
    rewrite(store, META, json.dumps(raw).encode())


def _bad_magic(store: Store) -> None:
    rewrite(store, SHARD1, b"XXXX" + store.get(SHARD1)[4:])


def _version(store: Store) -> None:
    data = store.get(SHARD1)
    rewrite(store, SHARD1, reseal(data[:4] + struct.pack("<H", 9) + data[6:]))


def _other_checkpoint(store: Store) -> None:
    with tempfile.TemporaryDirectory() as root:
        other = LocalStore(root)
        save_state_dict(other, PREFIX, make_state(), world_size=2, checkpoint_id=OTHER_CID, config=SMALL)
        rewrite(store, SHARD1, other.get(SHARD1))


def _padding(store: Store) -> None:
    data = store.get(SHARD1)
    (length,) = struct.unpack_from("<Q", data, 56)
    if length % 64 == 0:
        pytest.fail("this layout has no header padding to corrupt; change the test state")
    rewrite(store, SHARD1, data[:length] + b"\x01" + data[length + 1 :])


def _drop_metadata(store: Store) -> None:
    store.delete(META)


CASES: dict[str, tuple[Callable[[Store], None], dict[str, set[str]]]] = {
    "deleted": (_delete, {SHARD1: {"shard_missing"}}),
    "truncated": (
        _truncate,
        {SHARD1: {"truncated", "shard_size", "shard_checksum", "data_checksum", "block_checksum"}},
    ),
    "flipped_data": (_flip_data, {SHARD1: {"shard_checksum", "data_checksum", "block_checksum"}}),
    "flipped_header": (_flip_header, {SHARD1: {"shard_checksum", "header_checksum"}}),
    "stray_rank_7": (_stray, {f"{PREFIX}_shard_7.shard": {"stray_shard"}}),
    "metadata_wrong_size": (_metadata_size, {SHARD1: {"metadata_size"}}),
    "bad_magic": (_bad_magic, {SHARD1: {"shard_checksum", "bad_magic"}}),
    "unknown_version": (_version, {SHARD1: {"shard_checksum", "format_version"}}),
    "other_checkpoint": (_other_checkpoint, {SHARD1: {"shard_checksum", "header_checkpoint_id", "header_metadata"}}),
    "nonzero_padding": (_padding, {SHARD1: {"shard_checksum", "padding"}}),
    "metadata_missing": (_drop_metadata, {META: {"metadata_missing"}}),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_problem_is_found_and_named(store: Store, case: str) -> None:
    damage, expected = CASES[case]
    damage(store)
    assert _findings(store) == expected
    report = verify_checkpoint(store, PREFIX)
    assert all(f.reason for f in report.findings)
    with pytest.raises(ShardVerificationError, match=sorted(report.checks)[0]):
        report.raise_for_findings()


@pytest.mark.parametrize("what", ["a FIFO", "a link to /dev/zero"])
def test_a_shard_or_metadata_that_is_no_regular_file_is_named_so(tmp_path: Path, what: str) -> None:
    """A FIFO or a link where a listed shard belongs was 'shard_missing: listed in the metadata, not stored' (and
    the metadata 'metadata_missing'), one where no rank's shard belongs nothing at all: each is now named."""
    store = LocalStore(str(tmp_path / "root"))
    save_state_dict(store, PREFIX, make_state(), world_size=2, checkpoint_id=CID, config=SMALL)
    stray = f"{PREFIX}_shard_7.shard"

    def plant(key: str) -> None:
        path = tmp_path / "root" / key
        path.unlink(missing_ok=True)
        if what == "a FIFO":
            os.mkfifo(path)
        else:
            path.symlink_to("/dev/zero")

    plant(SHARD1)
    plant(stray)
    assert _findings(store) == {SHARD1: {"unsafe_object"}, stray: {"unsafe_object"}}
    with pytest.raises(UnsafeObjectError, match=r"model_shard_1\.shard: no regular file; expected a shard"):
        load_state_dict(store, PREFIX)  # was NotFoundError '... does not exist'
    plant(META)
    assert _findings(store) == {SHARD1: {"unsafe_object"}, stray: {"unsafe_object"}, META: {"unsafe_object"}}


def test_a_shard_linked_from_outside_the_store_is_not_read(tmp_path: Path) -> None:
    """A shard replaced by a symbolic link to an intact copy outside the store: verify named it unsafe_object
    ('not read'), while load_state_dict and collect_receipts read through the link, outside the store."""
    store = LocalStore(str(tmp_path / "root"))
    save_state_dict(store, PREFIX, make_state(), world_size=2, checkpoint_id=CID, config=SMALL)
    link = tmp_path / "root" / SHARD1
    link.rename(tmp_path / "outside.shard")
    link.symlink_to(tmp_path / "outside.shard")
    assert _findings(store) == {SHARD1: {"unsafe_object"}}
    with pytest.raises(UnsafeObjectError, match=r"model_shard_1\.shard: no regular file; expected a shard"):
        load_state_dict(store, PREFIX)
    with pytest.raises(UnsafeObjectError, match=r"model_shard_1\.shard: no regular file"):
        collect_receipts(store, PREFIX, 2, CID)


def test_a_fifo_swapped_in_after_the_check_is_refused_unread(tmp_path: Path) -> None:
    """A FIFO put where a shard was, after local_shard looked: ShardFile opened it as a file (with no writer
    it would wait forever; here a writer holds it open) and judged its bytes; now it refuses it unread."""
    store = LocalStore(str(tmp_path / "root"))
    save_state_dict(store, PREFIX, make_state(), world_size=2, checkpoint_id=CID, config=SMALL)
    data = store.get(SHARD1)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    writer = os.open(fifo, os.O_RDWR | os.O_NONBLOCK)
    try:
        os.write(writer, data[:4096])
        with pytest.raises(UnsafeObjectError, match="a FIFO; expected a regular file"):
            ShardFile(str(fifo), "swapped")
    finally:
        os.close(writer)


def test_a_shard_larger_than_the_metadata_lists_is_not_read(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """A shard grown past its recorded size (a planted 64 GiB object, here 1 MiB) was read whole, and off a
    local store first downloaded whole into the temp directory; now only the listing's size is judged."""
    from ml8s.shards import verify

    read: list[str] = []
    original = verify.local_shard
    monkeypatch.setattr(verify, "local_shard", lambda s, key, scratch: read.append(key) or original(s, key, scratch))
    rewrite(store, SHARD1, store.get(SHARD1) + bytes(1024 * 1024))
    report = verify_checkpoint(store, PREFIX)
    assert [(f.file, f.check) for f in report.findings] == [(SHARD1, "shard_size")]
    assert "more than the" in report.findings[0].reason and "(not read)" in report.findings[0].reason
    assert read == [SHARD0]


def test_every_problem_at_once(store: Store) -> None:
    _delete(store)
    _stray(store)
    rewrite(store, SHARD0, flip(store.get(SHARD0), -1))  # the last byte of the last piece
    found = _findings(store)
    assert found == {
        SHARD0: {"shard_checksum", "data_checksum", "block_checksum"},
        SHARD1: {"shard_missing"},
        f"{PREFIX}_shard_7.shard": {"stray_shard"},
    }


def test_listing_only_mode(store: Store) -> None:
    _truncate(store)
    _stray(store)
    report = verify_checkpoint(store, PREFIX, read_data=False)
    assert {(f.file, f.check) for f in report.findings} == {
        (SHARD1, "shard_size"),
        (f"{PREFIX}_shard_7.shard", "stray_shard"),
    }


def test_a_shard_that_grows_while_it_is_scanned_is_read_only_to_its_size_when_opened(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store writer appending to a shard forever kept verify reading (to an end of file that kept moving). The
    scan reads the size the file had when opened, and names the growth; simulated by a file that is longer than
    fstat said when it was opened."""
    store = LocalStore(str(tmp_path / "root"))
    save_state_dict(store, PREFIX, make_state(), world_size=2, checkpoint_id=CID, config=SMALL)
    path = tmp_path / "root" / SHARD0
    intact = path.read_bytes()
    path.write_bytes(intact + b"\0" * 4096)  # "appended after the open"
    real_fstat = os.fstat

    def fstat_at_open(fd: int) -> os.stat_result:
        found = real_fstat(fd)
        if found.st_size != len(intact) + 4096:
            return found
        fields = list(found)
        fields[6] = len(intact)  # st_size as it was when the scan opened the file
        return os.stat_result(fields)

    monkeypatch.setattr(os, "fstat", fstat_at_open)
    scan = scan_shard(str(path), SHARD0)  # verify's read of a shard (a larger listing is not read at all)
    monkeypatch.undo()
    assert scan.size == len(intact) and scan.sha256 == hashlib.sha256(intact).hexdigest()
    assert [check for check, _ in scan.problems] == ["trailing_bytes"], scan.problems
    assert "grew while it was read (past the" in scan.problems[0][1]


def test_with_no_metadata_a_shard_is_read_only_when_its_header_makes_its_size(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No metadata bounds the sizes: every shard-named file was read whole (off a local store downloaded whole
    first), so a planted 64 GiB file (here 1 MiB) of any bytes, or an intact shard with 64 GiB appended, kept
    verify reading. Now the fixed header is read alone (a ranged read) and a file whose size is not what it
    makes is named unread; an intact shard is still read and checked in full."""
    from ml8s.shards import verify

    read: list[str] = []
    original = verify.local_shard
    monkeypatch.setattr(verify, "local_shard", lambda s, key, scratch: read.append(key) or original(s, key, scratch))
    junk, short = f"{PREFIX}_shard_2.shard", f"{PREFIX}_shard_3.shard"
    _drop_metadata(store)
    rewrite(store, SHARD1, store.get(SHARD1) + bytes(1024 * 1024))
    rewrite(store, junk, b"\xff" * (1024 * 1024))
    rewrite(store, short, store.get(SHARD0)[:-1])
    report = verify_checkpoint(store, PREFIX)
    assert {(f.file, f.check) for f in report.findings} == {
        (META, "metadata_missing"),
        (SHARD1, "trailing_bytes"),
        (junk, "bad_magic"),
        (short, "truncated"),
    }
    assert all("(not read further)" in f.reason for f in report.findings if f.file != META)
    assert read == [SHARD0]
    rewrite(store, SHARD0, flip(store.get(SHARD0), -1))  # of the right size: still read, its damage found
    assert _findings(store)[SHARD0] == {"data_checksum", "block_checksum"}


def test_loaders_on_s3_fetch_the_blocks_they_read_not_whole_shards(
    moto_server: S3Endpoint, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Off a local store every loader downloaded each shard it touched whole, so one rank of a resharded load
    fetched the whole checkpoint. Now it reads by ranged GETs: the header and the blocks holding its rows,
    each checked (header against the metadata, block against its sha256), so damage is still refused."""
    store = S3Store(f"s3://{moto_server.make_bucket()}/some/prefix", env=moto_server.env())
    state = make_state()
    save_state_dict(store, PREFIX, state, world_size=2, checkpoint_id=CID, config=SMALL)
    whole = sum(i.size for i in store.list(PREFIX.rsplit("/", 1)[0]) if i.key.endswith(".shard"))
    fetched: list[int] = []
    real_range = store.get_range

    def get_range(key: str, start: int, length: int) -> bytes:
        data = real_range(key, start, length)
        fetched.append(len(data))
        return data

    def no_download(key: str, path: str) -> None:
        raise AssertionError(f"downloaded {key} whole")

    monkeypatch.setattr(store, "get_range", get_range)
    monkeypatch.setattr(store, "download", no_download)
    pieces = load_resharded(store, PREFIX, 8, 3)
    expected = pieces_for_rank(state, 3, 8, SMALL.plan)
    assert [(p.name, p.row_start) for p in pieces] == [(p.name, p.row_start) for p in expected]
    assert all(torch.equal(p.tensor, e.tensor) for p, e in zip(pieces, expected, strict=True))
    assert 0 < sum(fetched) < whole / 2, (sum(fetched), whole)
    loaded = load_state_dict(store, PREFIX)
    assert all(torch.equal(loaded[k], v) for k, v in state.items())
    monkeypatch.undo()
    _flip_data(store)  # a byte of layer.weight's rank-1 rows
    with pytest.raises(ShardChecksumError, match=r"block \d+ does not match its sha256"):
        load_state_dict(store, PREFIX)
    rewrite(store, SHARD1, store.get(SHARD1) + b"\0")
    with pytest.raises(ShardFormatError, match="its header makes"):
        load_state_dict(store, PREFIX)


def test_receipts_are_not_recovered_by_reading_a_shard_its_header_does_not_size(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """collect_receipts (no metadata yet, by its purpose) read each rank's shard whole, off a local store
    downloaded whole first: a shard with 64 GiB (here 1 MiB) appended was read through before being refused.
    Now its fixed header is read alone and the size it makes compared with the stored one first."""
    from ml8s.shards import verify

    read: list[str] = []
    original = verify.local_shard
    monkeypatch.setattr(verify, "local_shard", lambda s, key, scratch: read.append(key) or original(s, key, scratch))
    rewrite(store, SHARD1, store.get(SHARD1) + bytes(1024 * 1024))
    with pytest.raises(ShardFormatError, match=r"its header makes \d+; no metadata lists its size") as raised:
        collect_receipts(store, PREFIX, 2, CID)
    assert raised.value.check == "trailing_bytes" and read == [SHARD0]
    store.delete(SHARD1)
    with pytest.raises(NotFoundError, match=r"model_shard_1\.shard does not exist"):
        collect_receipts(store, PREFIX, 2, CID)
