"""One commit: layout, fast-forward, conflicts and rollback, unknown swap outcomes, TensorBoard, payload reads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_chain_support import (  # noqa: F401  (fixtures)
    CHAIN,
    HookStore,
    build,
    chain_fixture,
    local_root_fixture,
    meta,
    payload,
)

import ml8s.chain.commit as commit_module
from ml8s.chain import ChainStore, ChainVersion, RetryPolicy, paths, verify_chain
from ml8s.errors import (
    ChainError,
    ChecksumError,
    CommitOutcomeUnknownError,
    ConflictError,
    NotFastForwardError,
    RetryableStoreError,
    VersionNotFoundError,
)
from ml8s.store import LocalStore, Store


@pytest.fixture(autouse=True)
def _no_resolve_delay(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(commit_module, "RESOLVE_DELAY_S", 0.0)


def keys(store: Store) -> list[str]:
    return [i.key for i in store.list(f"{paths.ROOT}/{CHAIN}/{paths.VERSIONS}")]


def test_init_is_idempotent(chain: ChainStore) -> None:
    genesis = chain.init()
    assert (genesis.counter, genesis.header.parent_block_hash, genesis.semver) == (0, "", "0.0.0")
    assert chain.init() == genesis
    assert ChainStore(chain.store, CHAIN).init() == genesis
    assert [e.event for e in chain.audit.events()] == ["init"]


def test_uninitialized_chain(chain: ChainStore) -> None:
    with pytest.raises(VersionNotFoundError, match="not initialized"):
        chain.head()


def test_commit_layout(chain: ChainStore, local_root: Path) -> None:
    genesis = chain.init()
    version = chain.commit(payload("a"), meta("a", step=5))
    assert (version.counter, version.header.parent_block_hash, version.semver) == (1, genesis.block_hash, "1.0.0")
    assert version.version_dir == f"v0000000001_1.0.0_{version.block_hash[:12]}"
    directory = local_root / paths.ROOT / CHAIN / paths.VERSIONS / version.version_dir
    assert sorted(p.relative_to(directory).as_posix() for p in directory.rglob("*") if p.is_file()) == [
        "block.pb",
        "content_hash.txt",
        "metadata.json",
        "payload/config.json",
        "payload/model.bin",
    ]
    assert (directory / "content_hash.txt").read_text() == version.content_hash + "\n"
    assert json.loads((directory / "metadata.json").read_text())["block_hash"] == version.block_hash
    head = json.loads((local_root / paths.ROOT / CHAIN / "chain.json").read_text())
    assert head == {
        "block_hash": version.block_hash,
        "chain_name": CHAIN,
        "counter": 1,
        "version_dir": version.version_dir,
    }
    assert chain.head() == version == chain.get(1)
    assert chain.fetch_payload(version, "model.bin") == payload("a")["model.bin"]
    assert (local_root / paths.ROOT / CHAIN / "runs" / f"{version.header.full_config_hash}.json").exists()


def test_commit_creates_the_chain(chain: ChainStore) -> None:
    assert chain.commit(payload("a"), meta("a")).counter == 1
    assert [v.counter for v in chain.list()] == [0, 1]


def test_stale_expected_parent_is_not_fast_forward(chain: ChainStore) -> None:
    genesis = chain.init()
    chain.commit(payload("a"), meta("a"), expected_parent=genesis.block_hash)
    before = keys(chain.store)
    with pytest.raises(NotFastForwardError, match="expected parent"):
        chain.commit(payload("b"), meta("b"), expected_parent=genesis.block_hash)
    assert keys(chain.store) == before
    assert chain.audit.events()[-1].event == "not_fast_forward"


def test_global_step_going_back_is_not_fast_forward(chain: ChainStore) -> None:
    chain.commit(payload("a"), meta("a", step=100))
    with pytest.raises(NotFastForwardError, match="global_step"):
        chain.commit(payload("b"), meta("b", step=99))


def _other_commits_first(chain: ChainStore) -> HookStore:
    """A store on which, just before our head swap, another committer wins."""
    rival = ChainStore(chain.store, CHAIN)
    fired: list[bool] = []

    def hook(key: str, data: bytes, token: str | None) -> None:
        if not fired:
            fired.append(True)
            rival.commit(payload("rival"), meta("rival"))

    return HookStore(chain.store, hook)


def test_conflict_rolls_back_the_loser(chain: ChainStore) -> None:
    chain.init()
    hooked = ChainStore(_other_commits_first(chain), CHAIN)
    with pytest.raises(ConflictError, match="lost"):
        hooked.commit(payload("me"), meta("me"))
    assert [v.header.run_id for v in chain.list()[1:]] == [meta("rival").run_id]
    assert all(chain.head().version_dir in k or "v0000000000" in k for k in keys(chain.store))
    last = chain.audit.events()[-1]
    assert (last.event, last.rolled_back) == ("conflict", True)
    assert verify_chain(chain, strict_orphans=True).ok


def test_conflict_with_expected_parent_is_not_fast_forward(chain: ChainStore) -> None:
    genesis = chain.init()
    hooked = ChainStore(_other_commits_first(chain), CHAIN)
    with pytest.raises(NotFastForwardError):
        hooked.commit(payload("me"), meta("me"), expected_parent=genesis.block_hash)
    assert verify_chain(chain, strict_orphans=True).ok


def test_retry_after_conflict_builds_on_the_new_head(chain: ChainStore) -> None:
    chain.init()
    version = ChainStore(_other_commits_first(chain), CHAIN).commit_with_retry(payload("me"), meta("me"))
    assert version.counter == 2 and chain.head() == version


def test_retry_gives_up(chain: ChainStore) -> None:
    chain.init()
    rival = ChainStore(chain.store, CHAIN)
    wins = iter(range(100))

    def always_beaten(key: str, data: bytes, token: str | None) -> None:
        name = f"rival-{next(wins)}"
        rival.commit(payload(name), meta(name))

    hooked = ChainStore(HookStore(chain.store, always_beaten), CHAIN)
    with pytest.raises(ConflictError, match="gave up after 3 attempts"):
        hooked.commit_with_retry(payload("me"), meta("me"), RetryPolicy(max_attempts=3, base_delay_s=0))
    assert chain.head().counter == 3 and verify_chain(chain, strict_orphans=True).ok


@pytest.mark.parametrize("landed", [True, False])
def test_unknown_outcome_resolved_as_won(chain: ChainStore, landed: bool) -> None:
    """The swap fails with an unknown outcome; whether it landed or not, the head ends up ours, once."""
    chain.init()
    calls: list[int] = []

    def flaky(key: str, data: bytes, token: str | None) -> None:
        calls.append(1)
        if len(calls) == 1:
            if landed:
                chain.store.put_if_match(key, data, token)
            raise RetryableStoreError("connection reset after sending")

    version = ChainStore(HookStore(chain.store, flaky), CHAIN).commit(payload("me"), meta("me"))
    assert chain.head() == version and len(calls) == (1 if landed else 2)
    assert "unknown_outcome_resolved" in [e.event for e in chain.audit.events()]
    assert verify_chain(chain, strict_orphans=True).ok


def test_unknown_outcome_head_moved_rolls_back(chain: ChainStore) -> None:
    chain.init()
    rival = ChainStore(chain.store, CHAIN)

    def lost_in_transit(key: str, data: bytes, token: str | None) -> None:
        rival.commit(payload("rival"), meta("rival"))  # meanwhile, another committer won
        raise RetryableStoreError("timeout")

    with pytest.raises(ConflictError, match="moved to another block"):
        ChainStore(HookStore(chain.store, lost_in_transit), CHAIN).commit(payload("me"), meta("me"))
    assert verify_chain(chain, strict_orphans=True).ok  # our upload is gone


def test_unknown_outcome_unresolved_keeps_the_upload(chain: ChainStore) -> None:
    chain.init()

    def down(key: str, data: bytes, token: str | None) -> None:
        raise RetryableStoreError("store unreachable")

    with pytest.raises(CommitOutcomeUnknownError):
        ChainStore(HookStore(chain.store, down), CHAIN).commit(payload("me"), meta("me"))
    report = verify_chain(chain)
    assert report.ok and len(report.orphans) == 1  # kept: it might still become the head
    assert chain.commit_with_retry(payload("me"), meta("me")).counter == 1  # the store is back: a retry lands


def test_a_retry_notice_prints_a_store_message_escaped(
    chain: ChainStore, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The notice of a retried store error went to stderr raw: a message (a store's, naming a key) holding an
    escape sequence, a carriage return, a newline or a bidirectional override cleared the terminal or forged an
    ``ml8s:`` line. It is escaped as the CLI's error lines are."""
    chain.init()
    real, calls = commit_module.commit, []

    def flaky(*args: object, **kwargs: object) -> ChainVersion:
        calls.append(1)
        if len(calls) == 1:
            raise RetryableStoreError("key a\x1b[2J\rb\nml8s: chain 'x': committed v9\u202ecba\u2028done")
        return real(*args, **kwargs)

    monkeypatch.setattr("ml8s.chain.retry.commit", flaky)
    quick = RetryPolicy(base_delay_s=0.0, max_delay_s=0.0)
    assert chain.commit_with_retry(payload("me"), meta("me"), quick).counter == 1
    err = capsys.readouterr().err
    assert not {"\x1b", "\r", "\u202e", "\u2028"} & set(err), err
    assert [line for line in err.splitlines() if line.startswith("ml8s:")] == [err.splitlines()[0]], err
    assert "key a\\x1b[2J\\rb\n  ml8s: chain 'x': committed v9\\u202ecba\\u2028done" in err, err


