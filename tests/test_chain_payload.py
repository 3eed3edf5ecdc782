"""Payload validation before anything is written (issue 12 defects 5, 8) and streamed commits (defect 11)."""

from __future__ import annotations

import json
import os
import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest
from forked_cli import forked_ml8s
from safetensors.numpy import load_file, save_file
from test_chain_support import CHAIN, StoreSpec, meta, moto_spec_fixture, open_spec  # noqa: F401  (fixtures)

from ml8s.chain import ChainStore, check_safetensors, local_file, paths, verify_chain
from ml8s.errors import ChecksumError, ConfigError
from ml8s.store import LocalStore


def raw(header: object, data: bytes = b"", *, length: int | None = None) -> bytes:
    body = json.dumps(header).encode() if not isinstance(header, bytes) else header
    return struct.pack("<Q", len(body) if length is None else length) + body + data


def good(tmp_path: Path) -> Path:
    path = tmp_path / "good.safetensors"
    save_file({"a": np.ones((3, 4), dtype=np.float32), "b": np.arange(5, dtype=np.int64)}, str(path))
    return path


T = {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}
BAD: dict[str, bytes] = {
    "empty file": b"",
    "short length": b"\x01\x00",
    "header longer than file": raw({"t": T}, length=10**6),
    "header length 2**64-1": b"\xff" * 8 + b"{}",
    "not json": raw(b"{nope", b"x" * 8),
    "not utf-8": raw(b'{"\xff": 1}'),
    "header is a list": raw([1, 2]),
    "header is null": raw(None),
    "header is a string": raw("x"),
    "empty header": raw({}),
    "metadata not strings": raw({"__metadata__": {"a": 1}, "t": T}, b"x" * 8),
    "entry not an object": raw({"t": [1]}, b"x" * 8),
    "missing data_offsets": raw({"t": {"dtype": "F32", "shape": [2]}}, b"x" * 8),
    "extra key": raw({"t": {**T, "x": 1}}, b"x" * 8),
    "unknown dtype": raw({"t": {**T, "dtype": "F33"}}, b"x" * 8),
    "negative dim": raw({"t": {**T, "shape": [-1]}}, b"x" * 8),
    "float dim": raw({"t": {**T, "shape": [2.0]}}, b"x" * 8),
    "bool dim": raw({"t": {**T, "shape": [True, 2]}}, b"x" * 8),
    "dim 1e400": raw(b'{"t": {"dtype": "F32", "shape": [1e400], "data_offsets": [0, 8]}}', b"x" * 8),
    "dim Infinity": raw(b'{"t": {"dtype": "F32", "shape": [Infinity], "data_offsets": [0, 8]}}', b"x" * 8),
    "20000 dims of 2**62": raw({"t": {**T, "shape": [2**62] * 20000}}, b"x" * 8),
    "a million dims, one field": raw({"t": {**T, "shape": [1] * 10**6 + [-1]}}, b"x" * 8),
    "lone surrogate in a tensor name": raw(
        b'{"a\\ud800": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}', b"x" * 8
    ),
    "lone surrogate in metadata": raw(
        b'{"__metadata__": {"k": "\\udc00"}, "t": ' + json.dumps(T).encode() + b"}", b"x" * 8
    ),
    "dim 10**30": raw({"t": {**T, "shape": [10**30]}}, b"x" * 8),
    "million parameters, no data": raw({"t": {**T, "shape": [10**6], "data_offsets": [0, 4 * 10**6]}}),
    "offsets reversed": raw({"t": {**T, "data_offsets": [8, 0]}}, b"x" * 8),
    "offsets not a pair": raw({"t": {**T, "data_offsets": [0]}}, b"x" * 8),
    "size mismatch": raw({"t": {**T, "shape": [3]}}, b"x" * 8),
    "gap": raw({"t": {**T, "data_offsets": [4, 12]}}, b"x" * 12),
    "overlap": raw({"t": T, "u": T}, b"x" * 8),
    "trailing bytes": raw({"t": T}, b"x" * 9),
    "tensor named twice": raw(
        b'{"t": ' + json.dumps(T).encode() + b', "t": {"dtype": "I32", "shape": [2], "data_offsets": [0, 8]}}', b"x" * 8
    ),
    "field named twice": raw(
        b'{"t": {"dtype": "F32", "dtype": "I32", "shape": [2], "data_offsets": [0, 8]}}', b"x" * 8
    ),
}


