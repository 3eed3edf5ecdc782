"""Continuous training (issue 13): warm starts from the chain, byte for byte, reproducible, refusing bad lineages.

Every run is an `ml8s run` in its own process; a lineage is a cold start on generation 0 of a small dataset,
then warm starts from the head, each after one more generation (a new file) arrived under DATA_ROOT.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
from cli_support import ml8s_many
from conftest import write_small_churn
from forked_cli import ML8S, forked_ml8s

from ml8s.chain import ChainStore, PromotionLog, ReadTrust, verify_chain
from ml8s.contract import layout
from ml8s.errors import ConfigError, Ml8sError, WarmStartNotFoundError
from ml8s.features.warm import read_generations
from ml8s.identity.variables import normalize_value
from ml8s.lineage import read_training_state
from ml8s.lineage.parent import find_parent
from ml8s.pipeline.bootstrap import bootstrap
from ml8s.pipeline.chain_commit import ChainCommit
from ml8s.pipeline.features import compute_features
from ml8s.pipeline.promote import _compare, promote
from ml8s.pipeline.snapshot import snapshot
from ml8s.store import LocalStore

CHAIN = "ml8s-model"


def _env(data: Path, root: Path, **extra: str) -> dict[str, str]:
    drop = ("FORCE_RERUN", "CHAIN_NAME", "WARM_START", "MLFLOW_TRACKING_URI", "WARM_START_ROOT_URI")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env.update(DATA_ROOT=str(data), TARGET_COLUMN="churned", PIPELINE_ROOT_URI=str(root))
    env.update(EPOCHS="2", HIDDEN_UNITS="16", BATCH_SIZE="64")
    env.update(extra)
    return env


def _ml8s(env: dict[str, str], *args: str, code: int = 0, fresh: bool = False) -> subprocess.CompletedProcess[str]:
    """``ml8s *args`` in a fork of a warm interpreter (forked_cli), or in a fresh process when ``fresh``."""
    proc = forked_ml8s(args, env, timeout=300, fresh=fresh)
    assert proc.returncode == code, proc.stderr[-3000:]
    return proc


def add_generation(data: Path, g: int, rows: int = 120, columns: str = "") -> Path:
    """A new file under DATA_ROOT: rows like generation 0's, drifting (plans and churn shift with g)."""
    header = columns or "customer_id,tenure,monthly_charges,plan,auto_pay,churned"
    plans = ["basic", "plus", "pro"]
    lines = [header]
    for i in range(rows):
        n = 7919 * g + i
        tenure = str((n * 11) % 72)
        charges = f"{25 + (n * 17 + 9 * g) % 100}.{n % 10}"
        plan = plans[(n + g) % 3]
        churned = "yes" if (n * 11) % 72 < 12 + 3 * g else "no"
        cells = [f"G{g}-{i:05d}", tenure, charges, plan, "true" if n % 3 else "false", churned]
        lines.append(",".join(cells[: len(header.split(","))]))
    path = data / f"gen-{g:03d}.csv"
    path.write_text("\n".join(lines) + "\n")
    return path


def _head(root: Path) -> tuple[int, str]:
    head = ChainStore(LocalStore(str(root)), CHAIN).head()
    return head.counter, head.block_hash


def _payload(root: Path, counter: int) -> dict[str, bytes]:
    chain = ChainStore(LocalStore(str(root)), CHAIN)
    version = chain.get(counter)
    return {f.name: chain.fetch_payload(version, f.name) for f in version.header.files}


@dataclass(frozen=True)
class Lineage:
    data: Path
    root: Path
    run_ids: tuple[str, ...]


@pytest.fixture(scope="module")
def lineage(tmp_path_factory: pytest.TempPathFactory) -> Lineage:
    """v1 cold on generation 0, then v2..v5 each warm-started from the head after one more generation."""
    base = tmp_path_factory.mktemp("lineage")
    data, root = write_small_churn(base / "data", rows=300, files=1), base / "root"
    runs = [json.loads(_ml8s(_env(data, root, WARM_START="head"), "run").stdout)["run_id"]]  # no head yet: cold
    for g in range(1, 5):
        add_generation(data, g)
        runs.append(json.loads(_ml8s(_env(data, root, WARM_START="head"), "run").stdout)["run_id"])
    return Lineage(data, root, tuple(runs))


