"""The run index and the audit trail are covered (issue 12): deleting or editing them is a finding, while a
chain whose index and trail are intact verifies, and commits stay correct without them."""

from __future__ import annotations

import hashlib
from pathlib import Path

from test_chain_support import CHAIN, meta, payload

from ml8s.chain import ChainStore, paths, verify_chain
from ml8s.chain.events import AuditEvent
from ml8s.store import LocalStore


def _chain(tmp_path: Path) -> ChainStore:
    chain = ChainStore(LocalStore(str(tmp_path)), CHAIN)
    chain.init()
    for i in range(1, 4):
        chain.commit(payload(f"v{i}"), meta(f"v{i}", step=i))
    return chain


def test_blocks_record_their_run_claim(tmp_path: Path) -> None:
    chain = _chain(tmp_path)
    head = chain.head()
    claim = chain.store.get(chain.key(paths.RUNS, f"{head.header.full_config_hash}.claim.json"))
    assert head.header.run_claim_sha256 == hashlib.sha256(claim).hexdigest()
    assert verify_chain(chain).ok


def test_deleted_run_index_is_a_finding(tmp_path: Path) -> None:
    chain = _chain(tmp_path)
    for info in chain.store.list(chain.key(paths.RUNS)):
        chain.store.delete(info.key)
    report = verify_chain(ChainStore(chain.store, CHAIN))
    assert [f.counter for f in report.findings if f.check == "run_index"] == [1, 2, 3]


def test_edited_claim_is_a_finding(tmp_path: Path) -> None:
    chain = _chain(tmp_path)
    key = chain.key(paths.RUNS, f"{chain.get(2).header.full_config_hash}.claim.json")
    data = chain.store.get(key).replace(b'"since_counter":1', b'"since_counter":0')
    chain.store.delete(key)
    chain.store.put_if_absent(key, data)
    report = verify_chain(ChainStore(chain.store, CHAIN))
    assert [(f.check, f.counter) for f in report.findings] == [("run_index", 2)], report.findings


def test_deleted_audit_trail_is_a_finding(tmp_path: Path) -> None:
    chain = _chain(tmp_path)
    events = chain.store.list(chain.key(paths.AUDIT))
    v2 = chain.get(2).version_dir
    for info in events:  # the events of v2's commit: "sealed" (before its head swap) and "committed"
        if AuditEvent.model_validate_json(chain.store.get(info.key)).version_dir == v2:
            chain.store.delete(info.key)
    report = verify_chain(ChainStore(chain.store, CHAIN))
    assert [(f.check, f.counter) for f in report.findings] == [("audit_missing", 2)], report.findings
    for info in events:
        chain.store.delete(info.key)
    assert {f.counter for f in verify_chain(ChainStore(chain.store, CHAIN)).findings} == {1, 2, 3}
