"""The run contract end to end, each run in its own process (``ml8s run``), as a user would run it."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
from cli_support import ml8s_many
from conftest import SEED_LAYOUT
from forked_cli import ML8S, forked_ml8s

from ml8s.context.run import RunContext
from ml8s.contract import layout
from ml8s.store import Store


def env_for(data: Path, root: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("FORCE_RERUN", "STRICT_DATA_IDENTITY")}
    env.update(DATA_ROOT=str(data), TARGET_COLUMN="churned", PIPELINE_ROOT_URI=str(root), EPOCHS="2")
    env.update(extra)
    return env


def ml8s(env: dict[str, str], *args: str, check: bool = True, fresh: bool = False) -> subprocess.CompletedProcess[str]:
    """``ml8s *args`` in a fork of a warm interpreter (forked_cli), or in a fresh process when ``fresh``."""
    proc = forked_ml8s(args, env, timeout=300, fresh=fresh)
    if check and proc.returncode != 0:
        pytest.fail(f"ml8s {' '.join(args)} exited {proc.returncode}:\n{proc.stderr}")
    return proc


def run_dir(root: Path, run_id: str) -> Path:
    return root / layout.RUNS_DIR / run_id


def tree(directory: Path) -> dict[str, tuple[int, int, bytes]]:
    """relative path -> (inode, mtime_ns, bytes) of every file, to prove nothing was rewritten."""
    out = {}
    for path in sorted(directory.rglob("*")):
        if path.is_file():
            stat = path.stat()
            out[str(path.relative_to(directory))] = (stat.st_ino, stat.st_mtime_ns, path.read_bytes())
    return out


def model_versions(root: Path) -> list[str]:
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{root}/mlflow.db")
    return sorted(str(v.version) for v in client.search_model_versions("name='ml8s-model'"))


@pytest.fixture(scope="module")
def completed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, dict[str, object]]:
    """One completed run shared by the read-only tests of this module."""
    from conftest import write_small_churn

    base = tmp_path_factory.mktemp("completed")
    data = write_small_churn(base / "data")
    manifest = json.loads(ml8s(env_for(data, base / "root"), "run").stdout)
    return data, base / "root", manifest


def test_two_processes_two_roots_give_identical_bytes(
    completed: tuple[Path, Path, dict[str, object]], tmp_path: Path
) -> None:
    data, root, manifest = completed
    other = json.loads(ml8s(env_for(data, tmp_path / "root"), "run", fresh=True).stdout)  # its own hash seed
    assert other["run_id"] == manifest["run_id"]
    first, second = run_dir(root, str(manifest["run_id"])), run_dir(tmp_path / "root", str(other["run_id"]))
    for rel in SEED_LAYOUT:
        assert (first / rel).read_bytes() == (second / rel).read_bytes(), rel
    assert (first / layout.SUCCESS_MARKER).stat().st_size == 0
    # The manifest names its own root and MLflow run: everything else in it is identical.
    assert {k: v["sha256"] for k, v in other["artifacts"].items()} == {
        k: v["sha256"] for k, v in manifest["artifacts"].items()
    }
    assert sorted(p.name for p in (first / layout.TMP_DIR).iterdir()) == []


def test_rerun_returns_early_writes_nothing_and_adds_no_version(
    completed: tuple[Path, Path, dict[str, object]],
) -> None:
    data, root, manifest = completed
    before = tree(root)
    proc = ml8s(env_for(data, root), "run")
    assert json.loads(proc.stdout) == manifest
    assert (run_dir(root, str(manifest["run_id"])) / layout.MANIFEST).read_text() == proc.stdout
    assert tree(root) == before  # not one file rewritten, MLflow's database included
    assert model_versions(root) == ["1"]


@pytest.mark.parametrize(("damage", "said"), [("delete", "is missing"), ("truncate", "has 10 bytes")])
def test_a_damaged_completed_run_is_named_at_the_gate_not_returned(
    completed: tuple[Path, Path, dict[str, object]], tmp_path: Path, damage: str, said: str
) -> None:
    """The gate returns the stored manifest as the run's result: never one naming files gone since."""
    data, root, manifest = completed
    copy = tmp_path / "root"
    shutil.copytree(root, copy)
    victim = run_dir(copy, str(manifest["run_id"])) / ("metrics.json" if damage == "delete" else "model/model.onnx")
    if damage == "delete":
        victim.unlink()
    else:
        os.truncate(victim, 10)
    before = tree(copy)
    proc = ml8s(env_for(data, copy), "run", check=False)
    last = proc.stderr.strip().splitlines()[-1]
    assert proc.returncode == 1 and proc.stdout == "", proc.stderr[-2000:]
    assert last.startswith(f"ml8s: STORE_ERROR: run {manifest['run_id']} is marked complete but ") and said in last
    assert "FORCE_RERUN=true" in last and tree(copy) == before  # nothing written
    if damage == "truncate":  # the way out the message names (once: a forced run trains)
        forced = json.loads(ml8s(env_for(data, copy), "run", "--force-rerun").stdout)
        assert forced["force_rerun"]["reproduced"] is True


