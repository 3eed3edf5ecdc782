"""Commit, init and GC never make a damaged chain worse (issue 12, defects 1-4, 9, 10), local and radosgw.

Each test damages the chain the way an operator or attacker could through the store alone (rolling the
head back, deleting it, deleting the run index) and checks that the chain refuses with a named error
instead of reporting success, starting a second history or deleting evidence.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_chain_support import (  # noqa: F401  (fixtures)
    CHAIN,
    StoreSpec,
    local_or_radosgw_spec,
    local_root_fixture,
    meta,
    open_spec,
    payload,
    rgw_spec_fixture,
)

from ml8s.chain import ChainStore, collect_garbage, paths, verify_chain
from ml8s.errors import (
    ChainCorruptionError,
    ChainHeadMissingError,
    ChainRollbackError,
    ConfigError,
    ConflictError,
    StoreError,
)
from ml8s.store import LocalStore


def _roll_back_one(chain: ChainStore) -> None:
    """p1, p2 committed; the head object is then put back to its bytes after p1 (a one-step rollback)."""
    chain.init()
    chain.commit(payload("p1"), meta("p1"))
    after_p1 = chain.store.get(chain.key(paths.HEAD))
    chain.commit(payload("p2"), meta("p2"))
    token = chain.store.get_versioned(chain.key(paths.HEAD)).token
    chain.store.put_if_match(chain.key(paths.HEAD), after_p1, token)


def test_commit_refuses_a_run_record_off_the_chain(spec: StoreSpec) -> None:
    """Defect 1: the record names v2, the head is v1: no "success" for a version that is not on the chain."""
    chain = ChainStore(open_spec(spec), CHAIN)
    _roll_back_one(chain)
    with pytest.raises(ChainRollbackError, match="not on the chain"):
        ChainStore(chain.store, CHAIN).commit(payload("p2"), meta("p2"))
    assert ChainStore(chain.store, CHAIN).head().counter == 1


def test_gc_keeps_versions_the_index_and_trail_name(spec: StoreSpec) -> None:
    """Defect 2: after the rollback, verify names the committed version off the chain and GC refuses."""
    chain = ChainStore(open_spec(spec), CHAIN)
    _roll_back_one(chain)
    report = verify_chain(ChainStore(chain.store, CHAIN))
    assert "committed_off_chain" in report.checks, report.findings
    v2 = [f.version_dir for f in report.findings if f.check == "committed_off_chain"]
    with pytest.raises(ChainCorruptionError):
        collect_garbage(ChainStore(chain.store, CHAIN), grace_s=0, dry_run=False)
    assert chain.store.exists(chain.version_key(v2[0], paths.BLOCK))


def test_missing_head_is_named_never_a_new_genesis(spec: StoreSpec) -> None:
    """Defect 3: init and commit on a chain whose head was deleted refuse, and write no version."""
    chain = ChainStore(open_spec(spec), CHAIN)
    chain.init()
    chain.commit(payload("p1"), meta("p1"))
    chain.store.delete(chain.key(paths.HEAD))
    before = sorted(chain.version_dirs())
    fresh = ChainStore(chain.store, CHAIN)
    with pytest.raises(ChainHeadMissingError):
        fresh.init()
    with pytest.raises(ChainHeadMissingError):
        fresh.commit(payload("p2"), meta("p2"))
    with pytest.raises(ChainHeadMissingError):
        fresh.head()
    assert sorted(fresh.version_dirs()) == before
    assert not chain.store.exists(chain.key(paths.HEAD))
    assert "head" in verify_chain(fresh).checks


def test_genesis_only_chain_with_deleted_head(spec: StoreSpec) -> None:
    chain = ChainStore(open_spec(spec), CHAIN)
    chain.init()
    chain.store.delete(chain.key(paths.HEAD))
    with pytest.raises(ChainHeadMissingError):
        ChainStore(chain.store, CHAIN).init()


def test_deleted_run_index_never_duplicates_a_block(spec: StoreSpec) -> None:
    """Defect 4: with runs/ gone, committing p1 again finds its block on the chain: no second block."""
    chain = ChainStore(open_spec(spec), CHAIN)
    chain.init()
    v1 = chain.commit(payload("p1"), meta("p1"))
    chain.commit(payload("p2"), meta("p2"))
    for info in chain.store.list(chain.key(paths.RUNS)):
        chain.store.delete(info.key)
    fresh = ChainStore(chain.store, CHAIN)
    assert fresh.commit(payload("p1"), meta("p1")) == v1
    assert fresh.head().counter == 2
    assert "duplicate_run" not in verify_chain(fresh).checks


def test_chain_name_is_matched_in_full(tmp_path: Path) -> None:
    """Defect 9: '$' lets a trailing newline through; the whole name must match."""
    for bad in ("line\n", "line\r", "", "-x", "a/b"):
        with pytest.raises(ConfigError):
            ChainStore(LocalStore(str(tmp_path)), bad)


def test_known_head_prefix(tmp_path: Path) -> None:
    """Defect 10: the 12-character hash ``chain log`` prints, upper case too; too short or not hex: ConfigError."""
    chain = ChainStore(LocalStore(str(tmp_path)), CHAIN)
    chain.init()
    v1 = chain.commit(payload("p1"), meta("p1"))
    for known in (v1.block_hash[:12], v1.block_hash.upper(), v1.block_hash[:20].upper()):
        assert verify_chain(chain, known_head=known).ok, known
    assert "known_head" in verify_chain(chain, known_head="f" * 12).checks
    for bad in ("abc", v1.block_hash[:11], "g" * 12, v1.block_hash + "0"):
        with pytest.raises(ConfigError):
            verify_chain(chain, known_head=bad)


def test_lost_commit_leaves_no_empty_directories(tmp_path: Path) -> None:
    """Defect 10: a loser's rollback removes its version directory, not just the files in it."""
    rival = ChainStore(LocalStore(str(tmp_path)), CHAIN)

    class RivalFirst(LocalStore):
        def put_if_match(self, key: str, data: bytes, token: str | None) -> str:
            if key.endswith(paths.HEAD) and token is not None and rival.head().counter == 0:
                rival.commit(payload("rival"), meta("rival"))
            return super().put_if_match(key, data, token)

    rival.init()
    with pytest.raises(ConflictError):
        ChainStore(RivalFirst(str(tmp_path)), CHAIN).commit(payload("me"), meta("me"))
    versions = tmp_path / paths.ROOT / CHAIN / paths.VERSIONS
    assert len(os.listdir(versions)) == 2  # genesis and the rival's v1
    empty = [d for d, subdirs, files in os.walk(versions) if not subdirs and not files]
    assert empty == []


