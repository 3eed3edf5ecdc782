"""The record history on a local store: layout, append-only rules, bad input and corruption (SPEC §10)."""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from records_support import PREFIX, SCHEMA, SIZES, make_rows, run_worker, write_history

from ml8s.errors import (
    GenerationMissingError,
    RecordsAppendError,
    RecordsChecksumError,
    RecordsError,
    RecordsExtraBytesError,
    RecordsFormatError,
    RecordsSchemaMismatchError,
    RecordsTruncatedError,
)
from ml8s.records import GenerationInfo, RecordSchema, RecordStore
from ml8s.store import LocalStore


def history_dir(root: Path) -> Path:
    return root / PREFIX.strip("/")


def test_round_trip_layout_and_mapping(tmp_path: Path) -> None:
    history = write_history(str(tmp_path))
    names = sorted(p.name for p in history_dir(tmp_path).iterdir() if p.is_file())
    assert names == [f"gen-00000{g}.{ext}" for g in range(3) for ext in ("f32", "json")] + ["history.json"]
    for generation, rows in enumerate(SIZES):
        raw = (history_dir(tmp_path) / f"gen-00000{generation}.f32").read_bytes()
        assert raw == make_rows(generation, rows).astype("<f4").tobytes()  # raw little-endian records, no header
        manifest = json.loads((history_dir(tmp_path) / f"gen-00000{generation}.json").read_text())
        assert manifest == {
            "file": f"gen-00000{generation}.f32",
            "generation": generation,
            "rows": rows,
            "schema_hash": SCHEMA.schema_hash,
            "sha256": hashlib.sha256(raw).hexdigest(),
            "size": rows * 16,
        }
    index = history.open()
    assert index.rows == SIZES and index.record_schema == SCHEMA
    mapped = history.open_mapped(str(tmp_path / "unused-cache"))
    assert not (tmp_path / "unused-cache").exists()  # local files are mapped in place
    for generation, array in enumerate(mapped.maps):
        assert not array.flags.writeable and not array.flags.owndata  # a view of the file's mapping
        np.testing.assert_array_equal(array, make_rows(generation, SIZES[generation]))
    mapped.release()  # drops this process's pages, not the data
    np.testing.assert_array_equal(mapped.maps[2], make_rows(2, SIZES[2]))


def test_schema_hash_is_sha256_of_canonical_json() -> None:
    text = SCHEMA.canonical_json()
    assert " " not in text and list(json.loads(text)) == sorted(json.loads(text))
    assert SCHEMA.schema_hash == hashlib.sha256(text.encode()).hexdigest()
    assert SCHEMA.record_size == 16 and SCHEMA.dtype == "<f4"
    assert RecordSchema.model_validate_json(text) == SCHEMA
    with pytest.raises(RecordsFormatError, match="distinct"):
        RecordSchema.build(["a", "a"], "y", ["n", "p"])
    with pytest.raises(RecordsFormatError):
        RecordSchema.build([], "y", ["n"])


def test_chunked_rows_write_the_same_bytes(tmp_path: Path) -> None:
    rows = make_rows(0, 50)
    whole = RecordStore(LocalStore(str(tmp_path / "a")), "h").append_generation(SCHEMA, rows)
    chunks: Iterator[np.ndarray] = (rows[i : i + 7] for i in range(0, 50, 7))
    chunked = RecordStore(LocalStore(str(tmp_path / "b")), "h").append_generation(SCHEMA, chunks)
    assert whole == chunked
    big_endian = RecordStore(LocalStore(str(tmp_path / "c")), "h").append_generation(SCHEMA, rows.astype(">f4"))
    assert big_endian == whole


def test_written_bytes_identical_across_processes(tmp_path: Path) -> None:
    for name in ("one", "two"):
        run_worker("write", str(tmp_path / name))
    first, second = (history_dir(tmp_path / name) for name in ("one", "two"))
    files = sorted(p.name for p in first.iterdir() if p.is_file())
    assert files == sorted(p.name for p in second.iterdir() if p.is_file()) and len(files) == 7
    for name in files:
        assert (first / name).read_bytes() == (second / name).read_bytes(), name