def test_tensorboard_uploaded_after_the_win(chain: ChainStore, tmp_path: Path) -> None:
    logs = tmp_path / "tb"
    (logs / "train").mkdir(parents=True)
    (logs / "train" / "events.out.tfevents.1").write_bytes(b"events")
    version = chain.commit(payload("a"), meta("a", tensorboard_logdir=str(logs)))
    assert version.header.tensorboard_logdir == "tensorboard/v0000000001"
    assert chain.store.get(chain.key("tensorboard/v0000000001/train/events.out.tfevents.1")) == b"events"


def test_a_recommit_uploads_the_tensorboard_files_a_kill_after_the_win_kept_off_the_chain(
    chain: ChainStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A committer killed after its head swap, before its TensorBoard upload, left the version without its logs;
    its re-run's commit returned the version (the run is recorded) and uploaded nothing, so they never got there.
    It now uploads the files that are not there, and a further re-run writes nothing."""
    logs = tmp_path / "tb"
    (logs / "train").mkdir(parents=True)
    for name in ("events.out.tfevents.1", "events.out.tfevents.2"):
        (logs / "train" / name).write_bytes(name.encode())
    real = commit_module.upload_tensorboard

    def killed(chain: ChainStore, version: ChainVersion, local_dir: str, **options: bool) -> list[str]:
        real(chain, version, local_dir, **options)
        raise KeyboardInterrupt("killed with the upload half done")

    monkeypatch.setattr(commit_module, "upload_tensorboard", killed)
    first = logs / "train" / "events.out.tfevents.1"
    with pytest.raises(KeyboardInterrupt):
        chain.commit(payload("a"), meta("a", tensorboard_logdir=str(logs)))
    monkeypatch.undo()
    tb = chain.key("tensorboard/v0000000001/train")
    chain.store.delete(f"{tb}/events.out.tfevents.2")  # the kill came before the second file landed
    landed = chain.store.list(tb)
    version = chain.commit(payload("a"), meta("a", tensorboard_logdir=str(logs)))
    assert version.counter == 1 and chain.store.get(f"{tb}/events.out.tfevents.2") == b"events.out.tfevents.2"
    assert [i for i in chain.store.list(tb) if i.key.endswith(".1")] == landed  # the one there is not rewritten
    last = chain.audit.events()[-1]
    assert (last.event, last.detail) == (
        "already_committed",
        "1 TensorBoard file(s) missing (a crash after the swap): uploaded",
    )
    before = (keys(chain.store), len(chain.audit.events()), chain.store.list(tb))
    first.write_bytes(b"not uploaded again")
    assert chain.commit(payload("a"), meta("a", tensorboard_logdir=str(logs))).counter == 1
    assert (keys(chain.store), len(chain.audit.events()), chain.store.list(tb)) == before


def test_loser_uploads_no_tensorboard(chain: ChainStore, tmp_path: Path) -> None:
    logs = tmp_path / "tb"
    logs.mkdir()
    (logs / "events").write_bytes(b"x")
    chain.init()
    with pytest.raises(ConflictError):
        ChainStore(_other_commits_first(chain), CHAIN).commit(payload("me"), meta("me", tensorboard_logdir=str(logs)))
    assert chain.store.list(chain.key(paths.TENSORBOARD)) == []


def test_fetch_payload_detects_corruption(chain: ChainStore, local_root: Path) -> None:
    version = chain.commit(payload("a"), meta("a"))
    path = local_root / paths.ROOT / CHAIN / paths.VERSIONS / version.version_dir / "payload" / "model.bin"
    path.write_bytes(b"X" + path.read_bytes()[1:])
    with pytest.raises(ChecksumError) as caught:
        chain.fetch_payload(version, "model.bin")
    assert caught.value.check == "payload_hash"
    path.write_bytes(b"short")
    with pytest.raises(ChecksumError, match="bytes"):
        chain.fetch_payload(version, "model.bin")
    with pytest.raises(VersionNotFoundError):
        chain.fetch_payload(version, "nope.bin")


@pytest.mark.parametrize("name", ["../evil", "a//b", ".hidden", "a:b", "a|b", ""])
def test_bad_payload_names_are_refused(chain: ChainStore, name: str) -> None:
    with pytest.raises(ValueError):
        chain.commit({name: b"x"}, meta("a"))


def test_empty_payload_is_refused(chain: ChainStore) -> None:
    with pytest.raises(ChainError, match="at least one"):
        chain.commit({}, meta("a"))


def test_get_and_list(chain: ChainStore) -> None:
    versions = build(chain, 4)
    assert [v.counter for v in versions] == [0, 1, 2, 3, 4]
    assert chain.get(2) == versions[2]
    fresh = ChainStore(LocalStore(chain.store.root_uri.removeprefix("file://")), CHAIN)
    assert fresh.list() == versions  # found again from the store alone
    with pytest.raises(VersionNotFoundError):
        chain.get(5)


def test_steps_since_parent_count_from_the_head(chain: ChainStore) -> None:
    chain.commit(payload("a"), meta("a", step=100))
    b = chain.commit(payload("b"), meta("b", steps_since_parent=30))
    c = chain.commit(payload("c"), meta("c"))  # neither: the parent's step
    assert (b.global_step, c.global_step) == (130, 130)
    with pytest.raises(ValueError, match="not both"):
        meta("d", step=1, steps_since_parent=1)


def test_verify_between_the_swap_and_the_committed_event_finds_nothing(
    chain: ChainStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A verifier running while a commit lands (after its head swap, before its "committed" event) must not
    report the new head as audit_missing: the commit records a "sealed" event before it swaps."""
    chain.init()
    seen = []
    record = commit_module.runindex.record

    def verify_then_record(chain_: object, version: object) -> None:
        seen.append(verify_chain(ChainStore(chain.store, CHAIN), payloads=False))
        record(chain_, version)  # type: ignore[arg-type]

    monkeypatch.setattr(commit_module.runindex, "record", verify_then_record)
    version = chain.commit(payload("a"), meta("a"))
    assert len(seen) == 1 and seen[0].ok, seen[0].findings
    assert [e.event for e in chain.audit.events()][-2:] == ["sealed", "committed"]
    assert verify_chain(chain).ok and chain.head().block_hash == version.block_hash