@pytest.mark.parametrize("case", list(BAD), ids=list(BAD))
def test_bad_structure_is_one_named_error(tmp_path: Path, case: str) -> None:
    path = tmp_path / "bad.safetensors"
    path.write_bytes(BAD[case])
    with pytest.raises(ConfigError, match="safetensors") as caught:
        check_safetensors(str(path))
    assert "\n" not in str(caught.value)
    assert len(str(caught.value)) < 1000  # a hostile header's megabyte field is not echoed whole
    if "surrogate" in case:  # Python decodes "\\ud800", safetensors refuses it; UTF-8 cannot encode it
        assert "lone UTF-16 surrogate" in str(caught.value), caught.value
    if case.endswith("named twice"):  # each entry alone is valid: only the repetition is wrong
        assert "twice" in str(caught.value), caught.value


def test_truncated_file_is_rejected(tmp_path: Path) -> None:
    """Defect 5: ``truncate -s -100`` used to pass; safetensors itself refuses the file, and so do we."""
    path = good(tmp_path)
    summary = check_safetensors(str(path))
    assert (summary.parameter_count, summary.tensors) == (17, 2)
    os.truncate(path, path.stat().st_size - 100)
    with pytest.raises(Exception):  # noqa: B017  (whatever safetensors raises: it must refuse too)
        load_file(str(path))
    with pytest.raises(ConfigError, match="truncated"):
        check_safetensors(str(path))


def _cli(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "CHAIN_NAME"} | {"PIPELINE_ROOT_URI": str(root)}
    return forked_ml8s(["chain", *args, "--chain", CHAIN], env)


def test_cli_refuses_before_writing_anything(tmp_path: Path) -> None:
    """Defect 8: one ``ml8s:`` line, no traceback, and no claim file for a payload or --steps that fails."""
    root = tmp_path / "root"
    assert _cli(root, "init").returncode == 0
    header_list = tmp_path / "list.safetensors"
    header_list.write_bytes(BAD["header is a list"])
    runs = root / paths.ROOT / CHAIN / paths.RUNS
    for args in (
        ("--payload", str(header_list)),
        ("--payload", str(good(tmp_path)), "--steps", "-1"),
        ("--payload", str(good(tmp_path)), "--steps", str(2**64)),
    ):
        proc = _cli(root, "commit", *args)
        assert proc.returncode == 1 and proc.stderr.startswith("ml8s: CONFIG_ERROR"), proc.stderr
        assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
        assert not runs.exists() or not list(runs.iterdir())


@pytest.fixture(name="spec", params=["local", "moto"])
def spec_fixture(request: pytest.FixtureRequest, tmp_path: Path) -> StoreSpec:
    if request.param == "local":
        return ("local", str(tmp_path / "root"))
    spec: StoreSpec = request.getfixturevalue("moto_spec")
    return spec


def test_streamed_commit_and_verify(spec: StoreSpec, tmp_path: Path) -> None:
    path = good(tmp_path)
    chain = ChainStore(open_spec(spec), CHAIN)
    chain.init()
    version = chain.commit({"model.safetensors": local_file(str(path))}, meta("streamed"))
    assert chain.fetch_payload(version, "model.safetensors") == path.read_bytes()
    assert verify_chain(ChainStore(chain.store, CHAIN), strict_orphans=True).ok


def test_file_changed_after_hashing_fails_the_commit(tmp_path: Path) -> None:
    path = good(tmp_path)
    source = local_file(str(path))
    path.write_bytes(path.read_bytes() + b"!")
    chain = ChainStore(LocalStore(str(tmp_path / "root")), CHAIN)
    chain.init()
    with pytest.raises(ChecksumError, match="changed while committing"):
        chain.commit({"model.safetensors": source}, meta("changed"))
    assert chain.head().counter == 0 and verify_chain(chain, strict_orphans=True).ok


def test_a_surrogate_pair_is_text_and_accepted(tmp_path: Path) -> None:
    path = tmp_path / "emoji.safetensors"
    path.write_bytes(raw(b'{"w\\ud83d\\ude00": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}', b"x" * 8))
    assert check_safetensors(str(path)).tensors == 1
    assert list(load_file(str(path))) == ["w\U0001f600"]


def test_a_payload_path_that_is_not_utf8_is_refused_before_the_run_is_claimed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The block records the payload's absolute path (artifact_root): a name holding the byte 0xff failed
    to encode only after the run claim was written (INTERNAL_ERROR UnicodeEncodeError, exit 2)."""
    from ml8s.cli.main import main

    root = tmp_path / "root"
    monkeypatch.delenv("CHAIN_NAME", raising=False)
    assert main(["chain", "init", "--root", str(root), "--chain", CHAIN]) == 0
    not_utf8 = tmp_path / "model-\udcff.safetensors"
    not_utf8.write_bytes(good(tmp_path).read_bytes())
    capsys.readouterr()
    assert main(["chain", "commit", "--root", str(root), "--chain", CHAIN, "--payload", str(not_utf8)]) == 1
    assert "CONFIG_ERROR" in capsys.readouterr().err
    runs = root / paths.ROOT / CHAIN / paths.RUNS
    assert not runs.exists() or not list(runs.iterdir())