@pytest.mark.parametrize(
    ("rel", "damage", "said"),
    [
        ("config_snapshot.json", b"[]\n", "is not a valid JSON object: expected a JSON object, found a JSON list"),
        ("config_snapshot.json", b"[" * 100_000, "is not a valid JSON object: JSON nested too deeply to parse"),
        ("data_fingerprint.json", b"[1]\n", "is missing or unreadable: expected a JSON object, found a JSON list"),
        ("manifest.json", b"\xff\xfe{}", "is not UTF-8 (invalid start byte at byte 0)"),
    ],
)
def test_a_stored_record_that_is_no_json_object_is_named_at_the_gate(
    completed: tuple[Path, Path, dict[str, object]], tmp_path: Path, rel: str, damage: bytes, said: str
) -> None:
    """Valid JSON of another shape, JSON too deep for Python's parser, bytes that are no UTF-8: a STORE_ERROR
    naming the file (was an INTERNAL_ERROR: AttributeError, RecursionError, UnicodeDecodeError), nothing written."""
    data, root, manifest = completed
    copy = tmp_path / "root"
    shutil.copytree(root, copy)
    (run_dir(copy, str(manifest["run_id"])) / rel).write_bytes(damage)
    before = tree(copy)
    proc = ml8s(env_for(data, copy), "run", check=False)
    last = proc.stderr.strip().splitlines()[-1]
    assert proc.returncode == 1 and proc.stdout == "", proc.stderr[-2000:]
    assert (
        last.startswith(f"ml8s: STORE_ERROR: {(run_dir(copy, str(manifest['run_id'])) / rel).as_uri()} ")
        and said in last
    )
    assert tree(copy) == before


@pytest.mark.parametrize("what", ["directory", "fifo", "dangling link"])
def test_something_else_where_the_marker_goes_is_refused_before_training(
    completed: tuple[Path, Path, dict[str, object]], tmp_path: Path, what: str
) -> None:
    """The gate saw no marker and trained; finalization's create-if-absent then failed on the directory, FIFO or
    link and was taken for an identical run that finished first: exit 0, 'done', and the run left unmarked."""
    data, root, manifest = completed
    copy = tmp_path / "root"
    shutil.copytree(root, copy)
    marker = run_dir(copy, str(manifest["run_id"])) / layout.SUCCESS_MARKER
    marker.unlink()
    {"directory": marker.mkdir, "fifo": lambda: os.mkfifo(marker), "dangling link": lambda: marker.symlink_to("gone")}[
        what
    ]()
    before = tree(copy)
    proc = ml8s(env_for(data, copy), "run", check=False)
    last = proc.stderr.strip().splitlines()[-1]
    assert proc.returncode == 1 and proc.stdout == "", proc.stderr[-2000:]
    assert last.startswith(f"ml8s: STORE_UNSAFE_OBJECT: {marker.as_uri()} is no regular file "), last
    assert "nothing was trained or written" in last and tree(copy) == before


def test_a_record_past_its_bound_is_refused_unread_at_the_gate(
    completed: tuple[Path, Path, dict[str, object]], tmp_path: Path
) -> None:
    """Read whole before: a sparse 64 GiB config_snapshot.json made a re-run allocate 64 GiB. Just past the
    16 MiB bound here (a file of zeros, so the unbounded read failed otherwise: as invalid JSON)."""
    data, root, manifest = completed
    copy = tmp_path / "root"
    shutil.copytree(root, copy)
    record = run_dir(copy, str(manifest["run_id"])) / "config_snapshot.json"
    os.truncate(record, 16 * 1024 * 1024 + 1)
    proc = ml8s(env_for(data, copy), "run", check=False)
    last = proc.stderr.strip().splitlines()[-1]
    assert proc.returncode == 1 and proc.stdout == "", proc.stderr[-2000:]
    assert last == (
        f"ml8s: STORE_OBJECT_TOO_LARGE: {record.as_uri()} holds {16 * 1024 * 1024 + 1} bytes; expected at most "
        f"{16 * 1024 * 1024} (not read)"
    )


