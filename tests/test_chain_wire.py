"""Wire format: pydantic <-> protobuf, the block hash covers the whole header, hashes checked on the way in,
and the generated code in ml8s/proto_gen matches proto/ (drift)."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from ml8s.chain import BlockHeader, PayloadKind
from ml8s.chain._util import content_hash
from ml8s.chain.models import PayloadFile
from ml8s.chain.wire import (
    decode_block,
    encode_block,
    head_from_proto,
    head_to_proto,
    header_bytes,
    header_from_proto,
    header_to_proto,
    make_block,
    metadata_json,
)
from ml8s.errors import ChainCorruptionError, ChecksumError
from ml8s.proto_gen.ml8s.chain.v1 import chain_pb2 as pb

REPO = Path(__file__).resolve().parent.parent
FILES = (PayloadFile(name="a.bin", sha256="1" * 64, size=3), PayloadFile(name="b/c.onnx", sha256="2" * 64, size=9))


def header(**changes: Any) -> BlockHeader:
    base = BlockHeader(
        counter=3,
        parent_block_hash="f" * 64,
        parent_semver="1.2.2",
        content_hash=content_hash((f.name, f.sha256, f.size) for f in FILES),
        semver="1.2.3",
        run_id="a" * 12,
        full_config_hash="a" * 64,
        artifact_root="file:///runs/aaaaaaaaaaaa",
        payload_kind=PayloadKind.FULL,
        created_at="2024-01-31T12:00:00.000000Z",
        creator="host-1",
        tensorboard_logdir="tensorboard/v0000000003",
        global_step=300,
        architecture="mlp[8,8]",
        parameter_count=1000,
        files=FILES,
    )
    return BlockHeader.model_validate({**base.model_dump(), **changes})


def test_round_trip() -> None:
    block = make_block(header())
    assert decode_block(encode_block(block), where="t") == block
    assert header_from_proto(header_to_proto(block.header)) == block.header
    message = pb.ChainHead(chain_name="x", counter=2, block_hash="e" * 64, version_dir="v")
    assert head_to_proto(head_from_proto(message)) == message


def test_encoding_is_deterministic() -> None:
    assert encode_block(make_block(header())) == encode_block(make_block(header()))


CHANGES = {
    "counter": 4,
    "parent_block_hash": "0" * 64,
    "parent_semver": "1.2.1",
    "content_hash": "0" * 64,
    "semver": "1.2.4",
    "run_id": "b" * 12,
    "full_config_hash": "b" * 64,
    "artifact_root": "s3://b/runs/x",
    "payload_kind": PayloadKind.DELTA,
    "created_at": "2024-01-31T12:00:00.000001Z",
    "creator": "host-2",
    "tensorboard_logdir": "tensorboard/v0000000004",
    "global_step": 301,
    "architecture": "mlp[8,9]",
    "parameter_count": 1001,
    "files": FILES[:1],
    "trust_policy_version": 3,
    "run_claim_sha256": "c" * 64,
    "weights_hash": "d" * 64,
    "weights_full_counter": 2,
    "delta_base_counter": 3,
    "delta_base_block_hash": "e" * 64,
    "chain_name": "another-chain",
    "trust_root_id": "f" * 64,
}


def test_every_header_field_changes_the_block_hash() -> None:
    assert set(CHANGES) == set(BlockHeader.model_fields)  # a new field must be added here too
    base = make_block(header()).block_hash
    hashes = {field: make_block(header(**{field: value})).block_hash for field, value in CHANGES.items()}
    assert base not in hashes.values()
    assert len(set(hashes.values())) == len(CHANGES)


def test_edited_header_fails_its_hash() -> None:
    message = pb.Block()
    message.ParseFromString(encode_block(make_block(header())))
    message.header.global_step += 1
    with pytest.raises(ChecksumError) as caught:
        decode_block(message.SerializeToString(), where="t")
    assert caught.value.check == "header_hash"


def test_content_hash_is_recomputed_from_the_file_list() -> None:
    forged = make_block(header(content_hash="0" * 64))  # consistently hashed, but lies about its files
    with pytest.raises(ChecksumError) as caught:
        decode_block(encode_block(forged), where="t")
    assert caught.value.check == "content_hash"


def test_unknown_fields_are_covered_by_the_hash() -> None:
    block = make_block(header())
    message = pb.Block()
    message.ParseFromString(encode_block(block))
    extra = message.header.SerializeToString() + b"\xa0\x06\x01"  # field 100, varint 1: from a newer writer
    message.header.ParseFromString(extra)
    with pytest.raises(ChecksumError):
        decode_block(message.SerializeToString(), where="t")


@pytest.mark.parametrize("data", [b"\xff\xff\xff", b""])
def test_garbage_is_an_invalid_block(data: bytes) -> None:
    with pytest.raises(ChainCorruptionError) as caught:
        decode_block(data, where="t")
    assert caught.value.check == "invalid_block"


def test_files_must_be_sorted_and_unique() -> None:
    with pytest.raises(ValueError, match="sorted"):
        header(files=(FILES[1], FILES[0]))


def _build_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("proto_build", REPO / "proto" / "build.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_generated_code_has_not_drifted() -> None:
    check = subprocess.run([sys.executable, "proto/build.py", "--check"], cwd=REPO, capture_output=True, text=True)
    assert check.returncode == 0, check.stderr


def test_drift_is_detected(tmp_path: Path) -> None:
    build = _build_module()
    fresh, edited = tmp_path / "fresh", tmp_path / "edited"
    build.generate(fresh)
    shutil.copytree(fresh, edited)
    target = edited / "ml8s" / "chain" / "v1" / "chain_pb2.py"
    target.write_text(target.read_text() + "# hand edit\n")
    (edited / "stray_pb2.py").write_text("")
    assert build.differences(fresh, edited) == ["differs ml8s/chain/v1/chain_pb2.py", "stale stray_pb2.py"]
    assert build.sync(fresh, edited) and build.differences(fresh, edited) == []


def test_blocks_from_before_the_signature_fields_hash_and_render_as_before() -> None:
    """trust_policy_version 0 and an empty signature are left out of the bytes and of metadata.json."""
    block = make_block(header())
    assert block.header.trust_policy_version == 0 and block.signature == ""
    rendered = json.loads(metadata_json(block))
    assert "signature" not in rendered and "trust_policy_version" not in rendered["header"]
    assert b"\x88\x01" not in header_bytes(block.header)  # field 17 (varint) is absent at 0
