"""A symlink that resolves to itself is reported as a symlink loop naming the path, never as "broken"
(defect 7): in DATA_ROOT, as DATA_ROOT itself, and when a fingerprinted file turns into one."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import write_small_churn

from ml8s.contract import layout
from ml8s.data.fingerprint import digest_file, fingerprint_local
from ml8s.data.sources import read_verified
from ml8s.errors import DataChangedError, DataError
from ml8s.pipeline.bootstrap import bootstrap
from ml8s.pipeline.run import run_pipeline
from ml8s.pipeline.snapshot import snapshot


def _self_loop(data: Path) -> tuple[Path, Path]:
    os.symlink("loop", data / "loop")  # ln -s loop loop
    return data, data / "loop"


def _two_cycle(data: Path) -> tuple[Path, Path]:
    os.symlink("b.csv", data / "a.csv")
    os.symlink("a.csv", data / "b.csv")
    return data, data / "a.csv"


def _nested_loop(data: Path) -> tuple[Path, Path]:
    (data / "sub").mkdir()
    os.symlink("loop", data / "sub" / "loop")
    return data, data / "sub" / "loop"


def _root_is_a_loop(data: Path) -> tuple[Path, Path]:
    os.symlink("self", data.parent / "self")
    return data.parent / "self", data.parent / "self"


def _root_is_a_two_cycle(data: Path) -> tuple[Path, Path]:
    os.symlink(data.parent / "y", data.parent / "x")
    os.symlink(data.parent / "x", data.parent / "y")
    return data.parent / "x", data.parent / "x"


# Each shape makes (DATA_ROOT, the path the message must name) from conftest's data directory.
SHAPES: dict[str, Callable[[Path], tuple[Path, Path]]] = {
    "self_loop": _self_loop,
    "two_cycle": _two_cycle,
    "nested_loop": _nested_loop,
    "root_is_a_loop": _root_is_a_loop,
    "root_is_a_two_cycle": _root_is_a_two_cycle,
}


def _written(root: Path) -> list[Path]:
    runs = root / layout.RUNS_DIR
    return sorted(p for p in runs.rglob("*") if p.is_file()) if runs.exists() else []


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_symlink_loop_is_named_before_anything_is_written(tmp_path: Path, shape: str) -> None:
    data_root, culprit = SHAPES[shape](write_small_churn(tmp_path / "data", rows=60, files=1))
    root = tmp_path / "root"
    env = {"DATA_ROOT": str(data_root), "TARGET_COLUMN": "churned", "PIPELINE_ROOT_URI": str(root), "EPOCHS": "1"}

    with pytest.raises(DataError) as caught:
        run_pipeline(env)

    message = str(caught.value)
    assert type(caught.value) is DataError and message.startswith("DATA_ERROR: ") and "\n" not in message
    assert "symlink loop" in message and str(culprit) in message
    assert "broken" not in message and "does not exist" not in message
    assert _written(root) == []


def test_a_broken_symlink_is_still_called_broken(tmp_path: Path) -> None:
    data = write_small_churn(tmp_path / "data", rows=60, files=1)
    os.symlink(data / "nowhere.csv", data / "dangling.csv")
    with pytest.raises(DataError, match=r"broken symlink in DATA_ROOT: .*dangling\.csv$"):
        fingerprint_local(str(data))
    os.symlink(tmp_path / "nowhere", tmp_path / "gone")
    with pytest.raises(DataError, match=r"DATA_ROOT file://.*gone is a broken symlink"):
        fingerprint_local(str(tmp_path / "gone"))


def test_a_fifo_or_socket_in_the_data_is_named_not_skipped(tmp_path: Path) -> None:
    data = write_small_churn(tmp_path / "data", rows=60, files=1)
    os.mkfifo(data / "more.csv")  # reading it would wait for a writer forever; skipping it would hide it
    with pytest.raises(DataError, match=r"^DATA_ERROR: DATA_ROOT holds .*more\.csv, a FIFO; expected only regular"):
        fingerprint_local(str(data))
    (data / "more.csv").unlink()
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(data / "sock"))
        with pytest.raises(DataError, match=r"DATA_ROOT holds .*sock, a socket; expected only regular"):
            fingerprint_local(str(data))
    os.symlink(tmp_path / "fifo", data / "linked.csv")  # a link to a FIFO is no broken link: named as a FIFO
    os.mkfifo(tmp_path / "fifo")
    (data / "sock").unlink()
    with pytest.raises(DataError, match=r"DATA_ROOT holds .*linked\.csv, a symlink to .*fifo, a FIFO; expected"):
        fingerprint_local(str(data))


def test_a_file_turned_into_a_loop_after_fingerprinting_is_named(tmp_path: Path) -> None:
    data = write_small_churn(tmp_path / "data", rows=60, files=2)
    root = tmp_path / "root"
    ctx = bootstrap({"DATA_ROOT": str(data), "TARGET_COLUMN": "churned", "PIPELINE_ROOT_URI": str(root)})
    target = data / "part-001.csv"
    target.unlink()
    os.symlink("part-001.csv", target)

    with pytest.raises(DataChangedError, match=r"part-001\.csv was fingerprinted but cannot be read now: it is a "):
        snapshot(ctx, ctx.open_store())
    assert _written(root) == []


@pytest.mark.timeout(20)
def test_a_file_replaced_by_a_fifo_after_listing_is_refused_not_waited_on(tmp_path: Path) -> None:
    """A FIFO where a listed file was: opening it for reading waited for a writer forever (the run hung)."""
    data = write_small_churn(tmp_path / "data", rows=60, files=2)
    fingerprint = fingerprint_local(str(data), progress=False)
    target = data / "part-001.csv"
    target.unlink()
    os.mkfifo(target)
    changed = r"part-001\.csv was fingerprinted as a regular file but is not one now .*a FIFO"
    with pytest.raises(DataChangedError, match=changed):
        list(read_verified(fingerprint))
    with pytest.raises(DataError, match=r"^DATA_ERROR: DATA_ROOT: cannot read .*part-001\.csv: a FIFO; "):
        digest_file(str(target))  # listed as a file, then replaced before it was hashed


@pytest.mark.parametrize("where", ["file", "directory"])
def test_a_name_that_is_not_utf8_is_a_data_error(tmp_path: Path, where: str) -> None:
    """A Latin-1 file name (`p\\xe9.csv`) enters the fingerprint as text: it used to be an INTERNAL_ERROR there."""
    data = write_small_churn(tmp_path / "data", rows=60, files=1)
    (data / "café.csv").write_bytes((data / "part-000.csv").read_bytes())  # UTF-8 names are data like any other
    assert "café.csv" in [e.relative_path for e in fingerprint_local(str(data), progress=False).entries]
    latin1 = os.fsdecode(b"caf\xe9")
    if where == "file":
        (data / f"{latin1}.csv").write_bytes((data / "part-000.csv").read_bytes())
    else:
        (data / latin1).mkdir()
    with pytest.raises(DataError, match=r"^DATA_ERROR: DATA_ROOT holds '.*caf\\udce9.*', a name with bytes that are"):
        fingerprint_local(str(data))