def test_a_gate_hit_says_when_the_local_registry_it_names_is_gone(
    completed: tuple[Path, Path, dict[str, object]], tmp_path: Path
) -> None:
    """The returned manifest names a model version; with its sqlite database deleted that version is gone, and a
    gate hit says so at WARNING (it still returns the intact run: the registry is outside it)."""
    data, root, manifest = completed
    copy = tmp_path / "root"
    shutil.copytree(root, copy)
    stored = run_dir(copy, str(manifest["run_id"])) / layout.MANIFEST
    database = copy / "mlflow.db"
    # as the same run completed at the copy records it (a copied manifest names its old root: refused at the gate)
    moved = json.loads(stored.read_text().replace(f"{root.as_uri()}/", f"{copy.as_uri()}/"))
    moved["mlflow"]["tracking_uri"] = f"sqlite:///{database}"  # the copy's own database, not the fixture's
    stored.write_text(json.dumps(moved, indent=2, sort_keys=True) + "\n")
    env = {**env_for(data, copy), "ML8S_LOG_LEVEL": "WARNING"}
    present = ml8s(env, "run")
    assert "REGISTRY_GONE" not in present.stderr and "REGISTRY_VERSION_GONE" not in present.stderr, present.stderr
    from mlflow import MlflowClient

    MlflowClient(f"sqlite:///{database}").delete_model_version("ml8s-model", "1")  # MLflow's own delete (a mark)
    deleted = ml8s(env, "run")
    assert json.loads(deleted.stdout) == moved
    warning = next(line for line in deleted.stderr.splitlines() if "REGISTRY_VERSION_GONE" in line)
    assert " WARNING [gate] REGISTRY_VERSION_GONE: model version 1 of 'ml8s-model', which manifest.json " in warning
    assert f"deleted from the MLflow database {database} " in warning and "FORCE_RERUN=true" in warning
    database.unlink()
    gone = ml8s(env, "run")
    assert json.loads(gone.stdout) == moved and not database.exists()  # returned as stored; nothing registered
    warning = next(line for line in gone.stderr.splitlines() if "REGISTRY_GONE" in line)
    assert " WARNING [gate] REGISTRY_GONE: the MLflow database " in warning, warning
    assert f"{database} that manifest.json names" in warning and "model version 1 of 'ml8s-model'" in warning
    assert "FORCE_RERUN=true" in warning


def _checks(proc: subprocess.CompletedProcess[str]) -> dict[str, dict[str, object]]:
    return {c["name"]: c for c in json.loads(proc.stdout)["checks"]}


