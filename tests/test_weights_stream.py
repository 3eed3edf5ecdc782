"""A DELTA of a checkpoint file encoded one tensor at a time (issue 22): the same bytes as the whole-model
encoder, hashes checked on both sides, a tampered parent or a file changed meanwhile refused."""

from __future__ import annotations

import hashlib
import json
import struct
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import safetensors.torch
import torch

from ml8s.chain import ChainStore, CommitMeta, LocalFile, PayloadKind, check_safetensors, hash_checkpoint
from ml8s.cli.chain_payload import commit_external
from ml8s.deltas import DeltaOptions, encode_delta, encode_delta_by_tensor, weights_hash
from ml8s.errors import ChecksumError, ConfigError, DeltaShapeError
from ml8s.store import LocalStore
from ml8s.weights import commit_weights, rebuild_weights
from ml8s.weights.stream import StreamingCheckpointBuilder, _tensors

SHAPES = {  # three float dtypes, a scalar, an empty tensor, several tensors over a read chunk
    "z.weight": ("F32", [300, 500]),
    "a.bias": ("BF16", [7]),
    "é.scale": ("F16", []),
    "m.empty": ("F32", [0, 3]),
    "b.weight": ("F16", [33, 9]),
    "c.weight": ("F32", [4096, 70]),
    "d.weight": ("BF16", [1000, 33]),
}
_ITEM = {"F32": 4, "F16": 2, "BF16": 2}


def checkpoint(path: Path, seed: int, changed: int = 0) -> Path:
    """Finite random values (the same per ``seed``); every ``changed``-th element then set to another value.
    The data section is in the order of SHAPES, not name order, as another writer than safetensors may do."""
    rng = np.random.default_rng(seed)
    header: dict[str, object] = {}
    blobs: list[bytes] = []
    offset = 0
    for n, (name, (dtype, shape)) in enumerate(SHAPES.items()):
        count = int(np.prod(shape)) if shape else 1
        values = torch.from_numpy(rng.uniform(-1, 1, count).astype(np.float32))
        if changed:
            values[n % changed :: changed] += 1.0
        torch_dtype = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}[dtype]
        data = values.to(torch_dtype).view(torch.uint8).numpy().tobytes() if count else b""
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    body = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(body)) + body + b"".join(blobs))
    return path


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    where = tmp_path_factory.mktemp("stream")
    return checkpoint(where / "base.st", 1), checkpoint(where / "child.st", 1, 97), checkpoint(where / "next.st", 1, 13)


class Recording:
    """A pair loader that notes which names it was asked for, in order."""

    def __init__(self, base: Callable[[str], torch.Tensor], new: Callable[[str], torch.Tensor]) -> None:
        self.base, self.new, self.loaded = base, new, list[str]()

    def __call__(self, name: str) -> tuple[torch.Tensor, torch.Tensor]:
        self.loaded.append(name)
        return self.base(name), self.new(name)


@pytest.mark.parametrize("given_base_hash", [False, True])
def test_streaming_delta_is_byte_identical_to_the_whole_encoder(
    files: tuple[Path, Path, Path], given_base_hash: bool
) -> None:
    base_path, child_path, _ = files
    base, child = safetensors.torch.load_file(str(base_path)), safetensors.torch.load_file(str(child_path))
    known = weights_hash(base) if given_base_hash else None
    for options in (None, DeltaOptions(level=9)):
        whole = encode_delta(base, child, options=options, base_hash=known)
        with _tensors(str(base_path), "base") as (names, load_base), _tensors(str(child_path), "child") as (_, load):
            pairs = Recording(load_base, load)
            streamed = encode_delta_by_tensor(names, pairs, options=options, base_hash=known)
        assert streamed.payload == whole
        assert pairs.loaded == sorted(SHAPES)  # each pair once, in name order: one pair in memory at a time
        assert (streamed.base_hash, streamed.result_hash) == (weights_hash(base), weights_hash(child))


def test_unsorted_or_repeated_names_are_refused() -> None:
    def never(name: str) -> tuple[torch.Tensor, torch.Tensor]:
        raise AssertionError(f"loaded {name} before the names were checked")

    for names in (["b", "a"], ["a", "a"]):
        with pytest.raises(DeltaShapeError, match="sorted and unique"):
            encode_delta_by_tensor(names, never)


def test_a_pair_of_other_shapes_is_a_shape_error(files: tuple[Path, Path, Path]) -> None:
    base = safetensors.torch.load_file(str(files[0]))
    wider = {**base, "a.bias": torch.zeros(8, dtype=torch.bfloat16)}
    with pytest.raises(DeltaShapeError, match=r"'a\.bias' changed"):
        encode_delta_by_tensor(sorted(base), lambda name: (base[name], wider[name]))


@pytest.fixture()
def chain(tmp_path: Path) -> ChainStore:
    store = ChainStore(LocalStore(str(tmp_path / "root")), "s")
    store.init()
    return store


def _stored(chain: ChainStore, version_dir: str, name: str) -> bytes:
    return chain.store.get(chain.version_key(version_dir, "payload", name))


def test_cli_deltas_on_a_full_and_on_a_delta_match_the_whole_encoder(
    chain: ChainStore, files: tuple[Path, Path, Path]
) -> None:
    paths = [str(p) for p in files]
    tensors = [safetensors.torch.load_file(p) for p in paths]
    versions = [commit_external(chain, p, 0, 4) for p in paths]
    assert [v.header.payload_kind for v in versions] == [PayloadKind.FULL, PayloadKind.DELTA, PayloadKind.DELTA]
    for n in (1, 2):  # on the FULL (read lazily), then on a DELTA (rebuilt whole)
        stored = _stored(chain, versions[n].version_dir, "weights.delta")
        assert stored == encode_delta(tensors[n - 1], tensors[n])
        rebuilt = rebuild_weights(chain, versions[n]).tensors
        assert weights_hash(rebuilt) == weights_hash(tensors[n])  # names, dtypes, shapes and raw bits


