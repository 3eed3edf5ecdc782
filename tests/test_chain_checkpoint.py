"""``ml8s chain commit --payload`` streams (issue 22): the file's sha256 and weights hash in one read without
torch, memory bounded by a chunk, FULL or DELTA decided per parent, torch loaded only for a DELTA."""

from __future__ import annotations

import hashlib
import io
import json
import os
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest
import safetensors.torch
import torch
from forked_cli import forked_ml8s

import ml8s.chain.checkpoint as checkpoint
from ml8s.chain import ChainStore, CheckpointBuilder, LocalFile, PayloadKind, check_safetensors, hash_checkpoint
from ml8s.deltas import weights_hash
from ml8s.errors import ConfigError
from ml8s.store import LocalStore

MiB = 1024 * 1024


def raw_file(path: Path, tensors: list[tuple[str, str, list[int], bytes]]) -> Path:
    """A safetensors file whose data section holds the tensors in the order given (not necessarily by name)."""
    header: dict[str, object] = {}
    offset = 0
    for name, dtype, shape, data in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
    body = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(body)) + body + b"".join(t[3] for t in tensors))
    return path


def _bits(seed: int, count: int, itemsize: int) -> bytes:
    """Random float bits, each element finite: one exponent bit cleared (a NaN weight is refused)."""
    raw = np.random.default_rng(seed).integers(0, 256, count * itemsize, dtype=np.uint8)
    if itemsize == 8:  # I64 here: any bits
        return raw.tobytes()
    kind, mask = {2: ("<u2", 0xBFFF), 4: ("<u4", 0xBFFFFFFF)}[itemsize]
    return (raw.view(kind) & mask).astype(kind).tobytes()


MIXED = [  # out of name order, three float dtypes, a scalar, an empty tensor, one tensor over a chunk
    ("z.weight", "F32", [600, 500], _bits(1, 300_000, 4)),
    ("a.bias", "BF16", [7], _bits(2, 7, 2)),
    ("é.scale", "F16", [], _bits(3, 1, 2)),
    ("m.empty", "F32", [0, 3], b""),
    ("b.weight", "F16", [33, 9], _bits(4, 297, 2)),
]


@pytest.mark.parametrize("order", ["file order", "name order"])
def test_hashes_equal_the_tensor_hash_and_sha256(tmp_path: Path, order: str) -> None:
    tensors = MIXED if order == "file order" else sorted(MIXED)
    path = raw_file(tmp_path / "w.safetensors", tensors)
    source, digest = hash_checkpoint(str(path), check_safetensors(str(path)))
    data = path.read_bytes()
    assert (source.path, source.sha256, source.size) == (str(path), hashlib.sha256(data).hexdigest(), len(data))
    assert digest == weights_hash(safetensors.torch.load_file(str(path)))


def test_torch_saved_checkpoint_of_every_float_dtype(tmp_path: Path) -> None:
    gen = torch.Generator().manual_seed(7)
    weights = {
        f"layer{n}.{dtype}": torch.randn(40, 33, generator=gen).to(dtype)
        for n, dtype in enumerate((torch.float32, torch.bfloat16, torch.float16))
    }
    path = tmp_path / "w.safetensors"
    safetensors.torch.save_file(weights, str(path))
    _, digest = hash_checkpoint(str(path), check_safetensors(str(path)))
    assert digest == weights_hash(weights)


def test_non_float_tensors_have_no_weights_hash(tmp_path: Path) -> None:
    path = raw_file(tmp_path / "w.safetensors", [("a", "F32", [2], _bits(5, 2, 4)), ("b", "I64", [3], _bits(6, 3, 8))])
    source, digest = hash_checkpoint(str(path), check_safetensors(str(path)))
    assert digest == "" and source.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()


class _Counting(io.FileIO):
    reads: ClassVar[list[int]] = []

    def readinto(self, buffer: Any) -> int | None:
        got = super().readinto(buffer)
        self.reads.append(got or 0)
        return got