def test_a_copied_or_moved_root_is_refused_at_the_gate_until_forced_and_verify_names_where_it_was_recorded(
    completed: tuple[Path, Path, dict[str, object]], tmp_path: Path
) -> None:
    """cp -a of a pipeline root, the same config and data run there: the gate returned the stored manifest, which
    names the old root's files (gone after a move), and moved MLflow aliases in the old root's registry; verify
    FAILed manifest and chain with bare mismatches. The gate now refuses (RECORDED_AT_ANOTHER_ROOT, nothing
    written anywhere), verify says where the run was recorded, and FORCE_RERUN records it again here: the chain
    block keeps naming where it was committed, a note of a PASS. Then the forced root moved (its old path gone)."""
    data, root, manifest = completed
    run_id = str(manifest["run_id"])
    copy = tmp_path / "copied"
    shutil.copytree(root, copy, symlinks=True)
    before, origin = tree(copy), tree(root)
    proc = ml8s(env_for(data, copy), "run", check=False)
    last = proc.stderr.strip().splitlines()[-1]
    assert proc.returncode == 1 and proc.stdout == "" and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    here, there = run_dir(copy, run_id).as_uri(), run_dir(root, run_id).as_uri()
    assert last.startswith(
        f"ml8s: RECORDED_AT_ANOTHER_ROOT: run {run_id} at {here} is complete but was recorded at {there}: "
    ), last
    assert f"PIPELINE_ROOT_URI={root.as_uri()} " in last and "FORCE_RERUN=true" in last
    assert tree(copy) == before and tree(root) == origin  # nothing written, the old root's registry included

    checks = _checks(ml8s(env_for(data, copy), "verify", run_id, "--json", check=False))
    assert [n for n, c in checks.items() if c["status"] != "PASS"] == ["manifest"]
    assert f"recorded at another root: artifact_root is {there}; the run is at {here}" in str(checks["manifest"])
    assert f"recorded at another root: block v1 was committed from {there}" in str(checks["chain"]["details"])

    forced = json.loads(ml8s(env_for(data, copy), "run", "--force-rerun").stdout)
    assert forced["artifact_root"] == here and forced["force_rerun"]["reproduced"] is True
    assert forced["mlflow"]["tracking_uri"] == f"sqlite:///{copy}/mlflow.db" and tree(root) == origin
    assert json.loads(ml8s(env_for(data, copy), "run").stdout) == forced  # the early exit is back
    checks = _checks(ml8s(env_for(data, copy), "verify", run_id, "--json"))
    assert {c["status"] for c in checks.values()} == {"PASS"}
    assert f"recorded at another root: block v1 was committed from {there}" in str(checks["chain"]["details"])

    moved = tmp_path / "moved"
    copy.rename(moved)  # its registry with it: the manifest names a database that is gone
    proc = ml8s(env_for(data, moved), "run", check=False)
    assert (
        proc.stderr.strip()
        .splitlines()[-1]
        .startswith(
            f"ml8s: RECORDED_AT_ANOTHER_ROOT: run {run_id} at {run_dir(moved, run_id).as_uri()} is complete but was "
            f"recorded at {here}: "
        )
    )
    assert not copy.exists()  # no registry created where the old root was
    checks = _checks(ml8s(env_for(data, moved), "verify", run_id, "--json", check=False))
    assert [n for n, c in checks.items() if c["status"] != "PASS"] == ["manifest", "mlflow"]
    assert "recorded at another root: manifest.json was written at " in str(checks["mlflow"]["reason"])
    elsewhere = ("--mlflow-tracking-uri", f"sqlite:///{moved}/mlflow.db")  # the way out the finding names
    checks = _checks(ml8s(env_for(data, moved), "verify", run_id, "--json", *elsewhere, check=False))
    assert [n for n, c in checks.items() if c["status"] != "PASS"] == ["manifest"]


def test_a_root_reached_through_a_link_is_the_root_the_run_was_recorded_at(
    completed: tuple[Path, Path, dict[str, object]], tmp_path: Path
) -> None:
    """PIPELINE_ROOT_URI naming the root through a symbolic link spells another ARTIFACT_ROOT than the manifest's,
    yet it is the same folder, not a copy: the early exit returns the run, writing nothing, and verify through the
    link PASSes (it FAILed manifest and chain, the records naming the root by its other name)."""
    data, root, manifest = completed
    link = tmp_path / "link"
    link.symlink_to(root)
    before = tree(root)
    assert json.loads(ml8s(env_for(data, link), "run").stdout) == manifest
    assert tree(root) == before
    checks = _checks(ml8s(env_for(data, link), "verify", str(manifest["run_id"]), "--json", check=False))
    assert {n: c["reason"] for n, c in checks.items() if c["status"] != "PASS"} == {}
    assert "recorded at another root" not in json.dumps(checks)


def verifies(env: dict[str, str], run_id: str, tmp: Path) -> None:
    """``ml8s verify`` passes, and so do an audit bundle of the run and its offline verification (the three
    commands in one process: they only read, and ml8s and MLflow are imported once)."""
    bundle = str(tmp / f"bundle-{run_id}-{len(list(tmp.glob('bundle-*')))}.tar.gz")
    commands = (("verify", run_id, "--json"), ("audit", "bundle", run_id, "-o", bundle), ("audit", "verify", bundle))
    done = ml8s_many(commands, env)
    for proc in done:
        if proc.returncode != 0:
            pytest.fail(f"ml8s {' '.join(proc.args[1:])} exited {proc.returncode}:\n{proc.stderr}")
    report = json.loads(done[0].stdout)
    assert report["status"] == "PASS", [c for c in report["checks"] if c["status"] != "PASS"]


