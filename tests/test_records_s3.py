"""The record history on S3 (moto's server): same bytes as locally, a verified local cache, named errors."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest
from records_support import PREFIX, SCHEMA, SIZES, make_rows, write_history
from s3_servers import S3Endpoint

from ml8s.errors import GenerationMissingError, RecordsChecksumError, RecordsError, RecordsTruncatedError
from ml8s.records import RecordStore, SamplerConfig
from ml8s.store import S3Store, WriteResult


class _Bucket:
    def __init__(self, endpoint: S3Endpoint) -> None:
        self.endpoint, self.name = endpoint, endpoint.make_bucket()
        self.store = S3Store(f"s3://{self.name}/root", env=endpoint.env())
        self.history = RecordStore(self.store, PREFIX)
        for generation, rows in enumerate(SIZES):
            self.history.append_generation(SCHEMA, make_rows(generation, rows))

    def raw(self, name: str) -> bytes:
        body = self.endpoint.client().get_object(Bucket=self.name, Key=f"root/{PREFIX}{name}")["Body"]
        data: bytes = body.read()
        return data

    def overwrite(self, name: str, data: bytes) -> None:
        self.endpoint.client().put_object(Bucket=self.name, Key=f"root/{PREFIX}{name}", Body=data)


@pytest.fixture
def bucket(moto_server: S3Endpoint) -> _Bucket:
    return _Bucket(moto_server)


def test_same_bytes_as_a_local_history(bucket: _Bucket, tmp_path: Path) -> None:
    write_history(str(tmp_path))
    local = tmp_path / PREFIX.strip("/")
    names = sorted(p.name for p in local.iterdir() if p.is_file())
    listed = sorted(i.key.rsplit("/", 1)[1] for i in bucket.store.list(PREFIX) if "/.tmp/" not in i.key)
    assert listed == names
    for name in names:
        assert bucket.raw(name) == (local / name).read_bytes(), name


def test_open_mapped_downloads_once_into_a_verified_cache(
    bucket: _Bucket, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert bucket.history.open().rows == SIZES
    cache = tmp_path / "cache"
    mapped = bucket.history.open_mapped(str(cache))
    for generation, array in enumerate(mapped.maps):
        np.testing.assert_array_equal(array, make_rows(generation, SIZES[generation]))
    assert sorted(p.name for p in cache.iterdir()) == sorted(f"{i.sha256}.f32" for i in mapped.index.generations)
    x, y = mapped.gather(mapped.sampler(SamplerConfig(alpha=2, batch_size=16, seed=3)).sample())
    assert x.shape == (16, 3) and y.dtype == np.int64

    downloads: list[str] = []
    real = bucket.store.download

    def counting(key: str, path: str) -> WriteResult:
        downloads.append(key)
        return real(key, path)

    monkeypatch.setattr(bucket.store, "download", counting)
    bucket.history.open_mapped(str(cache))
    assert downloads == []  # reused: every cached copy re-hashed and matching
    stale = cache / f"{mapped.index.generations[1].sha256}.f32"
    stale.write_bytes(bytes(stale.stat().st_size))  # right size, wrong bytes
    again = bucket.history.open_mapped(str(cache))
    assert downloads == [f"{PREFIX}gen-000001.f32"]
    np.testing.assert_array_equal(again.maps[1], make_rows(1, SIZES[1]))
    assert hashlib.sha256(stale.read_bytes()).hexdigest() == mapped.index.generations[1].sha256


@pytest.mark.parametrize(
    ("damage", "error"),
    [
        (lambda data: data[:-5], RecordsTruncatedError),
        (lambda data: data[:40] + bytes([data[40] ^ 0x80]) + data[41:], RecordsChecksumError),
        (None, GenerationMissingError),
    ],
)
def test_damaged_objects_are_named_errors(
    bucket: _Bucket, tmp_path: Path, damage: object, error: type[RecordsError]
) -> None:
    if damage is None:
        bucket.store.delete(f"{PREFIX}gen-000002.f32")
    else:
        bucket.overwrite("gen-000002.f32", damage(bucket.raw("gen-000002.f32")))  # type: ignore[operator]
    with pytest.raises(error, match=r"gen-000002\.f32"):
        bucket.history.open()
    with pytest.raises(error, match=r"gen-000002\.f32"):
        bucket.history.open_mapped(str(tmp_path / "fresh-cache"))
    assert not any(p.name.endswith(".part") for p in (tmp_path / "fresh-cache").glob("*"))