def test_gc_removes_stale_empty_directories(tmp_path: Path) -> None:
    chain = ChainStore(LocalStore(str(tmp_path)), CHAIN)
    chain.init()
    stale = tmp_path / paths.ROOT / CHAIN / paths.VERSIONS / "v0000000001_1.0.0_000000000000" / paths.PAYLOAD
    stale.mkdir(parents=True)
    assert collect_garbage(chain, grace_s=3600, dry_run=False).items == ()
    assert stale.exists()  # younger than the grace period
    report = collect_garbage(chain, grace_s=0, dry_run=False, now=os.path.getmtime(stale) + 10)
    assert {i.kind for i in report.items} == {"empty_dir"} and not stale.parent.exists()


def test_gc_dry_run_reports_the_empty_directories_a_real_run_removes(tmp_path: Path) -> None:
    """A dry run listed no ``empty_dir`` while ``--execute`` removed them: the dry run must say what goes."""
    chain = ChainStore(LocalStore(str(tmp_path)), CHAIN)
    chain.init()
    versions = tmp_path / paths.ROOT / CHAIN / paths.VERSIONS
    (versions / "v0000000001_1.0.0_000000000000").mkdir()
    (versions / "v0000000002_1.0.0_000000000000").mkdir()
    now = max(os.path.getmtime(d) for d in versions.iterdir()) + 10
    dry = collect_garbage(chain, grace_s=0, now=now)
    assert {i.kind for i in dry.items} == {"empty_dir"} and len(dry.items) == 2
    assert not any(i.deleted for i in dry.items) and (versions / "v0000000001_1.0.0_000000000000").exists()
    real = collect_garbage(chain, grace_s=0, dry_run=False, now=now)
    assert [i.path for i in dry.items] == [i.path for i in real.items if i.deleted]


def test_a_head_or_block_that_does_not_validate_is_named_in_one_line(tmp_path: Path) -> None:
    """A store writer's chain.json of ``{"x": 1}``, or a block whose semver is an escape sequence: the error (and
    ``chain log``'s, ``gc``'s message) was pydantic's text, lines of it, echoing the planted values."""
    from ml8s.proto_gen.ml8s.chain.v1 import chain_pb2 as pb

    chain = ChainStore(LocalStore(str(tmp_path)), CHAIN)
    genesis = chain.init()
    block_file = tmp_path / paths.ROOT / CHAIN / paths.VERSIONS / genesis.version_dir / paths.BLOCK
    block = pb.Block()
    block.ParseFromString(block_file.read_bytes())
    block.header.semver = "1.0\x1b[2J"
    block_file.write_bytes(block.SerializeToString())
    reasons = [f.reason for f in verify_chain(chain).findings if f.check == "invalid_block"]
    assert reasons and all("\n" not in r and "\x1b" not in r and "semver: String should match" in r for r in reasons)
    (tmp_path / paths.ROOT / CHAIN / paths.HEAD).write_text('{"x": 1}')
    with pytest.raises(ChainCorruptionError) as caught:
        chain.read_head()
    assert "\n" not in str(caught.value) and "pydantic" not in str(caught.value)
    assert "chain_name: Field required (and 4 more)" in str(caught.value)


def test_head_that_is_a_directory(tmp_path: Path) -> None:
    """Defect 10: a named finding, and ``verify --json`` still prints its report."""
    root = tmp_path / "root"
    chain = ChainStore(LocalStore(str(root)), CHAIN)
    chain.init()
    head = root / paths.ROOT / CHAIN / paths.HEAD
    head.unlink()
    head.mkdir()
    with pytest.raises(StoreError, match="a directory; expected a regular file"):
        ChainStore(chain.store, CHAIN).head()
    assert "head" in verify_chain(chain).checks
    env = {k: v for k, v in os.environ.items() if k != "CHAIN_NAME"} | {"PIPELINE_ROOT_URI": str(root)}
    ml8s = str(Path(sys.executable).with_name("ml8s"))
    proc = subprocess.run(
        [ml8s, "chain", "verify", "--json", "--chain", CHAIN], env=env, capture_output=True, text=True, check=False
    )
    assert proc.returncode == 1, proc.stderr
    assert "head" in {f["check"] for f in json.loads(proc.stdout)["findings"]}