# What the compute steps log when they run (ml8s run has no cache, but a forced run must say so by running).
COMPUTED = re.compile(r"^\S+Z \+[0-9.]+s INFO +\[(features|train|export)\] ", re.MULTILINE)


def test_force_rerun_regenerates_and_reproduces(tmp_path: Path) -> None:
    from conftest import write_small_churn

    data = write_small_churn(tmp_path / "data")
    root = tmp_path / "root"
    first = json.loads(ml8s(env_for(data, root), "run").stdout)
    directory = run_dir(root, first["run_id"])
    old = tree(directory)
    proc = ml8s(env_for(data, root), "run", "--force-rerun")
    forced = json.loads(proc.stdout)
    new = tree(directory)
    assert {m.group(1) for m in COMPUTED.finditer(proc.stderr)} == {"features", "train", "export"}
    assert forced["force_rerun"]["reproduced"] is True
    assert forced["force_rerun"]["changed"] == []
    assert forced["force_rerun"]["recomputed"] == ["snapshot", "features", "train", "export"]
    for rel in SEED_LAYOUT:
        assert new[rel][0:2] != old[rel][0:2], f"{rel} was not regenerated"
        assert new[rel][2] == old[rel][2], f"{rel} changed bytes"
    assert model_versions(root) == ["1"]
    # The audit is recorded: a plain re-run afterwards returns the forced run's manifest.
    assert json.loads(ml8s(env_for(data, root), "run").stdout) == forced
    # The chain still holds the first completion's version, and verification agrees with it.
    verifies(env_for(data, root), first["run_id"], tmp_path)
    again = ml8s(env_for(data, root, FORCE_RERUN="true"), "run")  # the variable, a second time
    assert {m.group(1) for m in COMPUTED.finditer(again.stderr)} == {"features", "train", "export"}
    assert json.loads(again.stdout)["force_rerun"]["reproduced"] is True
    verifies(env_for(data, root), first["run_id"], tmp_path)


def _crash(*args: object) -> None:
    raise KeyboardInterrupt("killed")


def _clear_marker_then_crash(ctx: RunContext, store: Store) -> None:
    """FORCE_RERUN's clearing, killed right after its first delete: the marker."""
    store.delete(ctx.key(layout.SUCCESS_MARKER))
    raise KeyboardInterrupt("killed after the marker was deleted")


@pytest.mark.parametrize("kill", ["after_marker_delete", "after_new_marker"])
def test_killed_forced_rerun_then_normal_run_verifies(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kill: str
) -> None:
    """A forced re-run killed after deleting the marker, or after writing its new marker (before the chain
    commit), then a normal run: the run verifies, its chain included."""
    from conftest import write_small_churn

    import ml8s.pipeline.gate as gate
    import ml8s.pipeline.run as run

    data = write_small_churn(tmp_path / "data")
    root = tmp_path / "root"
    first = json.loads(ml8s(env_for(data, root), "run").stdout)
    directory = run_dir(root, first["run_id"])
    if kill == "after_marker_delete":
        monkeypatch.setattr(gate, "clear_run", _clear_marker_then_crash)
    else:
        monkeypatch.setattr(run, "chain_commit", _crash)
    with pytest.raises(KeyboardInterrupt):
        run.run_pipeline(env_for(data, root, FORCE_RERUN="true"))
    monkeypatch.undo()
    marker = (directory / layout.SUCCESS_MARKER).exists()
    assert marker is (kill == "after_new_marker")
    if marker:
        assert json.loads((directory / layout.MANIFEST).read_text())["force_rerun"]["reproduced"] is True
    proc = ml8s(env_for(data, root), "run")
    ran = {m.group(1) for m in COMPUTED.finditer(proc.stderr)}
    assert ran == (set() if marker else {"features", "train", "export"})  # an early exit, or a full run
    verifies(env_for(data, root), first["run_id"], tmp_path)
    assert model_versions(root) == ["1"]