def test_append_only(tmp_path: Path) -> None:
    history = write_history(str(tmp_path), sizes=(10, 20))
    before = {p.name: p.read_bytes() for p in history_dir(tmp_path).iterdir() if p.is_file()}
    with pytest.raises(RecordsAppendError, match=r"generation 0 .* never rewritten"):
        history.append_generation(SCHEMA, make_rows(5, 10), generation=0)
    with pytest.raises(RecordsAppendError, match="next is 2; generations are never skipped"):
        history.append_generation(SCHEMA, make_rows(3, 10), generation=3)
    with pytest.raises(RecordsAppendError):
        history.append_generation(SCHEMA, make_rows(3, 10), generation=-1)
    again = history.append_generation(SCHEMA, make_rows(1, 20), generation=1)  # an idempotent re-run
    assert again == history.open().generations[1]
    after = {p.name: p.read_bytes() for p in history_dir(tmp_path).iterdir() if p.is_file()}
    assert after == before
    assert history.append_generation(SCHEMA, make_rows(2, 5), generation=2).generation == 2


def test_schema_mismatch_refused_and_nothing_written(tmp_path: Path) -> None:
    history = write_history(str(tmp_path), sizes=(10,))
    other = RecordSchema.build(["age", "tenure", "spend"], "churned", ["no", "yes", "maybe"])
    with pytest.raises(RecordsSchemaMismatchError, match="lineage's schema"):
        history.append_generation(other, make_rows(1, 10, other))
    assert history.open().rows == (10,) and not (history_dir(tmp_path) / "gen-000001.f32").exists()


@pytest.mark.parametrize(
    ("rows", "match"),
    [
        (np.zeros((4, 4), dtype=np.float64), "expected a float32 numpy array"),
        (np.zeros((4, 5), dtype=np.float32), r"expected \(rows, 4\)"),
        (np.zeros(4, dtype=np.float32), r"expected \(rows, 4\)"),
        (np.zeros((0, 4), dtype=np.float32), "at least one record"),
        ([np.zeros((2, 4), dtype=np.float32), "junk"], "chunk 1 is str"),
    ],
)
def test_bad_rows_refused(tmp_path: Path, rows: object, match: str) -> None:
    history = RecordStore(LocalStore(str(tmp_path)), "h")
    with pytest.raises(RecordsFormatError, match=match):
        history.append_generation(SCHEMA, rows)  # type: ignore[arg-type]
    assert history.index() is None and not (tmp_path / "h").exists()


@pytest.mark.parametrize("target", [2.0, -1.0, 0.5, float("nan"), float("inf")])
def test_target_must_be_a_class_index(tmp_path: Path, target: float) -> None:
    rows = make_rows(0, 6)
    rows[3, SCHEMA.n_features] = target
    with pytest.raises(RecordsFormatError, match="row 3: target 'churned'"):
        RecordStore(LocalStore(str(tmp_path)), "h").append_generation(SCHEMA, rows)


def test_concurrent_append_refused_without_losing_the_winner(tmp_path: Path) -> None:
    history = write_history(str(tmp_path), sizes=(10,))
    rival = RecordStore(LocalStore(str(tmp_path)), PREFIX)

    def rows_while_rival_appends() -> Iterator[np.ndarray]:
        yield make_rows(1, 5)
        rival.append_generation(SCHEMA, make_rows(2, 8))  # lands while ours is being spooled
        yield make_rows(3, 5)

    with pytest.raises(RecordsAppendError, match="another writer appended first"):
        history.append_generation(SCHEMA, rows_while_rival_appends())
    assert history.open().rows == (10, 8)


def test_unlisted_leftover_is_replaced_by_the_next_append(tmp_path: Path) -> None:
    history = write_history(str(tmp_path), sizes=(10,))
    (history_dir(tmp_path) / "gen-000001.f32").write_bytes(b"half-written by a crashed append")
    assert history.open().rows == (10,)
    info = history.append_generation(SCHEMA, make_rows(1, 4))
    assert (history_dir(tmp_path) / "gen-000001.f32").read_bytes() == make_rows(1, 4).tobytes()
    assert history.open().generations[1] == info


def _flip(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))


