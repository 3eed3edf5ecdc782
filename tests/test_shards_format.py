"""The shard file format and its named errors: bad arguments, and every way a shard or metadata file can lie."""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path
from typing import BinaryIO

import numpy as np
import pytest
import torch
from shards_support import CID, OTHER_CID, PREFIX, SMALL, flip, make_state, reseal, rewrite

from ml8s.errors import (
    NotFoundError,
    ShardChecksumError,
    ShardError,
    ShardFormatError,
    ShardInputError,
    ShardVerificationError,
    ShardVersionError,
    WrongCheckpointError,
)
from ml8s.shards import (
    MAGIC,
    TensorPiece,
    collect_receipts,
    load_resharded,
    load_shard,
    load_state_dict,
    pieces_for_rank,
    read_metadata,
    save_state_dict,
    write_metadata,
    write_shard,
)
from ml8s.shards.format import (
    FIXED_SIZE,
    ShardHeader,
    TensorEntry,
    align,
    block_count,
    decode_header,
    encode_header,
    header_length,
)
from ml8s.shards.reader import ShardFile
from ml8s.store import LocalStore

SHARD1 = f"{PREFIX}_shard_1.shard"
META = f"{PREFIX}.metadata.json"


@pytest.fixture
def store(tmp_path: Path) -> LocalStore:
    store = LocalStore(str(tmp_path / "root"))
    save_state_dict(store, PREFIX, make_state(), world_size=2, checkpoint_id=CID, config=SMALL)
    return store


def _header_length(data: bytes) -> int:
    return int(struct.unpack_from("<Q", data, 56)[0])