def test_a_lineage_continues_its_parent_and_reproduces_five_of_five(lineage: Lineage) -> None:
    chain = ChainStore(LocalStore(str(lineage.root)), CHAIN)
    assert verify_chain(chain).ok
    previous = None
    for counter in range(1, 6):
        version = chain.get(counter)
        assert version.header.run_id == lineage.run_ids[counter - 1]
        state = read_training_state(chain.fetch_payload(version, layout.PAYLOAD_TRAINING_STATE), f"v{counter}")
        assert len(state.generations) == counter and state.trainings == counter
        assert state.parent_content_hash == (previous.content_hash if previous else None)
        assert (state.sampler is None) == (counter == 1)  # the cold start trains on its matrix, not the history
        if previous is not None:
            parent = read_training_state(chain.fetch_payload(previous, layout.PAYLOAD_TRAINING_STATE), "parent")
            assert state.global_step > parent.global_step
            assert state.lineage_id == chain.get(1).header.full_config_hash  # the cold start's names the lineage
            for theirs, ours in zip(parent.generations, state.generations, strict=False):
                assert (ours.index, ours.partition) == (theirs.index, theirs.partition)
                assert ours.files and ours.files == (theirs.files or ours.files)
        else:
            assert state.lineage_id is None and state.generations[0].files == []  # identity-free cold state
        previous = version
    history = list((lineage.root / "ml8s_lineages").glob("*/history-*/gen-*.f32"))
    assert len(history) == 5  # generation 0 encoded once by the first warm start, then one per version

    # one process for both commands: they only read the root (ml8s, torch and MLflow imported once)
    commands = [("chain", "reproduce", "--from", "0"), ("verify", lineage.run_ids[-1])]
    proc, last = ml8s_many(commands, _env(lineage.data, lineage.root))
    assert (proc.returncode, last.returncode) == (0, 0), proc.stderr[-3000:] + last.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert len(lines) == 5 and all(line.endswith("MATCH") for line in lines), proc.stdout
    assert "5/5 versions reproduced byte for byte" in proc.stderr
    assert "RESULT: PASS" in last.stdout


def test_reproduce_names_a_version_that_does_not_match(lineage: Lineage) -> None:
    """A changed data file of v5's generation: v5 is reported (NOT REPRODUCED, naming the data), exit 1."""
    env = _env(lineage.data, lineage.root)
    proc = forked_ml8s(["chain", "reproduce", "--from", "3"], env, timeout=300)
    assert proc.returncode == 0 and proc.stdout.count("MATCH") == 2, proc.stdout + proc.stderr
    changed = lineage.data / "gen-004.csv"
    original = changed.read_bytes()
    try:
        changed.write_bytes(original + b"X99999,5,50.5,basic,true,no\n")
        proc = forked_ml8s(["chain", "reproduce", "--from", "3"], env, timeout=300)
    finally:
        changed.write_bytes(original)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    (line,) = [line for line in proc.stdout.splitlines() if line.startswith("v5")]
    assert "NOT REPRODUCED" in line and "changed" in line, line
    assert "0/1" not in proc.stderr and "1/2 versions reproduced" in proc.stderr