def test_simulated_collision_halts_with_both_hashes(
    completed: tuple[Path, Path, dict[str, object]], tmp_path: Path
) -> None:
    data, _, manifest = completed
    root = tmp_path / "root"
    directory = run_dir(root, str(manifest["run_id"]))
    directory.mkdir(parents=True)
    forged = "f" * 64
    snapshot = {"full_config_hash": forged, "run_id": manifest["run_id"], "data_fingerprint": "0" * 64}
    (directory / layout.CONFIG_SNAPSHOT).write_text(json.dumps(snapshot))
    (directory / layout.SUCCESS_MARKER).write_bytes(b"")
    before = tree(directory)
    proc = ml8s(env_for(data, root), "run", check=False)
    assert proc.returncode == 1
    assert "RUN_ID_HASH_COLLISION" in proc.stderr
    assert forged in proc.stderr and str(manifest["full_config_hash"]) in proc.stderr
    assert tree(directory) == before
    incidents = list((root / layout.INCIDENTS_DIR).rglob("*.json"))
    assert len(incidents) == 1
    record = json.loads(incidents[0].read_text())
    assert record["stored"]["full_config_hash"] == forged
    assert record["computed"]["full_config_hash"] == manifest["full_config_hash"]


def test_non_strict_identity_with_changed_data_is_data_drift(tmp_path: Path) -> None:
    from conftest import write_small_churn

    data = write_small_churn(tmp_path / "data")
    root = tmp_path / "root"
    env = env_for(data, root, STRICT_DATA_IDENTITY="false")
    first = json.loads(ml8s(env, "run").stdout)
    with open(data / "part-000.csv", "a") as handle:
        handle.write("C99999,12,50.5,basic,true,no\n")
    proc = ml8s(env, "run", check=False)
    assert proc.returncode == 1
    assert "DATA_DRIFT" in proc.stderr and first["data_fingerprint"] in proc.stderr
    # Strict identity (the default) gives the changed data a new RUN_ID instead.
    assert json.loads(ml8s(env_for(data, root), "run").stdout)["run_id"] != first["run_id"]


def test_sigkill_after_features_then_rerun_equals_clean_run(
    completed: tuple[Path, Path, dict[str, object]], tmp_path: Path
) -> None:
    data, clean_root, manifest = completed
    root = tmp_path / "root"
    directory = run_dir(root, str(manifest["run_id"]))
    proc = subprocess.Popen([ML8S, "run"], env=env_for(data, root), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while not (directory / layout.FEATURE_SCHEMA).exists():
        assert proc.poll() is None, "the run ended before feature engineering finished"
        assert time.monotonic() < deadline
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (directory / layout.SUCCESS_MARKER).exists()
    assert not (directory / layout.TRAINING_METADATA).exists()
    ml8s(env_for(data, root), "run")
    clean = run_dir(clean_root, str(manifest["run_id"]))
    for rel in SEED_LAYOUT:
        assert (directory / rel).read_bytes() == (clean / rel).read_bytes(), rel


def test_four_identical_runs_at_once_leave_one_model_version(tmp_path: Path) -> None:
    from conftest import write_small_churn

    data = write_small_churn(tmp_path / "data")
    root = tmp_path / "root"
    procs = [
        subprocess.Popen(
            [ML8S, "run"], env=env_for(data, root), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for _ in range(4)
    ]
    outputs = [p.communicate(timeout=300) for p in procs]
    for proc, (_, err) in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, err
    manifests = [json.loads(out) for out, _ in outputs]
    assert all(m == manifests[0] for m in manifests)
    assert model_versions(root) == ["1"]
    assert (run_dir(root, manifests[0]["run_id"]) / layout.SUCCESS_MARKER).exists()


def _cuda_available() -> bool:
    import torch

    return bool(torch.cuda.is_available())


@pytest.mark.skipif(not _cuda_available(), reason="needs a CUDA GPU (TRAIN_DEVICE=cuda); none on this machine")
def test_cuda_runs_in_two_processes_give_identical_bytes(tmp_path: Path) -> None:
    from conftest import write_small_churn

    data = write_small_churn(tmp_path / "data")
    manifests = [
        json.loads(ml8s(env_for(data, tmp_path / name, TRAIN_DEVICE="cuda"), "run").stdout) for name in ("a", "b")
    ]
    assert manifests[0]["run_id"] == manifests[1]["run_id"]
    first, second = (run_dir(tmp_path / name, str(manifests[0]["run_id"])) for name in ("a", "b"))
    for rel in SEED_LAYOUT:
        assert (first / rel).read_bytes() == (second / rel).read_bytes(), rel