def test_header_layout_is_as_documented(store: LocalStore) -> None:
    data = store.get(SHARD1)
    magic, version, flags, rank, world = struct.unpack_from("<IHHII", data, 0)
    assert data[:4] == bytes([0x52, 0x41, 0x48, 0x53]) and magic == MAGIC == 0x53484152
    assert (version, flags, rank, world) == (1, 0, 1, 2)
    assert data[16:48].hex() == CID
    count, block_size, head_len, data_len = struct.unpack_from("<IIQQ", data, 48)
    data_offset = -(-head_len // 64) * 64
    assert block_size == SMALL.block_size and len(data) == data_offset + data_len
    assert count == read_metadata(store, PREFIX).shards[1].tensor_count
    assert data[head_len:data_offset] == bytes(data_offset - head_len)


@pytest.mark.parametrize(
    ("rank", "world"),
    [(0, 0), (-1, 2), (2, 2), (5, 3), (0, 2**32)],
)
def test_bad_rank_or_world_size(tmp_path: Path, rank: int, world: int) -> None:
    store = LocalStore(str(tmp_path))
    with pytest.raises(ShardInputError, match=r"rank|world size"):
        write_shard(store, PREFIX, rank, world, {"a": torch.zeros(2)}, checkpoint_id=CID)
    assert store.list("") == []


@pytest.mark.parametrize(
    ("tensors", "match"),
    [
        ({"a": torch.zeros(2, dtype=torch.float8_e4m3fnuz)}, "cannot be stored"),
        # not tensors: a raw AttributeError ('int' object has no attribute 'dtype'), and for a numpy array
        # 'dtype float64 cannot be stored', a dtype the format does store
        ({"a": torch.zeros(2), "epoch": 5}, r"entry 'epoch' is int \(key type str\); expected a torch.Tensor"),
        ({"a": torch.zeros(2), "x": np.zeros(2)}, r"entry 'x' is ndarray"),
        ({"a": torch.zeros(2), 7: torch.zeros(2)}, r"entry 7 is Tensor \(key type int\)"),  # was TypeError, sorting
        ({"": torch.zeros(2)}, "name"),
        ({"a\ud800": torch.zeros(2)}, "name of 1..65535 UTF-8 bytes"),  # a lone surrogate: UnicodeEncodeError
        ({"a": torch.zeros(2).to_sparse()}, "a torch.sparse_coo tensor on cpu; expected a dense"),  # RuntimeError
        ({"a": torch.zeros(2, device="meta")}, "on meta; expected a dense tensor holding its data"),  # no data to copy
        ([TensorPiece("a", torch.zeros(2)), TensorPiece("a", torch.ones(2))], "given twice"),
        ([TensorPiece("a", torch.zeros(4, 2), row_start=3, global_rows=6)], "rows 3..7 of 6"),
        ([TensorPiece("a", torch.tensor(1.0), row_start=0, global_rows=1)], "dim-0 slice"),
        # no global_rows: a whole tensor, so a row_start gave a shard every reader refuses (rows 3..7 of 4)
        ([TensorPiece("a", torch.zeros(4), row_start=3)], r"rows 3\.\.7 of 4; expected a dim-0 slice"),
        ([TensorPiece("a", torch.zeros(4), row_start=-1)], r"rows -1\.\.3 of 4"),  # was struct.error, after the data
        ([TensorPiece("a", torch.tensor(1.0), row_start=2)], r"rows 2\.\.3 of 1"),
        # a global shape no reader can address: written (and refused by every reader), or a raw struct.error
        ([TensorPiece("a", torch.zeros(4, 2**10), global_rows=2**60)], r"\(1152921504606846976, 1024\) too large"),
        ([TensorPiece("a", torch.zeros(4), global_rows=2**64)], "too large to address; expected pieces a reader"),
    ],
)
def test_bad_pieces(tmp_path: Path, tensors: dict[str, torch.Tensor] | list[TensorPiece], match: str) -> None:
    store = LocalStore(str(tmp_path))
    with pytest.raises(ShardInputError, match=match):
        write_shard(store, PREFIX, 0, 1, tensors, checkpoint_id=CID)
    assert store.list("") == []


def test_tensor_resized_while_saving_stores_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from ml8s.shards import writer

    original = writer._chunks
    monkeypatch.setattr(writer, "_chunks", lambda t, n: list(original(t, n))[:-1])  # one chunk short
    store = LocalStore(str(tmp_path))
    with pytest.raises(ShardInputError, match="gave 0 bytes, 8 expected"):
        write_shard(store, PREFIX, 0, 1, {"a": torch.zeros(2)}, checkpoint_id=CID)
    assert store.list("") == []


def test_a_local_build_file_that_cannot_be_made_or_written_is_a_store_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A missing WriterConfig.local_tmp_dir, or a disk that fills while the shard streams out, was a raw
    FileNotFoundError / OSError; now a StoreError naming the shard and the place, and nothing stored."""
    import errno

    from ml8s.errors import StoreError
    from ml8s.shards import WriterConfig, writer

    store = LocalStore(str(tmp_path / "root"))
    missing = WriterConfig(local_tmp_dir=str(tmp_path / "no-such-dir"))
    with pytest.raises(StoreError, match=r"model_shard_0\.shard: cannot create a file in .*no-such-dir"):
        write_shard(store, PREFIX, 0, 1, {"a": torch.zeros(2)}, checkpoint_id=CID, config=missing)
    real_fdopen = os.fdopen

    class Full:
        def __init__(self, handle: BinaryIO) -> None:
            self.handle = handle

        def __enter__(self) -> Full:
            return self

        def __exit__(self, *exc: object) -> None:
            self.handle.close()

        def write(self, data: bytes) -> int:
            raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(writer.os, "fdopen", lambda fd, mode: Full(real_fdopen(fd, mode)))
    build = tmp_path / "build"
    build.mkdir()
    with pytest.raises(StoreError, match=r"model_shard_0\.shard: cannot write .* No space left on device"):
        write_shard(
            store, PREFIX, 0, 1, {"a": torch.zeros(2)}, checkpoint_id=CID, config=WriterConfig(local_tmp_dir=str(build))
        )
    assert store.list("") == [] and list(build.iterdir()) == []


@pytest.mark.parametrize("prefix", ["", "a//b", "a/../b", "a/", "./a"])
def test_bad_prefix(tmp_path: Path, prefix: str) -> None:
    with pytest.raises(ShardInputError, match="checkpoint prefix"):
        write_shard(LocalStore(str(tmp_path)), prefix, 0, 1, {"a": torch.zeros(1)}, checkpoint_id=CID)


@pytest.mark.parametrize("cid", ["", "abc", CID.upper(), CID + "0", "g" * 64])
def test_bad_checkpoint_id(tmp_path: Path, cid: str) -> None:
    with pytest.raises(ShardInputError, match="checkpoint id"):
        write_shard(LocalStore(str(tmp_path)), PREFIX, 0, 1, {"a": torch.zeros(1)}, checkpoint_id=cid)


def test_receipts_that_do_not_form_one_checkpoint(tmp_path: Path) -> None:
    store = LocalStore(str(tmp_path))
    r0 = write_shard(store, PREFIX, 0, 2, {"a": torch.zeros(2)}, checkpoint_id=CID)
    r1 = write_shard(store, PREFIX, 1, 2, {"a": torch.zeros(2)}, checkpoint_id=CID)
    other = write_shard(store, "x/other", 1, 2, {"b": torch.zeros(2)}, checkpoint_id=OTHER_CID)
    with pytest.raises(ShardInputError, match="ranks \\[0\\], expected each"):
        write_metadata(store, PREFIX, [r0])
    with pytest.raises(ShardInputError, match="different checkpoints"):
        write_metadata(store, PREFIX, [r0, other])
    with pytest.raises(ShardInputError, match="do not form one checkpoint"):  # tensor "a" written by both ranks
        write_metadata(store, PREFIX, [r0, r1])
    r1 = write_shard(store, PREFIX, 1, 2, {"b": torch.zeros(2)}, checkpoint_id=CID)
    store.delete(SHARD1)
    with pytest.raises(ShardVerificationError, match=r"shard_1\.shard: expected in the store before the metadata"):
        write_metadata(store, PREFIX, [r0, r1])
    assert not store.exists(META)


def _load(store: LocalStore) -> None:
    load_state_dict(store, PREFIX)


def test_truncated_shard(store: LocalStore) -> None:
    data = store.get(SHARD1)
    for cut in (0, 3, FIXED_SIZE - 1, FIXED_SIZE + 5, _header_length(data) - 1, len(data) - 1):
        rewrite(store, SHARD1, data[:cut])
        with pytest.raises(ShardFormatError) as err:
            _load(store)
        assert err.value.check == "truncated", (cut, err.value)


def test_trailing_bytes(store: LocalStore) -> None:
    rewrite(store, SHARD1, store.get(SHARD1) + b"\0")
    with pytest.raises(ShardFormatError, match="its header makes") as err:
        _load(store)
    assert err.value.check == "trailing_bytes"


def test_flipped_data_byte_is_caught_by_its_block(store: LocalStore) -> None:
    rewrite(store, SHARD1, flip(store.get(SHARD1), -3))
    with pytest.raises(ShardChecksumError, match="block") as err:
        _load(store)
    assert err.value.check == "block_checksum"
    assert load_shard(store, PREFIX, 0)  # the other rank's shard is untouched and still loads


def test_every_header_byte_flipped_is_a_named_error(store: LocalStore, tmp_path: Path) -> None:
    data, path = store.get(SHARD1), tmp_path / "flipped.shard"
    for at in range(_header_length(data)):
        path.write_bytes(flip(data, at))
        with pytest.raises(ShardFormatError) as err:
            ShardFile(str(path), "flipped").close()
        assert err.value.check in {"bad_magic", "format_version", "header_invalid", "header_checksum", "truncated"}, at
    path.write_bytes(data)
    ShardFile(str(path), "intact").close()


def test_bad_magic_and_unknown_version(store: LocalStore) -> None:
    data = store.get(SHARD1)
    rewrite(store, SHARD1, b"PK\x03\x04" + data[4:])
    with pytest.raises(ShardFormatError, match="magic 0x04034b50, expected 0x53484152"):
        _load(store)
    rewrite(store, SHARD1, reseal(data[:4] + struct.pack("<H", 2) + data[6:]))
    with pytest.raises(ShardVersionError, match="format version 2, expected 1"):
        _load(store)


@pytest.mark.parametrize(
    ("offset", "fmt", "value", "match"),
    [
        (48, "<I", 0xFFFFFFFF, "4294967295 tensors, at most 262144 per shard"),  # tensor count
        (48, "<I", 200000, "200000 entries and .* block hashes need at least"),
        (64, "<Q", 2**63, "block hashes need at least"),  # data length: an absurd block table
        (56, "<Q", 2**62, "header length"),  # header length
        (52, "<I", 0, "block size"),
        (6, "<H", 1, "flags"),
        (8, "<I", 9, "rank 9 not below world size 2"),
    ],
)
def test_huge_or_wrong_header_fields_with_a_valid_checksum(
    store: LocalStore, offset: int, fmt: str, value: int, match: str
) -> None:
    data = bytearray(store.get(SHARD1))
    struct.pack_into(fmt, data, offset, value)
    rewrite(store, SHARD1, reseal(bytes(data)))
    with pytest.raises(ShardFormatError, match=match):
        _load(store)


def test_shard_from_another_checkpoint(store: LocalStore, tmp_path: Path) -> None:
    other = LocalStore(str(tmp_path / "other"))
    save_state_dict(other, PREFIX, make_state(), world_size=2, checkpoint_id=OTHER_CID, config=SMALL)
    rewrite(store, SHARD1, other.get(SHARD1))
    with pytest.raises(
        WrongCheckpointError, match=f"checkpoint id {OTHER_CID} in the header, the metadata expects {CID}"
    ):
        _load(store)
    other = LocalStore(str(tmp_path / "other-3"))  # a fresh prefix: its shards under their plain names
    save_state_dict(other, PREFIX, make_state(), world_size=3, checkpoint_id=CID, config=SMALL)
    rewrite(store, SHARD1, other.get(SHARD1))
    with pytest.raises(WrongCheckpointError, match="world size 3 in the header, the metadata expects 2"):
        _load(store)
    rewrite(store, SHARD1, store.get(f"{PREFIX}_shard_0.shard"))
    with pytest.raises(WrongCheckpointError, match="rank 0 in the header, the metadata expects 1"):
        load_shard(store, PREFIX, 1)


def test_shard_rewritten_after_the_metadata(store: LocalStore) -> None:
    state = make_state()
    state["layer.bias"] += 1
    save_state_dict(LocalStore(store.root + "-b"), PREFIX, state, world_size=2, checkpoint_id=CID, config=SMALL)
    for rank in (0, 1):
        rewrite(
            store, f"{PREFIX}_shard_{rank}.shard", LocalStore(store.root + "-b").get(f"{PREFIX}_shard_{rank}.shard")
        )
    with pytest.raises(ShardChecksumError, match="header sha256"):
        _load(store)


_DROP = object()


def _edit_metadata(store: LocalStore, path: tuple[str | int, ...], value: object) -> None:
    """Replace (or with _DROP remove; a callable: transform) one value in the metadata JSON, write it back."""
    raw = json.loads(store.get(META))
    parent = raw
    for step in path[:-1]:
        parent = parent[step]
    if value is _DROP:
        del parent[path[-1]]
    else:
        parent[path[-1]] = value(parent[path[-1]]) if callable(value) else value
    rewrite(store, META, json.dumps(raw).encode())


@pytest.mark.parametrize(
    ("path", "value", "error", "check"),
    [
        (("format_version",), 2, ShardVersionError, "format_version"),
        (("tensors",), _DROP, ShardFormatError, "metadata_invalid"),
        (("shards", 0, "size"), -5, ShardFormatError, "metadata_invalid"),
        (("world_size",), 10**12, ShardFormatError, "metadata_ranks"),
        (("ranks",), [1, 0], ShardFormatError, "metadata_ranks"),
        (("shards", 1, "file"), "../x_shard_1.shard", ShardFormatError, "metadata_ranks"),
        (("tensors", "layer.weight", "shape"), [10**9, 10**9], ShardFormatError, "metadata_tensors"),
        (("tensors", "layer.weight", "dtype"), "float128", ShardFormatError, "metadata_tensors"),
        (("tensors", "step", "pieces", 0, "offset"), lambda v: v + 64, ShardFormatError, "header_tensors"),
        (("checkpoint_id",), "x", ShardFormatError, "metadata_invalid"),
        # read as 1, 2 and 0 by lax parsing: integers no writer wrote
        (("format_version",), True, ShardFormatError, "metadata_invalid"),
        (("format_version",), 1.0, ShardFormatError, "metadata_invalid"),
        (("world_size",), 2.0, ShardFormatError, "metadata_invalid"),
        (("shards", 0, "rank"), False, ShardFormatError, "metadata_invalid"),
        (("tensors", "step", "pieces", 0, "offset"), lambda v: str(v), ShardFormatError, "metadata_invalid"),
    ],
)
def test_metadata_that_lies(
    store: LocalStore, path: tuple[str | int, ...], value: object, error: type[ShardFormatError], check: str
) -> None:
    _edit_metadata(store, path, value)
    with pytest.raises(error) as err:
        _load(store)
    assert type(err.value) is error and err.value.check == check, err.value


def test_metadata_not_json_or_missing(store: LocalStore) -> None:
    rewrite(store, META, b"\xff\xfe not json")
    with pytest.raises(ShardFormatError, match="not JSON"):
        _load(store)
    store.delete(META)
    with pytest.raises(NotFoundError, match=r"metadata\.json does not exist"):
        _load(store)


@pytest.mark.parametrize("value", [5, None, [1.0]])
def test_a_state_dict_holding_no_tensor_is_refused_by_name(tmp_path: Path, value: object) -> None:
    state = {**make_state(), "epoch": value}
    for call in (
        lambda: save_state_dict(LocalStore(str(tmp_path)), PREFIX, state, world_size=2, checkpoint_id=CID),  # type: ignore[arg-type]
        lambda: pieces_for_rank(state, 0, 2),  # type: ignore[arg-type]
    ):
        with pytest.raises(ShardInputError, match=rf"entry 'epoch' is {type(value).__name__} \(key type str\)"):
            call()
    assert LocalStore(str(tmp_path)).list("") == []


def test_a_rank_or_world_size_that_is_no_integer_is_refused_by_name(store: LocalStore) -> None:
    """world_size=len(rows) / 2 is a float: each of these was a raw TypeError ('can't multiply sequence by
    non-int of type float', 'tuple indices must be integers')."""
    calls = [
        (lambda: load_resharded(store, PREFIX, 2.0, 0), "world size 2.0"),  # type: ignore[arg-type]
        (lambda: load_resharded(store, PREFIX, 2, 1.0), "rank 1.0"),  # type: ignore[arg-type]
        (lambda: load_shard(store, PREFIX, True), "rank True"),  # type: ignore[arg-type]
        (lambda: pieces_for_rank(make_state(), 0, "2"), "world size '2'"),  # type: ignore[arg-type]
        (lambda: collect_receipts(store, PREFIX, 2.0, CID), "world size 2.0"),  # type: ignore[arg-type]
        (lambda: write_shard(store, PREFIX, 0, 2.0, {"a": torch.zeros(1)}, checkpoint_id=CID), "world size 2.0"),  # type: ignore[arg-type]
    ]
    for call, what in calls:
        with pytest.raises(ShardInputError, match=f"{what}: expected an integer"):
            call()
    assert len(load_resharded(store, PREFIX, np.int64(2), np.int64(1))) > 0  # numpy integers are integers


def test_load_arguments(store: LocalStore) -> None:
    with pytest.raises(ShardInputError, match="rank 2: expected 0 <= rank < world size 2"):
        load_shard(store, PREFIX, 2)
    with pytest.raises(ShardInputError, match="world size 0"):
        load_resharded(store, PREFIX, 0, 0)
    with pytest.raises(ShardInputError, match="rank 3"):
        load_resharded(store, PREFIX, 3, 3)
    store.delete(SHARD1)
    with pytest.raises(NotFoundError, match=r"shard_1\.shard does not exist"):
        _load(store)
    assert issubclass(ShardInputError, ShardError) and ShardError.code == "SHARD_ERROR"


def _entry(name: str, shape: tuple[int, ...], at: int, length: int, row_start: int = 0, rows: int = -1) -> TensorEntry:
    """An entry whose piece sits ``at`` bytes into the data section (placed by _crafted)."""
    global_rows = rows if rows >= 0 else (shape[0] if shape else 1)
    return TensorEntry(
        name=name, dtype="float32", shape=shape, row_start=row_start, global_rows=global_rows, offset=at, length=length
    )


def _crafted(*entries: TensorEntry, data_length: int) -> bytes:
    """A header around hand-made entries, sealed with a correct header_sha256, as an attacker would make it."""
    blocks = block_count(data_length, 64)
    length = header_length([e.name for e in entries], [len(e.shape) for e in entries], blocks)
    placed = tuple(e.model_copy(update={"offset": align(length) + e.offset}) for e in entries)
    header = ShardHeader(
        format_version=1,
        rank=0,
        world_size=1,
        checkpoint_id=CID,
        block_size=64,
        header_length=length,
        data_length=data_length,
        data_sha256="00" * 32,
        entries=placed,
        block_sha256=("00" * 32,) * blocks,
        header_sha256="00" * 32,
    )
    return encode_header(header)[:length]


@pytest.mark.parametrize(
    ("entries", "data_length", "match"),
    [
        ((_entry("a", (0, 2**63), 0, 0),), 0, "too large to address"),
        ((_entry("a", (2**40, 2**40), 0, 64),), 64, "too large to address"),
        ((_entry("b", (2,), 0, 8), _entry("a", (2,), 64, 8)), 72, "not after 'b'"),
        ((_entry("a", (2,), 0, 8), _entry("b", (2,), 4, 8)), 12, "not 64-aligned"),
        ((_entry("a", (4,), 0, 8),), 8, "length 8, its shape and dtype make 16"),
        ((_entry("a", (4,), 0, 16, row_start=3, rows=5),), 16, r"rows 3\.\.7 outside 0\.\.5"),
        ((_entry("a", (), 0, 4, rows=3),), 4, "0-d piece"),
        ((_entry("a", (2,), 0, 8),), 100, "data section ends at"),
    ],
)
def test_crafted_entries_with_a_valid_checksum(entries: tuple[TensorEntry, ...], data_length: int, match: str) -> None:
    with pytest.raises(ShardFormatError, match=match) as err:
        decode_header(_crafted(*entries, data_length=data_length), "crafted")
    assert err.value.check == "header_invalid"


def _many_empty_tensors(count: int) -> bytes:
    """A valid, sealed header of ``count`` zero-length tensors with sorted names (as an attacker can make)."""
    entry = struct.Struct("<H6sBBQQQQQ")
    head_len = FIXED_SIZE + count * entry.size + 32
    fixed = struct.pack("<IHHII32sIIQQ32s", MAGIC, 1, 0, 0, 1, bytes.fromhex(CID), count, 64, head_len, 0, bytes(32))
    offset = align(head_len)
    entries = b"".join(entry.pack(6, b"%06d" % i, 1, 1, 0, 0, 0, offset, 0) for i in range(count))
    return reseal(fixed + entries + bytes(32))


def test_a_header_of_more_tensors_than_the_limit_is_refused_before_it_is_parsed(tmp_path: Path) -> None:
    """A planted shard whose header is valid but holds 2**18 + 1 empty tensors (11 MiB): it was parsed whole,
    ~1 KiB of memory per 42-byte entry (a 1 GiB header, which the old 1 GiB limit let through, ~27 GiB)."""
    from ml8s.shards import format as shard_format

    data = _many_empty_tensors(shard_format.MAX_TENSORS + 1)
    path = tmp_path / "x.shard"
    path.write_bytes(data)
    with pytest.raises(ShardFormatError, match="262145 tensors, at most 262144 per shard") as err:
        ShardFile(str(path), "planted")
    assert err.value.check == "header_invalid"
    assert decode_header(_many_empty_tensors(3), "three").entries[2].name == "000002"  # the same layout, in bounds


@pytest.mark.parametrize(
    ("limit", "value", "match"), [("MAX_TENSORS", 2, "at most 2 per shard"), ("MAX_HEADER", 200, r"\.\.200")]
)
def test_the_writer_refuses_a_header_no_reader_takes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, limit: str, value: int, match: str
) -> None:
    """More tensors in one shard, or a longer header (a small block_size makes a long block table), than a
    reader accepts: the shard was streamed and stored, then refused by every reader. Now: nothing written."""
    from ml8s.shards import format as shard_format

    monkeypatch.setattr(shard_format, limit, value)
    store = LocalStore(str(tmp_path))
    with pytest.raises(ShardInputError, match=f"{match}; expected fewer tensors per rank or a larger block_size"):
        write_shard(
            store, PREFIX, 0, 1, {"a": torch.zeros(2), "b": torch.zeros(2), "c": torch.zeros(2)}, checkpoint_id=CID
        )
    assert store.list("") == []


def test_metadata_larger_than_a_reader_takes_is_not_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Metadata over METADATA_MAX_BYTES (64 MiB: ~250,000 tensors) was written, then every reader refused it
    unread (STORE_OBJECT_TOO_LARGE): a checkpoint that could never be loaded. Here the bound is made small."""
    from ml8s.shards import layout

    monkeypatch.setattr(layout, "METADATA_MAX_BYTES", 1000)
    store = LocalStore(str(tmp_path))
    with pytest.raises(ShardInputError, match=r"metadata of \d+ bytes, readers take at most 1000 \(not written"):
        save_state_dict(store, PREFIX, make_state(), world_size=2, checkpoint_id=CID, config=SMALL)
    assert not store.exists(META) and store.exists(SHARD1)
