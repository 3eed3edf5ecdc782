"""Bounded reads (issue 21, class 5): chain.json or a payload replaced by a FIFO, a link to /dev/zero, a
64 GiB sparse file: every reader answers with a named error or finding, never a hang, MemoryError or
traceback. Locally and, for the size bounds, on radosgw."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest
from test_chain_support import CHAIN, StoreSpec, build, meta, open_spec, payload, rgw_spec_fixture  # noqa: F401

from ml8s.chain import ChainStore, ChainVersion, Follower, limits, paths, verify_chain
from ml8s.chain.commit import _seal
from ml8s.chain.models import PayloadFile
from ml8s.errors import ChecksumError, Ml8sError, ObjectTooLargeError, UnsafeObjectError
from ml8s.store import LocalStore

T = TypeVar("T")
HANG_GUARD_S = 60.0  # far above any honest answer: only a read blocked on a FIFO or endless file gets here
SPARSE = 64 * 1024**3


def answers(action: Callable[[], T], unblock: list[Path] | None = None) -> T | BaseException:
    """``action``'s result or exception; fails the test if it is still blocked after HANG_GUARD_S (and then
    opens ``unblock`` FIFOs for writing, so the stuck thread can end)."""
    out: list[T | BaseException] = []

    def run() -> None:
        try:
            out.append(action())
        except BaseException as exc:  # the error is the result under test
            out.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(HANG_GUARD_S)
    if thread.is_alive():
        for fifo in unblock or []:
            os.close(os.open(fifo, os.O_RDWR | os.O_NONBLOCK))
        pytest.fail(f"still blocked after {HANG_GUARD_S} s: a read waited on a FIFO or an endless file")
    return out[0]


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("pristine") / "root"
    build(ChainStore(LocalStore(str(root)), CHAIN), 2)
    return root


@pytest.fixture
def chain(pristine: Path, tmp_path: Path) -> ChainStore:
    root = tmp_path / "root"
    subprocess.run(["cp", "-a", str(pristine), str(root)], check=True)
    return ChainStore(LocalStore(str(root)), CHAIN)


def chain_dir(chain: ChainStore) -> Path:
    return Path(chain.store.root if isinstance(chain.store, LocalStore) else "") / paths.ROOT / CHAIN


def payload_path(chain: ChainStore, version: ChainVersion, name: str = "model.bin") -> Path:
    return chain_dir(chain) / paths.VERSIONS / version.version_dir / paths.PAYLOAD / name


def replace_with_fifo(path: Path) -> Path:
    path.unlink()
    os.mkfifo(path)
    return path


def ml8s_cli(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "CHAIN_NAME"} | {"PIPELINE_ROOT_URI": str(root)}
    ml8s = str(Path(sys.executable).with_name("ml8s"))
    return subprocess.run(
        [ml8s, *args, "--chain", CHAIN], env=env, capture_output=True, text=True, check=False, timeout=300
    )


def test_head_fifo_is_refused_by_every_reader(chain: ChainStore) -> None:
    fifo = replace_with_fifo(chain_dir(chain) / paths.HEAD)
    fresh = ChainStore(chain.store, CHAIN)
    assert isinstance(err := answers(fresh.head, [fifo]), UnsafeObjectError) and "a FIFO" in err.message
    assert isinstance(answers(Follower(fresh).poll, [fifo]), UnsafeObjectError)
    report = answers(lambda: verify_chain(fresh), [fifo])
    assert not isinstance(report, BaseException)
    assert {"head", "unsafe_object"} <= report.checks
    root = Path(chain.store.root if isinstance(chain.store, LocalStore) else "")
    done = answers(lambda: ml8s_cli(root, "chain", "verify"), [fifo])
    assert not isinstance(done, BaseException)
    assert done.returncode == 1 and "unsafe_object" in done.stderr + done.stdout and "Traceback" not in done.stderr
    follow = answers(lambda: ml8s_cli(root, "follow", "--once", "--out", str(root.parent / "served")), [fifo])
    assert not isinstance(follow, BaseException)
    assert follow.returncode != 0 and "STORE_UNSAFE_OBJECT" in follow.stderr and "Traceback" not in follow.stderr
    # The head's lock is not held forever either: a commit gets a named error, not a wait.
    assert isinstance(answers(lambda: fresh.commit(payload("x"), meta("x")), [fifo]), UnsafeObjectError)


def test_head_linked_to_dev_zero(chain: ChainStore) -> None:
    head = chain_dir(chain) / paths.HEAD
    head.unlink()
    head.symlink_to("/dev/zero")
    fresh = ChainStore(chain.store, CHAIN)
    err = answers(fresh.head)
    assert isinstance(err, UnsafeObjectError) and "symbolic link" in err.message
    report = answers(lambda: verify_chain(fresh))
    assert not isinstance(report, BaseException) and {"head", "unsafe_object"} <= report.checks


def test_oversized_head_is_refused_before_reading(chain: ChainStore) -> None:
    head = chain_dir(chain) / paths.HEAD
    with open(head, "r+b") as handle:
        handle.truncate(SPARSE)
    err = answers(ChainStore(chain.store, CHAIN).head)
    assert isinstance(err, ObjectTooLargeError) and str(limits.HEAD_MAX_BYTES) in err.message


def test_payload_fifo(chain: ChainStore) -> None:
    version = chain.head()
    fifo = replace_with_fifo(payload_path(chain, version))
    fresh = ChainStore(chain.store, CHAIN)
    err = answers(lambda: fresh.fetch_payload(version, "model.bin"), [fifo])
    assert isinstance(err, ChecksumError) and err.check == "unsafe_object" and "a FIFO" in err.message
    report = answers(lambda: verify_chain(fresh), [fifo])
    assert not isinstance(report, BaseException) and {"payload_missing", "unsafe_object"} <= report.checks


def test_sparse_64_gib_payload(chain: ChainStore) -> None:
    version = chain.head()
    with open(payload_path(chain, version), "r+b") as handle:
        handle.truncate(SPARSE)
    fresh = ChainStore(chain.store, CHAIN)
    err = answers(lambda: fresh.fetch_payload(version, "model.bin"))
    assert isinstance(err, ChecksumError) and err.check == "payload_size" and str(SPARSE) in err.message
    report = answers(lambda: verify_chain(fresh))
    assert not isinstance(report, BaseException) and "payload_size" in report.checks


def test_payload_linked_elsewhere_is_not_followed(chain: ChainStore, tmp_path: Path) -> None:
    """Even a link to a file with the right bytes: the store holds files, never pointers out of it."""
    version = chain.head()
    target = tmp_path / "elsewhere.bin"
    path = payload_path(chain, version)
    target.write_bytes(path.read_bytes())
    path.unlink()
    path.symlink_to(target)
    err = answers(lambda: ChainStore(chain.store, CHAIN).fetch_payload(version, "model.bin"))
    assert isinstance(err, ChecksumError) and err.check == "unsafe_object"
    assert "unsafe_object" in verify_chain(ChainStore(chain.store, CHAIN)).checks


def test_block_and_records_replaced(chain: ChainStore) -> None:
    """A FIFO audit event, an endless run record, a block linked to /dev/zero: findings, each named."""
    base = chain_dir(chain)
    version = chain.head()
    replace_with_fifo(sorted((base / paths.AUDIT).iterdir())[-1])
    record = next(p for p in (base / paths.RUNS).iterdir() if not p.name.endswith(".claim.json"))
    with open(record, "r+b") as handle:
        handle.truncate(limits.RECORD_MAX_BYTES + 1)
    block = base / paths.VERSIONS / version.version_dir / paths.BLOCK
    block.unlink()
    block.symlink_to("/dev/zero")
    report = answers(lambda: verify_chain(ChainStore(chain.store, CHAIN)))
    assert not isinstance(report, BaseException)
    assert {"unsafe_object", "run_index", "head"} <= report.checks
    assert all(isinstance(f.reason, str) for f in report.findings)


def test_every_refusal_is_a_named_error(chain: ChainStore) -> None:
    for cls in (UnsafeObjectError, ObjectTooLargeError):
        assert issubclass(cls, Ml8sError) and cls.code.startswith("STORE_")


def test_radosgw_reads_are_bounded(rgw_spec: StoreSpec) -> None:
    """S3 has no FIFOs or links, but an object larger than its bound is refused from its Content-Length."""
    store = open_spec(rgw_spec)
    chain = ChainStore(store, CHAIN)
    build(chain, 1)
    version = chain.head()
    key = chain.version_key(version.version_dir, paths.PAYLOAD, "model.bin")
    store.delete(key)
    assert store.put_if_absent(key, b"z" * (2 * 1024 * 1024))  # larger than the block records
    err = answers(lambda: ChainStore(store, CHAIN).fetch_payload(version, "model.bin"))
    assert isinstance(err, ChecksumError) and err.check == "payload_size" and "2097152" in err.message
    store.put_if_match(chain.key(paths.HEAD), b" " * (limits.HEAD_MAX_BYTES + 1), store.checksum(chain.key(paths.HEAD)))
    assert isinstance(answers(ChainStore(store, CHAIN).head), ObjectTooLargeError)
    report = verify_chain(ChainStore(store, CHAIN))
    assert "head" in report.checks and json.loads(report.model_dump_json())["findings"]


def test_an_unsigned_block_claiming_a_huge_payload(chain: ChainStore) -> None:
    """A forged block may record any size: an in-memory read stops at half the machine's memory."""
    huge = 2 * os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    forged = _seal(chain.head(), meta("huge"), (PayloadFile(name="model.bin", sha256="0" * 64, size=huge),))
    path = chain_dir(chain) / paths.VERSIONS / forged.version_dir / paths.PAYLOAD / "model.bin"
    path.parent.mkdir(parents=True)
    with open(path, "wb") as handle:
        handle.truncate(huge)
    err = answers(lambda: chain.fetch_payload(forged, "model.bin"))
    assert isinstance(err, ChecksumError) and err.check == "payload_size"
    assert str(limits.PAYLOAD_MEMORY_MAX_BYTES) in err.message