def test_two_processes_from_one_parent_commit_identical_payloads_and_a_killed_run_heals(tmp_path: Path) -> None:
    data = write_small_churn(tmp_path / "data", rows=300, files=1)
    first = tmp_path / "a"
    _ml8s(_env(data, first), "run")
    roots = [first, tmp_path / "b", tmp_path / "killed"]
    for other in roots[1:]:
        shutil.copytree(first, other)
    add_generation(data, 1)
    for root, fresh in zip(roots[:2], (False, True), strict=True):  # the second with its own hash seed
        _ml8s(_env(data, root, WARM_START="head"), "run", fresh=fresh)
    a, b = _payload(roots[0], 2), _payload(roots[1], 2)
    assert sorted(a) == sorted(b) and all(a[name] == b[name] for name in a), [n for n in a if a[n] != b.get(n)]

    killed = roots[2]
    proc = subprocess.Popen([ML8S, "run"], env=_env(data, killed, WARM_START="head"), stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    for line in proc.stderr:
        if "[train]" in line:
            break
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    assert _head(killed)[0] == 1
    _ml8s(_env(data, killed, WARM_START="head"), "run")
    assert _payload(killed, 2) == a
    assert (
        ChainStore(LocalStore(str(killed)), CHAIN).head().content_hash
        == ChainStore(LocalStore(str(first)), CHAIN).head().content_hash
    )


@pytest.fixture(scope="module")
def warm_root(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A cold v1 and a warm v2 (so the lineage has a record history), to copy and break."""
    base = tmp_path_factory.mktemp("warm")
    data, root = write_small_churn(base / "data", rows=300, files=1), base / "root"
    _ml8s(_env(data, root), "run")
    add_generation(data, 1)
    _ml8s(_env(data, root, WARM_START="head"), "run")
    return data, root


def _truncate_history(data: Path, root: Path) -> None:
    (record,) = sorted(root.glob("ml8s_lineages/*/history-*/gen-000001.f32"))
    with record.open("r+b") as handle:
        handle.truncate(record.stat().st_size - 4)


def _deleted_record(data: Path, root: Path) -> None:
    """Every warm start failed RECORDS_GENERATION_MISSING, saying nothing of the history to delete."""
    (record,) = sorted(root.glob("ml8s_lineages/*/history-*/gen-000001.f32"))
    record.unlink()


def _new_file_lacking_a_column(data: Path, root: Path) -> None:
    add_generation(data, 2, columns="customer_id,tenure,monthly_charges,plan,churned")


def _parent_file_changed(data: Path, root: Path) -> None:
    with (data / "gen-001.csv").open("a") as handle:
        handle.write("X1,3,30.5,basic,true,no\n")


def _new_file_without_a_label(data: Path, root: Path) -> None:
    (data / "gen-002.csv").write_text(
        "customer_id,tenure,monthly_charges,plan,auto_pay,churned\nX1,3,30.5,basic,true,\n"
    )


def _new_file_with_a_new_class(data: Path, root: Path) -> None:
    path = add_generation(data, 2)
    path.write_text(path.read_text().replace(",no\n", ",maybe\n", 1))


def _new_file_with_a_bucket_name(data: Path, root: Path) -> None:
    """A cold start refuses the category '__missing__'; a new generation's was read as a missing plan."""
    path = add_generation(data, 2)
    path.write_text(path.read_text().replace(",basic,", ",__missing__,", 1))


def _bare_head(data: Path, root: Path) -> None:
    weights = next(root.glob("ml8s_training_runs/*/model/model_native.safetensors"))
    _ml8s(_env(data, root), "chain", "commit", "--payload", str(weights), "--steps", "1")


@pytest.mark.parametrize(
    ("breaks", "extra", "code", "says"),
    [
        (_truncate_history, {}, "RECORDS_TRUNCATED", "gen-000001.f32"),
        (
            _deleted_record,
            {},
            "RECORDS_GENERATION_MISSING",
            "gen-000001.f32 does not exist; expected generation 1. The lineage's record history is derived data",
        ),
        (_new_file_lacking_a_column, {}, "LINEAGE_DATA_CHANGED", "lacks column(s) ['auto_pay']"),
        (_parent_file_changed, {}, "LINEAGE_DATA_CHANGED", "gen-001.csv changed"),
        (_new_file_without_a_label, {}, "LINEAGE_DATA_CHANGED", "generation 2 (gen-002.csv) has no row with a target"),
        (_new_file_with_a_new_class, {}, "LINEAGE_DATA_CHANGED", "has 'maybe', not one of the lineage's classes"),
        (
            _new_file_with_a_bucket_name,
            {},
            "LINEAGE_DATA_CHANGED",
            "column 'plan' has '__missing__' in row ",
        ),
        (_bare_head, {}, "LINEAGE_ERROR", "has no training_state.safetensors"),
        (None, {"WARM_START": "0123456789abcdef"}, "WARM_START_NOT_FOUND", "matches no version"),
        (None, {"WARM_START": "1"}, "LINEAGE_STALE_PARENT", "the head is v2"),
        (None, {"HIDDEN_UNITS": "8"}, "LINEAGE_ERROR", "HIDDEN_UNITS='8' (parent: '16')"),
        (None, {"WARM_START": "latest"}, "CONFIG_ERROR", "WARM_START='latest' is invalid"),
    ],
    ids=[
        "truncated-records",
        "deleted-records",
        "schema-mismatch",
        "parent-data-changed",
        "no-label",
        "new-class",
        "bucket-name",
        "no-training-state",
        "unknown-hash",
        "stale-parent",
        "other-architecture",
        "malformed",
    ],
)
def test_bad_lineage_inputs_fail_before_any_write(
    warm_root: tuple[Path, Path], tmp_path: Path, breaks: object, extra: dict[str, str], code: str, says: str
) -> None:
    data, root = tmp_path / "data", tmp_path / "root"
    shutil.copytree(warm_root[0], data)
    shutil.copytree(warm_root[1], root)
    if callable(breaks):
        breaks(data, root)
    if not (data / "gen-002.csv").exists():
        add_generation(data, 2)
    runs = sorted(p.name for p in (root / layout.RUNS_DIR).iterdir())
    head = _head(root)
    proc = forked_ml8s(["run"], _env(data, root, **{"WARM_START": "head", **extra}), timeout=300)
    errors = [line for line in proc.stderr.splitlines() if line.startswith("ml8s: ")]
    assert proc.returncode == 1 and len(errors) == 1, proc.stderr[-2000:]
    assert errors[0].startswith(f"ml8s: {code}: ") and says in errors[0], errors[0]
    assert "Traceback" not in proc.stderr
    assert sorted(p.name for p in (root / layout.RUNS_DIR).iterdir()) == runs  # nothing under any ARTIFACT_ROOT
    assert _head(root) == head


def test_a_corrupt_record_file_names_the_history_to_delete_and_that_heals_it(
    warm_root: tuple[Path, Path], tmp_path: Path
) -> None:
    """A record file of the right size with other bytes passed bootstrap; training then failed
    RECORDS_CHECKSUM_MISMATCH on every run, saying nothing of what to do. The error names the file and the history
    to delete; once deleted, the next run rebuilds it from DATA_ROOT (checked against the parent's hashes)."""
    data, root = tmp_path / "data", tmp_path / "root"
    shutil.copytree(warm_root[0], data)
    shutil.copytree(warm_root[1], root)
    (record,) = sorted(root.glob("ml8s_lineages/*/history-*/gen-000001.f32"))
    record.chmod(0o644)
    damaged = bytearray(record.read_bytes())
    damaged[len(damaged) // 2] ^= 0x40
    record.write_bytes(bytes(damaged))
    add_generation(data, 2)
    head = _head(root)
    proc = forked_ml8s(["run"], _env(data, root, WARM_START="head"), timeout=300)
    errors = [line for line in proc.stderr.splitlines() if line.startswith("ml8s: ")]
    assert proc.returncode == 1 and len(errors) == 1, proc.stderr[-2000:]
    assert errors[0].startswith("ml8s: RECORDS_CHECKSUM_MISMATCH: ") and "gen-000001.f32 has sha256" in errors[0]
    history = record.parent
    assert f"delete the history file://{history}/ (every file under it) and run again" in errors[0], errors[0]
    assert "Traceback" not in proc.stderr and _head(root) == head
    shutil.rmtree(history)  # what the message says
    _ml8s(_env(data, root, WARM_START="head"), "run")
    assert _head(root)[0] == head[0] + 1 and record.read_bytes() != bytes(damaged)


def test_a_new_generation_with_a_column_the_lineage_does_not_know_is_read_without_it(
    warm_root: tuple[Path, Path], tmp_path: Path
) -> None:
    """docs/continuous.md: a column the lineage does not know is ignored. Bootstrap let such a generation through,
    then the snapshot step read every generation as one dataset and stopped with DATA_ERROR ("has columns [...];
    expected the columns of part-000.csv"): a warm start's data is checked by bootstrap, file by file."""
    data, root = tmp_path / "data", tmp_path / "root"
    shutil.copytree(warm_root[0], data)
    shutil.copytree(warm_root[1], root)
    path = add_generation(data, 2)
    lines = path.read_text().splitlines()
    path.write_text("\n".join([f"{lines[0]},region", *(f"{line},eu" for line in lines[1:])]) + "\n")
    ctx = bootstrap(_env(data, root, WARM_START="head"))
    assert ctx.spec.lineage is not None and ctx.spec.lineage.new == 1
    snapshot(ctx, ctx.open_store())
    assert json.loads((root / layout.RUNS_DIR / ctx.run_id / layout.CONFIG_SNAPSHOT).read_bytes())
    compute_features(ctx.spec, str(tmp_path / "features"))
    generations = read_generations(str(tmp_path / "features"))
    assert [g.index for g in generations] == [0, 1, 2]
    assert generations[2].records_sha256 and generations[2].records  # its rows encoded, without the new column


def test_a_warm_start_with_no_new_generation_is_judged_on_the_fixed_holdout(
    warm_root: tuple[Path, Path], tmp_path: Path
) -> None:
    """A racer that lost its parent retrains from the winner on no new generation (so does a pinned WARM_START at
    the head). Its promotion measured a "new data" part of no rows and rejected it: "cannot be compared on the
    same rows: no held-out rows to evaluate on (TEST_SIZE holds none out)", a decision on what did not happen."""
    data, root = tmp_path / "data", tmp_path / "root"
    shutil.copytree(warm_root[0], data)
    shutil.copytree(warm_root[1], root)
    ctx = bootstrap(_env(data, root, WARM_START="2"))  # v2, the head, trained on every generation
    assert ctx.spec.lineage is not None and ctx.spec.lineage.new == 0
    chain = ChainStore(LocalStore(str(root)), CHAIN)
    action, rule = _compare(ctx, chain, chain.get(2), chain.get(1))
    assert "fixed holdout (generation(s) 0, " in rule and "new data" not in rule and "cannot be compared" not in rule
    assert action == "promote", rule


def test_a_new_generation_of_one_row_is_not_measured_and_the_fixed_holdout_decides(
    warm_root: tuple[Path, Path], tmp_path: Path
) -> None:
    """A new generation of one row holds none out: its promotion rejected the candidate, "cannot be compared on
    the same rows: no held-out rows to evaluate on", whatever the fixed holdout said."""
    data, root = tmp_path / "data", tmp_path / "root"
    shutil.copytree(warm_root[0], data)
    shutil.copytree(warm_root[1], root)
    add_generation(data, 2, rows=1)
    ctx = bootstrap(_env(data, root, WARM_START="head"))
    assert ctx.spec.lineage is not None and ctx.spec.lineage.new == 1
    chain = ChainStore(LocalStore(str(root)), CHAIN)
    action, rule = _compare(ctx, chain, chain.get(2), chain.get(1))
    assert "new data (generation(s) 2): no held-out row (a generation of one row holds none out)" in rule, rule
    assert "fixed holdout (generation(s) 0, " in rule and action == "promote", rule


def test_a_late_decision_never_serves_a_version_older_than_the_served_one(
    warm_root: tuple[Path, Path], tmp_path: Path
) -> None:
    """v1's run stopped between its commit and its promotion; v2 was committed and promoted; v1's run is run again
    (a task retry): its gate hit decides v1 late. It was weighed as a candidate against v2 (here: a cold start,
    promoted as a new lineage) and served instead of the newer v2. It is rejected, saying why."""
    data, root = tmp_path / "data", tmp_path / "root"
    shutil.copytree(warm_root[0], data)
    shutil.copytree(warm_root[1], root)
    shutil.rmtree(root / "ml8s_chain" / CHAIN / "promotions")  # neither run got to its decision ...
    chain = ChainStore(LocalStore(str(root)), CHAIN)
    first, second = chain.get(1), chain.get(2)
    PromotionLog(chain).decide("promote", second, "manual: v2's run decided first", None)  # ... v2's did
    ctx = bootstrap(_env(data, root))
    late = ChainCommit.of(CHAIN, first)
    decided = promote(ctx, ctx.open_store(), late).decision
    assert (decided.action, decided.counter, decided.served_counter) == ("reject", 1, 2), decided.rule
    assert "v2, committed after it, is served" in decided.rule
    assert PromotionLog(chain).served() == second


@pytest.mark.parametrize(
    ("request_", "error", "says"),
    [
        ("latest", ConfigError, "WARM_START='latest' is invalid"),
        (-1, ConfigError, "WARM_START='-1' is invalid"),
        (3, WarmStartNotFoundError, "WARM_START='3': chain 'ml8s-model' at file://"),
        ("0123456789ab", WarmStartNotFoundError, "WARM_START='0123456789ab': chain 'ml8s-model' at file://"),
        ("1234e5678901", WarmStartNotFoundError, "WARM_START='1234e5678901': chain 'ml8s-model' at file://"),
    ],
)
def test_warm_start_on_a_root_with_no_chain_names_the_value(
    tmp_path: Path, request_: str | int, error: type[Ml8sError], says: str
) -> None:
    """A typo, or a version on a chain not made yet, used to be CHAIN_VERSION_NOT_FOUND "not initialized", a
    chain error that named neither WARM_START nor its value (the table of docs/continuous.md promises these)."""
    chain = ChainStore(LocalStore(str(tmp_path)), CHAIN)
    assert find_parent(chain, "head", ReadTrust()) == (None, None)  # head on no chain: the lineage's cold start
    with pytest.raises(error) as caught:  # as the environment gives it
        find_parent(chain, normalize_value(str(request_), name="WARM_START"), ReadTrust())
    assert type(caught.value) is error and says in str(caught.value), str(caught.value)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("policy", ["retrain", "fail"])
def test_a_stale_parent_retrains_from_the_new_head_or_stops(
    warm_root: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, policy: str
) -> None:
    """Between this run's bootstrap and its commit another trainer appends v3: under the default policy the
    run trains again from v3 and commits v4 whose parent is v3; under STALE_PARENT_POLICY=fail it stops."""
    import ml8s.pipeline.run as run
    from ml8s.errors import StaleParentError

    data, root = tmp_path / "data", tmp_path / "root"
    shutil.copytree(warm_root[0], data)
    shutil.copytree(warm_root[1], root)
    add_generation(data, 2)
    real = run.chain_commit
    calls: list[int] = []

    def interloper(ctx: object, store: object, *args: object) -> object:
        if not calls:
            _ml8s(_env(data, root, WARM_START="head", EPOCHS="3"), "run")  # another trainer wins v3
        calls.append(1)
        return real(ctx, store, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(run, "chain_commit", interloper)
    env = _env(data, root, WARM_START="head", STALE_PARENT_POLICY=policy)
    if policy == "fail":
        with pytest.raises(StaleParentError, match="no longer the head"):
            run.run_pipeline(env)
        assert _head(root)[0] == 3
        return
    run.run_pipeline(env)
    chain = ChainStore(LocalStore(str(root)), CHAIN)
    v3, v4 = chain.get(3), chain.get(4)
    state = read_training_state(chain.fetch_payload(v4, layout.PAYLOAD_TRAINING_STATE), "v4")
    assert v4.header.parent_block_hash == v3.block_hash and state.parent_content_hash == v3.content_hash
    assert verify_chain(chain).ok


def test_warm_start_head_on_a_cold_head_with_nothing_new_is_that_run_again(
    warm_root: tuple[Path, Path], tmp_path: Path
) -> None:
    """WARM_START=head on a cold-started head that trained on every file is the head's run again. Its identity
    was computed with SAMPLER_ALPHA, which a cold start's (2.2.0) leaves out: LINEAGE_NOTHING_NEW, 'this
    configuration is not that run's', for the very configuration of the head (a launch plan killed after its
    first commit could never get its manifest back)."""
    from ml8s.contract import FingerprintRecord, parse
    from ml8s.pipeline.bootstrap import bootstrap

    data, root = warm_root[0], tmp_path / "root"
    shutil.copytree(warm_root[1], root)
    chain_dir = root / "ml8s_chain" / CHAIN
    v1 = ChainStore(LocalStore(str(root)), CHAIN).get(1)
    (v2,) = chain_dir.glob("versions/v0000000002_*")  # the chain as it was when v1 was its head
    for record in [*chain_dir.glob("audit/*.json"), *chain_dir.glob("runs/*.json"), *chain_dir.glob("promotions/*")]:
        if v2.name in record.read_text() or record.name.startswith("0000000002"):
            record.unlink()
    shutil.rmtree(v2)
    (chain_dir / "chain.json").write_text(
        json.dumps({"block_hash": v1.block_hash, "chain_name": CHAIN, "counter": 1, "version_dir": v1.version_dir})
    )
    record = parse(layout.DATA_FINGERPRINT, _payload(root, 1)[layout.PAYLOAD_DATA_FINGERPRINT], FingerprintRecord)
    files = [entry.relative_path for entry in record.files]  # v1's data, not the generation that came later
    env = _env(data, root, WARM_START="head", SAMPLER_ALPHA="3")
    ctx = bootstrap(env, data_files=files)
    assert ctx.spec.lineage is None and ctx.identity.full_config_hash == v1.header.full_config_hash


def test_a_parent_read_from_another_root_must_head_the_chain_the_run_commits_to(
    warm_root: tuple[Path, Path], tmp_path: Path
) -> None:
    """WARM_START_ROOT_URI naming a root other than PIPELINE_ROOT_URI, whose chain lacks that head (here, no
    chain yet): the run trained, registered its model and was then refused at commit as a stale parent ('no
    longer the head', 'run again'). Bootstrap now refuses it before anything is written."""
    from ml8s.errors import StaleParentError
    from ml8s.pipeline.bootstrap import bootstrap

    data, root, other = tmp_path / "data", tmp_path / "root", tmp_path / "other"
    shutil.copytree(warm_root[0], data)
    shutil.copytree(warm_root[1], root)
    add_generation(data, 2)
    env = _env(data, other, WARM_START="head", WARM_START_ROOT_URI=str(root))
    with pytest.raises(StaleParentError, match=r"at PIPELINE_ROOT_URI file://.*/other, has no version"):
        bootstrap(env)
    assert not other.exists() or not any(other.rglob("*.json"))


def test_reproduce_takes_the_version_s_strict_data_identity(warm_root: tuple[Path, Path], tmp_path: Path) -> None:
    """A version trained with STRICT_DATA_IDENTITY=false has its config's identity alone; reproduce forced the
    setting to true and reported it 'NOT REPRODUCED: the identity is now ...: the data or the model code changed
    since', of data and code that had not changed. It now re-trains under the version's own setting."""
    from ml8s.contract import ConfigSnapshot, FingerprintRecord, parse
    from ml8s.identity.hashing import compute_identity
    from ml8s.ops.reproduce import _environment, hashed_its_data
    from ml8s.pipeline.bootstrap import bootstrap

    payload = _payload(warm_root[1], 1)
    snapshot = parse(layout.CONFIG_SNAPSHOT, payload[layout.PAYLOAD_CONFIG_SNAPSHOT], ConfigSnapshot)
    record = parse(layout.DATA_FINGERPRINT, payload[layout.PAYLOAD_DATA_FINGERPRINT], FingerprintRecord)
    loose = compute_identity(snapshot.canonical_config, snapshot.data_fingerprint, strict=False).full_config_hash
    assert hashed_its_data(snapshot.canonical_config, snapshot.full_config_hash)
    assert not hashed_its_data(snapshot.canonical_config, loose)
    env = _environment(snapshot.canonical_config, str(warm_root[1]), CHAIN, str(tmp_path / "scratch"), strict=False)
    ctx = bootstrap(env, data_files=[entry.relative_path for entry in record.files], commits=False)
    assert ctx.identity.full_config_hash == loose and ctx.identity.data_fingerprint == snapshot.data_fingerprint


def test_a_content_hash_prefix_is_named_as_one(warm_root: tuple[Path, Path], tmp_path: Path) -> None:
    """A content hash is taken whole; its 12-digit prefix (as chain reproduce prints it) was 'matches no version'
    with nothing to say why, though the version was there."""
    shutil.copytree(warm_root[1], tmp_path / "root")
    chain = ChainStore(LocalStore(str(tmp_path / "root")), CHAIN)
    v2 = chain.get(2)
    assert find_parent(chain, v2.content_hash, ReadTrust())[0] == v2
    with pytest.raises(WarmStartNotFoundError, match=r"it begins v2's content hash, which is taken whole: 64 hex"):
        find_parent(chain, v2.content_hash[:12], ReadTrust())


def test_reproduce_from_the_head_says_there_is_nothing_above_it(lineage: Lineage) -> None:
    """``--from`` the head was '0/0 versions reproduced byte for byte' and exit 1, saying nothing of why."""
    from ml8s.ops.reproduce import reproduce_chain

    with pytest.raises(ConfigError, match=r"--from 5: chain .* holds no version above v5 \(its head is v5\)"):
        reproduce_chain(lineage.root.as_uri(), CHAIN, 5)