def test_a_tampered_parent_full_is_refused(chain: ChainStore, files: tuple[Path, Path, Path]) -> None:
    full = commit_external(chain, str(files[0]), 0, 4)
    stored = Path(chain.store.root) / chain.version_key(full.version_dir, "payload", "model_native.safetensors")
    data = bytearray(stored.read_bytes())
    data[-1] ^= 1
    stored.write_bytes(bytes(data))
    with pytest.raises(ChecksumError, match="the block records"):
        commit_external(chain, str(files[1]), 0, 4)
    assert chain.head().counter == full.counter  # nothing committed


def test_a_checkpoint_changed_after_hashing_is_refused(
    chain: ChainStore, tmp_path: Path, files: tuple[Path, Path, Path]
) -> None:
    full = commit_external(chain, str(files[0]), 0, 4)
    path = tmp_path / "moving.st"
    path.write_bytes(files[1].read_bytes())
    source, hashed = hash_checkpoint(str(path), check_safetensors(str(path)))
    path.write_bytes(files[2].read_bytes())  # same layout, other values: only the hashes can tell
    builder = StreamingCheckpointBuilder(chain, str(path), source, hashed, 4)
    with pytest.raises(ConfigError, match="expected the file unchanged"):
        builder(full)


def test_another_tensor_set_makes_a_full(chain: ChainStore, tmp_path: Path, files: tuple[Path, Path, Path]) -> None:
    full = commit_external(chain, str(files[0]), 0, 4)
    tensors = safetensors.torch.load_file(str(files[1]))
    tensors["extra"] = torch.ones(3)
    path = tmp_path / "more.st"
    safetensors.torch.save_file(tensors, str(path))
    source, hashed = hash_checkpoint(str(path), check_safetensors(str(path)))
    payload, fields = StreamingCheckpointBuilder(chain, str(path), source, hashed, 4)(full)
    assert payload == {"model_native.safetensors": source}
    assert (fields.payload_kind, fields.weights_full_counter) == (PayloadKind.FULL, full.counter + 1)
    assert isinstance(source, LocalFile) and fields.weights_hash == weights_hash(tensors)


# Produced by the whole-model encoder as it was before it shared its per-tensor core with the streaming one
# (main before issue 22's DELTA work): a change to the core that changes the wire bytes fails here, even
# though encode_delta and encode_delta_by_tensor would still agree with each other.
PINNED = {
    3: "588d39319d0c311b62773e3bf7e349efce36ea32b50e1af843d29edb174ff70d",
    9: "376476eac2e7039ae66fe94b5c7f3754afb362b0eb76893d4caf6265cb9de6d8",
}


def _derived(label: str, count: int) -> bytes:
    """``count`` bytes from sha256 in counter mode: the same on every platform and library version."""
    return b"".join(hashlib.sha256(f"{label}:{n}".encode()).digest() for n in range(count // 32 + 1))[:count]


def _pinned_tensors(changed: bool) -> dict[str, torch.Tensor]:
    layout = {
        "w": (torch.float32, [64, 33]),
        "b": (torch.bfloat16, [17]),
        "h": (torch.float16, [5, 3]),
        "s": (torch.float32, []),
        "e": (torch.float16, [0]),
    }
    out = {}
    for name, (dtype, shape) in layout.items():
        size = int(np.prod(shape)) * torch.empty(0, dtype=dtype).element_size()
        if not size:
            out[name] = torch.empty(shape, dtype=dtype)
            continue
        raw = torch.frombuffer(bytearray(_derived(name, size)), dtype=torch.uint8)
        if changed:
            raw[::7] ^= 1
        out[name] = raw.view(dtype).reshape(shape)
    return out


def test_delta_bytes_are_those_of_the_encoder_before_the_split(tmp_path: Path) -> None:
    base, new = _pinned_tensors(False), _pinned_tensors(True)
    safetensors.torch.save_file(base, str(tmp_path / "base.st"))
    safetensors.torch.save_file(new, str(tmp_path / "new.st"))
    for level, digest in PINNED.items():
        options = DeltaOptions(level=level)
        assert hashlib.sha256(encode_delta(base, new, options=options)).hexdigest() == digest
        with (
            _tensors(str(tmp_path / "base.st"), "b") as (names, old),
            _tensors(str(tmp_path / "new.st"), "n") as (
                _,
                fresh,
            ),
        ):
            streamed = encode_delta_by_tensor(names, Recording(old, fresh), options=options)
        assert hashlib.sha256(streamed.payload).hexdigest() == digest


def test_a_delta_on_a_full_the_pipeline_wrote(chain: ChainStore, files: tuple[Path, Path, Path]) -> None:
    """The parent FULL written by commit_weights (encode_full: safetensors with metadata), read lazily."""
    base = safetensors.torch.load_file(str(files[0]))
    meta = CommitMeta(
        run_id="c" * 12,
        full_config_hash="c" * 64,
        artifact_root="/nowhere",
        architecture="test",
        parameter_count=sum(t.numel() for t in base.values()),
        steps_since_parent=0,
    )
    full = commit_weights(chain, base, meta, interval=4)
    assert full.header.payload_kind is PayloadKind.FULL
    delta = commit_external(chain, str(files[1]), 0, 4)
    assert delta.header.payload_kind is PayloadKind.DELTA
    child = safetensors.torch.load_file(str(files[1]))
    assert _stored(chain, delta.version_dir, "weights.delta") == encode_delta(base, child)