@pytest.mark.parametrize(("order", "extra"), [("name order", 0), ("file order", 300_000 * 4 + 2)])
def test_reads_the_file_once_in_chunks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, order: str, extra: int) -> None:
    """Each byte is read once, at most a MiB a read; a tensor after one out of name order once more (z.weight and
    é.scale follow the deferred a-z prefix: a.bias and b.weight still come in order, inline)."""
    tensors = sorted(MIXED) if order == "name order" else MIXED
    path = raw_file(tmp_path / "w.safetensors", tensors)
    reads: list[int] = []
    monkeypatch.setattr(_Counting, "reads", reads)
    monkeypatch.setattr(checkpoint, "open", lambda p, mode, buffering: _Counting(p, "r"), raising=False)
    hash_checkpoint(str(path), check_safetensors(str(path)))
    assert sum(reads) == path.stat().st_size + extra
    assert max(reads) <= MiB


def test_a_file_changed_since_checked_is_a_config_error(tmp_path: Path) -> None:
    path = raw_file(tmp_path / "w.safetensors", sorted(MIXED))
    summary = check_safetensors(str(path))
    data = path.read_bytes()
    path.write_bytes(data + b"!")
    with pytest.raises(ConfigError, match="grew while it was read"):
        hash_checkpoint(str(path), summary)
    path.write_bytes(data[:-10])
    with pytest.raises(ConfigError, match="shrank while it was read"):
        hash_checkpoint(str(path), summary)
    path.unlink()
    with pytest.raises(ConfigError, match=r"expected a readable \.safetensors file"):
        hash_checkpoint(str(path), summary)


def test_builder_loads_tensors_only_when_a_delta_is_due(tmp_path: Path) -> None:
    chain = ChainStore(LocalStore(str(tmp_path / "root")), "c")
    genesis = chain.init()
    source = LocalFile(path=str(tmp_path / "x"), sha256="a" * 64, size=1)
    calls: list[int] = []

    def make_delta() -> Any:
        calls.append(1)
        return lambda parent: ({"weights.delta": b"d"}, "delta fields")

    builder = CheckpointBuilder(source, "b" * 64, 3, make_delta)
    payload, fields = builder(genesis)  # genesis records no weights hash: a FULL
    assert payload == {"model_native.safetensors": source} and calls == []
    assert (fields.weights_hash, fields.weights_full_counter) == ("b" * 64, 1)
    header = genesis.header.model_copy(
        update={"counter": 1, "payload_kind": PayloadKind.FULL, "weights_hash": "b" * 64, "weights_full_counter": 1}
    )
    full = genesis.model_copy(update={"block": genesis.block.model_copy(update={"header": header})})
    assert builder(full) == ({"weights.delta": b"d"}, "delta fields") and calls == [1]
    assert builder(genesis) == ({"weights.delta": b"d"}, "delta fields") and calls == [1]  # decided by it from now
    plain = CheckpointBuilder(source, "", 3, make_delta)  # no weights hash (not all float): always a FULL
    assert plain(full)[0] == {"model_native.safetensors": source} and plain(full)[1].weights_full_counter == 0
    assert calls == [1]


_NO_TORCH = """
import sys
from ml8s.cli.main import main
code = main(["chain", "commit", "--payload", sys.argv[1]])
# numpy is allowed: the NaN check of float tensors (about 70 ms of start-up) reads each chunk the hash reads
heavy = ("torch", "safetensors.torch", "mlflow", "pyarrow", "pandas", "onnx", "flytekit", "boto3")
loaded = [name for name in heavy if name in sys.modules]
assert not loaded, f"a FULL commit imported {loaded}"
sys.exit(code)
"""


