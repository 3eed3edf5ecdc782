"""Out-of-process determinism: the same payload and meta give the same payload and content hashes in any
process and any chain (the block hash differs: it covers the commit time and the committer)."""

from __future__ import annotations

from pathlib import Path

from test_chain_support import determinism_worker, meta, payload, spawn_all

from ml8s.chain import ChainStore
from ml8s.chain.commit import payload_files
from ml8s.store import LocalStore


def test_two_processes_two_chains_same_hashes(tmp_path: Path) -> None:
    roots = [str(tmp_path / "a"), str(tmp_path / "b")]
    first, second = list(spawn_all(determinism_worker, [(root,) for root in roots], fresh=True))
    assert first == second
    content_hash, files, content_hash_txt, stored, position = first
    assert stored == payload("same") and position == (1, "1.0.0", "0.0.0")
    assert files == [f.model_dump() for f in payload_files(payload("same"))]
    here = ChainStore(LocalStore(str(tmp_path / "c")), "line").commit(payload("same"), meta("same", step=7))
    assert (here.content_hash, content_hash_txt) == (content_hash, f"{content_hash}\n".encode())
