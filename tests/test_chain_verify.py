"""Tamper detection: every kind of tampering is found by verify_chain and named by its check."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from test_chain_support import (  # noqa: F401  (fixtures)
    build,
    chain_fixture,
    forge,
    local_root_fixture,
    meta,
    payload,
    set_head,
    version_path,
)

from ml8s.chain import ChainHead, ChainStore, ChainVersion, find_corruption, paths, verify_chain
from ml8s.errors import ChainCorruptionError

Tamper = Callable[[Path, list[ChainVersion]], None]


def flip_payload_byte(root: Path, v: list[ChainVersion]) -> None:
    path = version_path(root, v[3].version_dir) / "payload" / "model.bin"
    data = bytearray(path.read_bytes())
    data[100] ^= 0x01
    path.write_bytes(bytes(data))


def truncate_payload(root: Path, v: list[ChainVersion]) -> None:
    path = version_path(root, v[3].version_dir) / "payload" / "model.bin"
    path.write_bytes(path.read_bytes()[:-1])


def edit_header_field(root: Path, v: list[ChainVersion]) -> None:
    """global_step edited in block.pb in place, the recorded block hash left as it was."""
    from ml8s.chain.wire import encode_block

    edited = v[3].block.model_copy(update={"header": v[3].header.model_copy(update={"global_step": 31})})
    (version_path(root, v[3].version_dir) / paths.BLOCK).write_bytes(encode_block(edited))


def break_parent_link(root: Path, v: list[ChainVersion]) -> None:
    """v4 re-pointed at v2 and re-hashed consistently (directory renamed): v5 no longer finds its parent."""
    forge(root, v[4], parent_block_hash=v[2].block_hash)


def forge_rehashed_block(root: Path, v: list[ChainVersion]) -> None:
    """v3's model replaced, every hash of v3 recomputed: only v4's parent link gives it away."""
    forge(root, v[3], new_payload=payload("evil"))


def skip_counter(root: Path, v: list[ChainVersion]) -> None:
    set_head(root, forge(root, v[6], counter=7))


def duplicate_counter(root: Path, v: list[ChainVersion]) -> None:
    set_head(root, forge(root, v[6], counter=5))


def step_backwards(root: Path, v: list[ChainVersion]) -> None:
    set_head(root, forge(root, v[6], global_step=1))


def reorder_versions(root: Path, v: list[ChainVersion]) -> None:
    """v3 and v4 swap places (their directories trade names)."""
    a, b = version_path(root, v[3].version_dir), version_path(root, v[4].version_dir)
    a.rename(a.with_name("swap"))
    b.rename(a)
    a.with_name("swap").rename(b)


def delete_middle_version(root: Path, v: list[ChainVersion]) -> None:
    shutil.rmtree(version_path(root, v[3].version_dir))


def delete_genesis(root: Path, v: list[ChainVersion]) -> None:
    shutil.rmtree(version_path(root, v[0].version_dir))


def swap_payloads(root: Path, v: list[ChainVersion]) -> None:
    a = version_path(root, v[3].version_dir) / "payload" / "model.bin"
    b = version_path(root, v[4].version_dir) / "payload" / "model.bin"
    data_a, data_b = a.read_bytes(), b.read_bytes()
    a.write_bytes(data_b)
    b.write_bytes(data_a)


def edit_metadata_json(root: Path, v: list[ChainVersion]) -> None:
    path = version_path(root, v[3].version_dir) / paths.METADATA
    data = json.loads(path.read_text())
    data["header"]["global_step"] = 31
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


def edit_content_hash_txt(root: Path, v: list[ChainVersion]) -> None:
    (version_path(root, v[3].version_dir) / paths.CONTENT_HASH).write_text("0" * 64 + "\n")


def add_extra_file(root: Path, v: list[ChainVersion]) -> None:
    (version_path(root, v[3].version_dir) / "payload" / "backdoor.bin").write_bytes(b"x")


def head_to_missing_version(root: Path, v: list[ChainVersion]) -> None:
    (root / paths.ROOT / "line" / paths.HEAD).write_text(
        json.dumps(
            {
                "chain_name": "line",
                "counter": 99,
                "block_hash": "0" * 64,
                "version_dir": "v0000000099_9.9.9_000000000000",
            }
        )
    )


def roll_back_two(root: Path, v: list[ChainVersion]) -> None:
    set_head(root, v[4])


def fork_from_v4(root: Path, v: list[ChainVersion]) -> None:
    """A rewritten history: v5', v6' built on v4, the head moved to v6'."""
    v5 = forge(root, v[5], keep_original=True, new_payload=payload("alt5"))
    set_head(root, forge(root, v[6], keep_original=True, parent_block_hash=v5.block_hash))