def test_full_commit_imports_no_torch_and_records_the_weights_hash(tmp_path: Path) -> None:
    weights = {"w": torch.arange(12, dtype=torch.float32).reshape(3, 4), "b": torch.ones(5, dtype=torch.bfloat16)}
    path = tmp_path / "w.safetensors"
    safetensors.torch.save_file(weights, str(path))
    env = {**os.environ, "PIPELINE_ROOT_URI": f"file://{tmp_path}/root", "CHAIN_NAME": "nt", "DELTA_BASE_INTERVAL": "4"}
    done = subprocess.run([sys.executable, "-c", _NO_TORCH, str(path)], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    first = json.loads(done.stdout)
    assert (first["payload_kind"], first["weights_hash"]) == ("full", weights_hash(weights))
    stored = tmp_path / "root/ml8s_chain/nt/versions" / first["version_dir"] / "payload/model_native.safetensors"
    assert stored.read_bytes() == path.read_bytes()
    weights["w"][0, 0] = 99.0
    safetensors.torch.save_file(weights, str(path))
    delta = forked_ml8s(["chain", "commit", "--payload", str(path)], env)
    assert delta.returncode == 0, delta.stderr
    second = json.loads(delta.stdout)
    assert (second["payload_kind"], second["weights_hash"]) == ("delta", weights_hash(weights))
    verify = forked_ml8s(["chain", "verify"], env)
    assert verify.returncode == 0, verify.stdout + verify.stderr


@pytest.mark.parametrize(
    ("dtype", "nan", "order"),
    [
        ("F32", struct.pack("<f", float("nan")), "file order"),
        ("F16", b"\x01\x7e", "file order"),  # a signalling NaN's bits
        ("BF16", b"\xc1\xff", "file order"),  # negative, mantissa non-zero
        ("F32", struct.pack("<f", float("nan")), "name order"),
    ],
    ids=["f32", "f16", "bf16", "f32-read-again"],
)
def test_a_nan_weight_is_refused_before_anything_is_committed(
    tmp_path: Path, dtype: str, nan: bytes, order: str
) -> None:
    # A NaN weight predicts NaN for every row, and a follower would serve it; committed before this check.
    size = 4 if dtype == "F32" else 2
    count = 2 * MiB // size + 3  # over two read chunks: the NaN sits in the last one, checked in a hash thread
    tail = _bits(11, count, size)
    poisoned = tail[: -2 * size] + nan + tail[-size:]
    tensors = [("z.poisoned", dtype, [count], poisoned), ("a.clean", "F32", [5], _bits(12, 5, 4))]
    path = raw_file(tmp_path / "w.safetensors", tensors if order == "file order" else tensors[::-1])
    with pytest.raises(ConfigError, match=rf"tensor 'z.poisoned' holds NaN \(element {count - 2}\); expected no NaN"):
        hash_checkpoint(str(path), check_safetensors(str(path)))
    env = {**os.environ, "PIPELINE_ROOT_URI": f"file://{tmp_path}/root", "CHAIN_NAME": "nan"}
    done = forked_ml8s(["chain", "commit", "--payload", str(path)], env)
    assert done.returncode == 1 and "CONFIG_ERROR" in done.stderr and "holds NaN" in done.stderr, done.stderr
    assert not (tmp_path / "root" / "ml8s_chain" / "nan" / "versions").exists() or not any(
        (tmp_path / "root" / "ml8s_chain" / "nan" / "versions").iterdir()
    )


@pytest.mark.parametrize("other", ["I64", "F64"])
def test_a_nan_weight_beside_a_tensor_the_weights_hash_skips_is_refused(tmp_path: Path, other: str) -> None:
    """One int64 buffer (a BatchNorm's num_batches_tracked, position ids) or float64 tensor makes the file carry
    no weights hash, and that also skipped the NaN check of every float weight: the NaN was committed."""
    poisoned = _bits(13, 9, 4)[:-8] + struct.pack("<f", float("nan")) + _bits(14, 1, 4)
    tensors = [("w", "F32", [3, 3], poisoned), ("counter", other, [1], struct.pack("<q", 7))]
    path = raw_file(tmp_path / "w.safetensors", tensors)
    with pytest.raises(ConfigError, match=r"tensor 'w' holds NaN \(element 7\); expected no NaN"):
        hash_checkpoint(str(path), check_safetensors(str(path)))
    nan64 = [("w", "F32", [1], _bits(15, 1, 4)), ("d", "F64", [2], struct.pack("<2d", 1.0, float("nan")))]
    path = raw_file(tmp_path / "d.safetensors", nan64)
    with pytest.raises(ConfigError, match=r"tensor 'd' holds NaN \(element 1\)"):
        hash_checkpoint(str(path), check_safetensors(str(path)))
    clean = raw_file(tmp_path / "c.safetensors", [("w", "F32", [9], _bits(13, 9, 4)), *tensors[1:]])
    assert hash_checkpoint(str(clean), check_safetensors(str(clean)))[1] == ""  # still no weights hash


def test_infinities_are_weights_like_any_other(tmp_path: Path) -> None:
    masks = struct.pack("<4f", float("-inf"), 0.0, float("inf"), -1.0)  # a mask buffer holds -inf by design
    path = raw_file(tmp_path / "w.safetensors", [("mask", "F32", [4], masks), ("h", "F16", [1], b"\x00\x7c")])
    _, digest = hash_checkpoint(str(path), check_safetensors(str(path)))
    assert digest == weights_hash(safetensors.torch.load_file(str(path)))
