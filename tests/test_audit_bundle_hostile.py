"""A hostile bundle handed to an auditor: `ml8s audit verify` reads it bounded and never waits on it.

Before, the whole file was gunzipped in memory: a 2 MB gzip of zeros made the verifier hold 4 GiB, and a FIFO
blocked it forever. Each is now a FAIL of the `archive` check, naming the file.
"""

from __future__ import annotations

import gzip
import os
import tarfile
from pathlib import Path

import pytest
from tar_support import tar_bytes

import ml8s.audit.bundle_open as bundle_open
from ml8s.audit.bundle import BUNDLE_MAX_BYTES, MODEL_BYTES_LIMIT
from ml8s.audit.bundle_open import open_bundle


def _tar_gz(members: dict[str, bytes]) -> bytes:
    return gzip.compress(tar_bytes(members))


def test_a_bundle_holding_the_largest_model_is_within_the_bound() -> None:
    assert BUNDLE_MAX_BYTES >= MODEL_BYTES_LIMIT + 32 * 1024 * 1024


def test_a_bundle_expanding_past_the_bound_is_refused_unread(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bundle_open, "BUNDLE_MAX_BYTES", 1024 * 1024)
    bomb = tmp_path / "bomb.tar.gz"
    bomb.write_bytes(_tar_gz({"b/bundle.json": bytes(4 * 1024 * 1024)}))
    assert bomb.stat().st_size < 64 * 1024
    opened = open_bundle(str(bomb))
    assert opened.members == {}
    assert opened.problems == (f"{bomb} expands to over {1024 * 1024} bytes; expected a bundle",)
    small = tmp_path / "small.tar.gz"
    small.write_bytes(_tar_gz({"b/bundle.json": b"{}"}))
    assert open_bundle(str(small)).members == {"bundle.json": b"{}"}


def test_a_packed_file_past_the_bound_is_refused_unread(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bundle_open, "BUNDLE_MAX_BYTES", 1024)
    big = tmp_path / "big.tar.gz"
    big.write_bytes(os.urandom(4096))
    (problem,) = open_bundle(str(big)).problems
    assert problem == f"{big}: over 1024 bytes; expected an audit bundle"


def test_a_fifo_or_a_device_is_refused_not_waited_on(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo")
    for path, words in ((str(tmp_path / "fifo"), "a FIFO"), ("/dev/zero", "a character device")):
        (problem,) = open_bundle(path).problems
        assert problem == f"{path}: {words}, not read; expected an audit bundle"
    assert open_bundle(str(tmp_path / "missing")).problems == (f"{tmp_path / 'missing'} does not exist",)


@pytest.mark.parametrize(("keep", "whole"), [(513, 0), (600, 1), (2100, 1)])
def test_a_tar_cut_short_inside_a_whole_gzip_is_a_problem_not_an_internal_error(
    tmp_path: Path, keep: int, whole: int
) -> None:
    """tarfile reads headers and members lazily: a cut tar raised ReadError from the member loop (INTERNAL_ERROR)."""
    tar = tar_bytes({"b/bundle.json": b"{}", "b/run/manifest.json": b"x" * 1000})
    cut = tmp_path / "cut.tar.gz"
    cut.write_bytes(gzip.compress(tar[:keep]))
    opened = open_bundle(str(cut))
    assert opened.problems == (f"{cut} is cut short after {whole} whole member(s) (unexpected end of data); "
                               "expected a whole tar.gz",)  # fmt: skip
    assert opened.members == ({"bundle.json": b"{}"} if whole else {})


def _longer_than_it_says() -> bytes:
    """b/a's header says 10 bytes; 1024 follow, where the next header (b/z's) was due."""
    header = tarfile.TarInfo("b/a")
    header.size = 10
    tail = tar_bytes({"b/z": b"z"})
    return header.tobuf(format=tarfile.USTAR_FORMAT) + b"A" * 1024 + tail


def _appended_after_the_end() -> bytes:
    hidden = tarfile.TarInfo("b/hidden.onnx")
    hidden.size = 6
    return tar_bytes({"b/a": b"x" * 10}) + hidden.tobuf(format=tarfile.USTAR_FORMAT) + b"hidden" + bytes(506)


@pytest.mark.parametrize("tar", [_longer_than_it_says(), _appended_after_the_end()], ids=["longer", "appended"])
def test_data_after_the_last_readable_member_is_a_problem(tmp_path: Path, tar: bytes) -> None:
    """tarfile ends its listing silently at the first block that is no valid header: a member longer than its header
    says (the members after it dropped) or a member appended after the end-of-archive blocks was never read, and
    the archive had no problem."""
    path = tmp_path / "b.tar.gz"
    path.write_bytes(gzip.compress(tar))
    opened = open_bundle(str(path))
    assert opened.members == {"a": tar[512:522]}
    (problem,) = opened.problems
    assert problem.startswith(f"{path} holds data at byte ") and "after its last readable member" in problem
    whole = tmp_path / "whole.tar.gz"
    whole.write_bytes(gzip.compress(tar_bytes({"b/a": b"x" * 10, "b/z": b"z"}) + bytes(4096)))
    assert open_bundle(str(whole)).problems == ()  # zero padding after the end, however long, is no problem