# tamper -> (checks that must be reported, counter of the lowest finding). A committed version that a
# rewrite removes from the chain is named too (committed_off_chain: the run index and audit trail say it won).
CASES: dict[str, tuple[Tamper, set[str], int | None]] = {
    "payload byte flip": (flip_payload_byte, {"payload_hash"}, 3),
    "truncated payload": (truncate_payload, {"payload_size"}, 3),
    "header field edit": (edit_header_field, {"header_hash"}, 3),
    "broken parent link": (break_parent_link, {"parent_link", "committed_off_chain"}, 3),
    "re-hashed forged block": (forge_rehashed_block, {"parent_link", "committed_off_chain"}, 3),
    "skipped counter": (skip_counter, {"counter_sequence", "committed_off_chain"}, 6),
    "duplicated counter": (duplicate_counter, {"counter_sequence"}, 5),
    "non-monotonic step": (step_backwards, {"global_step"}, 6),
    "reordered versions": (reorder_versions, {"dir_name"}, 3),
    "deleted middle version": (delete_middle_version, {"missing_parent", "committed_off_chain"}, 3),
    "truncated history": (delete_genesis, {"missing_parent", "committed_off_chain"}, 0),
    "swapped payloads": (swap_payloads, {"payload_hash"}, 3),
    "metadata.json inconsistent": (edit_metadata_json, {"metadata_json"}, 3),
    "content_hash.txt inconsistent": (edit_content_hash_txt, {"content_hash_txt"}, 3),
    "extra file": (add_extra_file, {"extra_file"}, 3),
    "head to a missing version": (head_to_missing_version, {"head"}, 99),
    "head rolled back by two": (roll_back_two, {"fork"}, 5),
    "forked history": (fork_from_v4, {"fork"}, 5),
}


@pytest.fixture
def versions(chain: ChainStore) -> list[ChainVersion]:
    return build(chain, 6)


def test_intact_chain_verifies(chain: ChainStore, versions: list[ChainVersion]) -> None:
    report = verify_chain(chain, known_head=versions[-1].block_hash, strict_orphans=True)
    assert report.ok, report.findings
    assert report.chain == tuple(v.version_dir for v in versions) and report.head_counter == 6
    assert find_corruption(chain) is None


@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_tampering_is_detected_and_named(
    chain: ChainStore, versions: list[ChainVersion], local_root: Path, case: str
) -> None:
    tamper, expected, counter = CASES[case]
    tamper(local_root, versions)
    report = verify_chain(ChainStore(chain.store, chain.name))
    assert not report.ok
    assert expected <= report.checks, report.findings
    assert report.findings[0].counter == counter, report.findings
    with pytest.raises(ChainCorruptionError) as caught:
        report.raise_for_findings()
    assert caught.value.check == report.findings[0].check


def test_find_corruption_names_the_version(chain: ChainStore, versions: list[ChainVersion], local_root: Path) -> None:
    flip_payload_byte(local_root, versions)
    assert find_corruption(chain) == versions[3]


@pytest.mark.parametrize("target", [5, 4])
def test_rollback_is_caught_by_known_head(
    chain: ChainStore, versions: list[ChainVersion], local_root: Path, target: int
) -> None:
    set_head(local_root, versions[target])
    report = verify_chain(chain, known_head=versions[6].block_hash)
    assert "known_head" in report.checks
    assert any("rolled back" in f.reason for f in report.findings)


def test_forked_head_is_caught_by_known_head(chain: ChainStore, versions: list[ChainVersion], local_root: Path) -> None:
    """A sibling of the head replaces it: no longer history looks different, only a head seen before tells."""
    set_head(local_root, forge(local_root, versions[6], keep_original=True, new_payload=payload("alt6")))
    # The old head looks like a commit's loser, but the run index and the audit trail say it won.
    assert "committed_off_chain" in verify_chain(chain).checks
    report = verify_chain(chain, known_head=versions[6].block_hash)
    assert "known_head" in report.checks and any("forked" in f.reason for f in report.findings)
    assert "fork" in verify_chain(chain, strict_orphans=True).checks


def test_payloads_false_skips_payload_bytes(chain: ChainStore, versions: list[ChainVersion], local_root: Path) -> None:
    flip_payload_byte(local_root, versions)
    assert verify_chain(chain, payloads=False).ok
    truncate_payload(local_root, versions)
    assert verify_chain(chain, payloads=False).checks == {"payload_size"}


def test_incomplete_versions_are_not_findings(
    chain: ChainStore, versions: list[ChainVersion], local_root: Path
) -> None:
    partial = version_path(local_root, "v0000000007_1.0.6_abcdefabcdef") / "payload"
    partial.mkdir(parents=True)
    (partial / "model.bin").write_bytes(b"half")
    report = verify_chain(chain, strict_orphans=True)
    assert report.ok and report.incomplete == ("v0000000007_1.0.6_abcdefabcdef",)


def test_versions_committed_while_verifying_are_ahead(
    chain: ChainStore, versions: list[ChainVersion], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two commits land between verify's head read and its listing: ahead, not a rolled-back branch."""
    real, rival, calls = chain.read_head, ChainStore(chain.store, chain.name), list[int]()

    def read_head_then_commit() -> tuple[ChainHead, str] | None:
        pointer = real()
        if not calls:
            calls.append(1)
            for i in (7, 8):
                rival.commit(payload(f"v{i}"), meta(f"v{i}", step=10 * i))
        return pointer

    monkeypatch.setattr(chain, "read_head", read_head_then_commit)
    report = verify_chain(chain)
    assert report.ok and report.head_counter == 6 and len(report.ahead) == 2 and report.orphans == ()