@pytest.mark.parametrize(
    ("damage", "error", "also_without_hash"),
    [
        (
            lambda d: d.joinpath("gen-000001.f32").write_bytes(make_rows(1, 7).tobytes()[:-3]),
            RecordsTruncatedError,
            True,
        ),
        (
            lambda d: d.joinpath("gen-000001.f32").write_bytes(make_rows(1, 7).tobytes() + b"x"),
            RecordsExtraBytesError,
            True,
        ),
        (lambda d: _flip(d / "gen-000002.f32", 123), RecordsChecksumError, False),
        (lambda d: d.joinpath("gen-000001.f32").unlink(), GenerationMissingError, True),
        (lambda d: d.joinpath("gen-000000.json").unlink(), GenerationMissingError, True),
        (lambda d: d.joinpath("history.json").unlink(), GenerationMissingError, True),
        (lambda d: d.joinpath("history.json").write_bytes(b"\x00garbage"), RecordsFormatError, True),
        (lambda d: d.joinpath("gen-000001.json").write_text("{}"), RecordsFormatError, True),
    ],
)
def test_damage_is_a_named_one_line_error(
    tmp_path: Path, damage: object, error: type[RecordsError], also_without_hash: bool
) -> None:
    history = write_history(str(tmp_path))
    damage(history_dir(tmp_path))  # type: ignore[operator]
    for verify_hash in (True, False) if also_without_hash else (True,):
        for action in (history.open, functools.partial(history.open_mapped, str(tmp_path / "cache"))):
            with pytest.raises(error) as caught:
                action(verify_hash=verify_hash)
            assert "\n" not in str(caught.value) and str(caught.value).startswith(error.code)
    if not also_without_hash:  # a flipped byte keeps the size: only the hash finds it
        assert history.open(verify_hash=False).rows == SIZES


def _edit_index(root: Path, edit: object) -> None:
    path = history_dir(root) / "history.json"
    index = json.loads(path.read_text())
    edit(index)  # type: ignore[operator]
    path.write_text(json.dumps(index))


@pytest.mark.parametrize(
    ("edit", "error", "match"),
    [
        (lambda i: i.update(schema_hash="0" * 64), RecordsSchemaMismatchError, "not the hash of the schema"),
        (lambda i: i["generations"][1].update(schema_hash="1" * 64), RecordsSchemaMismatchError, "generation 1"),
        (lambda i: i["record_schema"].update(n_features=9), RecordsFormatError, "n_features is 9"),
        (lambda i: i["generations"][0].update(rows=-5), RecordsFormatError, "rows"),
        (lambda i: i["generations"][0].update(rows=10**30, size=16 * 10**30), RecordsFormatError, "disagrees"),
        (lambda i: i["generations"][2].update(generation=5, file="gen-000005.f32"), RecordsFormatError, "entry 2"),
        (lambda i: i["generations"][0].update(sha256="f" * 64), RecordsFormatError, "disagrees with the index"),
        (lambda i: i.update(format="other/9"), RecordsFormatError, "format"),
    ],
)
def test_tampered_index(tmp_path: Path, edit: object, error: type[RecordsError], match: str) -> None:
    history = write_history(str(tmp_path))
    _edit_index(tmp_path, edit)
    with pytest.raises(error, match=match):
        history.open(verify_hash=False)
    if error is RecordsSchemaMismatchError:  # an append reads the index too, and refuses to extend it
        with pytest.raises(error):
            history.append_generation(SCHEMA, make_rows(3, 3))


def test_stray_files_are_ignored(tmp_path: Path) -> None:
    history = write_history(str(tmp_path))
    (history_dir(tmp_path) / "gen-000042.f32").write_bytes(b"\x01" * 160)
    (history_dir(tmp_path) / "notes.txt").write_text("hello")
    assert history.open().rows == SIZES
    assert GenerationInfo.model_validate_json((history_dir(tmp_path) / "gen-000000.json").read_bytes()).rows == 40


def test_a_directory_in_place_of_a_generation_file_is_named_even_of_the_right_size(tmp_path: Path) -> None:
    """A directory's st_size (4096) is 256 records of 16 bytes: it passed the size check, then opening it to
    hash or map it raised IsADirectoryError, and open(verify_hash=False) accepted it."""
    history = write_history(str(tmp_path), (40, 256))
    path = history_dir(tmp_path) / "gen-000001.f32"
    path.unlink()
    path.mkdir()
    # where st_size is not 4096 (another file system) the old code raised RecordsExtraBytesError instead
    for verify_hash in (True, False):
        for action in (history.open, functools.partial(history.open_mapped, str(tmp_path / "cache"))):
            with pytest.raises(GenerationMissingError, match=r"gen-000001\.f32 is no regular file"):
                action(verify_hash=verify_hash)
