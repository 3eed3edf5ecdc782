"""``ml8s verify`` (issue 5): a fresh run PASSes; every tampering FAILs, naming the right check.

One completed run (session-scoped, shared with test_audit_bundle.py) is tampered with case by case and
restored from a pristine copy after each; MLflow is tampered with in a copy of its database.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from forked_cli import forked_ml8s

from ml8s.audit import Report, Status, render_text, verify_run
from ml8s.contract import layout
from ml8s.identity.hashing import canonical_bytes
from ml8s.registry.mlflow_model import registry_resolves_with

REPO = Path(__file__).resolve().parent.parent
FINAL = layout.final_artifacts("onnx")
OWNER = {  # the check that owns each file; any other file is checked by "artifacts"
    layout.CONFIG_SNAPSHOT: "config_snapshot",
    layout.DATA_FINGERPRINT: "data_fingerprint",
    layout.TRAINING_METADATA: "training_metadata",
    layout.MANIFEST: "manifest",
}
CHECKS = [
    "marker",
    "config_snapshot",
    "data_fingerprint",
    "training_metadata",
    "manifest",
    "artifacts",
    "unexpected_files",
    "shards",
    "mlflow",
    "chain",
]


class Run(NamedTuple):
    data: Path
    root: Path
    run_id: str
    directory: Path
    pristine: Path


def clean_env(**extra: str) -> dict[str, str]:
    """The caller's environment without anything that would change a run or its verification."""
    drop = ("PIPELINE_ROOT_URI", "MLFLOW_TRACKING_URI", "FORCE_RERUN", "STRICT_DATA_IDENTITY", "DATA_ROOT")
    env = {k: v for k, v in os.environ.items() if k not in drop and not k.startswith(("AWS_", "FLYTE_AWS_"))}
    env.update(extra)
    return env


def ml8s(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return forked_ml8s(args, env, timeout=300)


_RUNS: dict[str, Run] = {}


def completed_run(factory: pytest.TempPathFactory) -> Run:
    """One completed run per session (``ml8s run`` in its own process) and a pristine copy of its
    ARTIFACT_ROOT; test_audit_bundle.py shares it through this cache."""
    from conftest import write_small_churn

    if "run" not in _RUNS:
        base = factory.mktemp("verified")
        data = write_small_churn(base / "data")
        env = clean_env(DATA_ROOT=str(data), TARGET_COLUMN="churned", PIPELINE_ROOT_URI=str(base / "root"), EPOCHS="2")
        done = ml8s(env, "run")
        assert done.returncode == 0, done.stderr
        run_id = json.loads(done.stdout)["run_id"]
        directory = base / "root" / layout.run_prefix(run_id)
        shutil.copytree(directory, base / "pristine")
        _RUNS["run"] = Run(data, base / "root", run_id, directory, base / "pristine")
    return _RUNS["run"]


@pytest.fixture(scope="session")
def verified_run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    return completed_run(tmp_path_factory)


def verify(run: Run, **env: str) -> Report:
    return verify_run(str(run.root), run.run_id, env)


def verify_at(run: Run, tracking_uri: str) -> Report:
    """Verify against another MLflow than the one the manifest records (here: a tampered copy)."""
    return verify_run(str(run.root), run.run_id, {}, tracking_uri=tracking_uri)


def restore(run: Run) -> None:
    shutil.rmtree(run.directory)
    shutil.copytree(run.pristine, run.directory)


@pytest.fixture
def tampered(verified_run: Run) -> Iterator[Run]:
    """The shared run, restored to its pristine bytes after the test."""
    restore(verified_run)
    try:
        yield verified_run
    finally:
        restore(verified_run)


def edit_json(path: Path, change: Callable[[dict[str, object]], None]) -> None:
    """Edit a JSON artifact and write it back in the canonical form ml8s writes (only the content differs)."""
    data = json.loads(path.read_bytes())
    change(data)
    path.write_bytes(canonical_bytes(data))


def assert_fails(report: Report, check: str, *words: str) -> None:
    assert report.status is Status.FAIL
    assert check in report.failed(), f"expected {check} to FAIL, got {[(c.name, c.status) for c in report.checks]}"
    text = " ".join((report.check(check).reason, *report.check(check).details))
    for word in words:
        assert word in text, f"{check}: {word!r} not in {text!r}"


# ------------------------------------------------------------------------------------------- PASS


def test_fresh_run_passes_every_check(verified_run: Run) -> None:
    report = verify(verified_run)
    assert report.passed, report.failed()
    assert [c.name for c in report.checks] == CHECKS
    assert all(c.status is Status.PASS for c in report.checks)
    assert "strict identity" in report.check("config_snapshot").reason


def test_cli_pass_fail_and_usage_exit_codes(tampered: Run) -> None:
    env = clean_env(PIPELINE_ROOT_URI=str(tampered.root))
    done = ml8s(env, "verify", tampered.run_id)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[-1] == f"RESULT: PASS ({len(CHECKS)} checks)"
    (tampered.directory / layout.SUCCESS_MARKER).unlink()
    failed = ml8s(clean_env(), "verify", tampered.run_id, "--json", "--root", str(tampered.root))
    assert failed.returncode == 1
    report = json.loads(failed.stdout)
    assert report["status"] == "FAIL" and [c["name"] for c in report["checks"]] == CHECKS
    assert [c["name"] for c in report["checks"] if c["status"] == "FAIL"] == ["marker"]
    assert ml8s(env, "verify", "not-a-run-id").returncode == 2
    assert ml8s(env, "verify", tampered.run_id, "--root", "http://example/x").returncode == 1  # a CONFIG_ERROR
    assert ml8s(env, "verify").returncode == 2


def test_unknown_run_fails(verified_run: Run) -> None:
    report = verify_run(str(verified_run.root), "0" * 12, {})
    assert_fails(report, "marker", "nothing is stored")


@pytest.mark.parametrize("run_id", ["", "../x", "ABCDEF123456", "abcdefabcdef/.."])
def test_a_run_id_that_is_no_run_id_is_a_config_error(run_id: str, tmp_path: Path) -> None:
    """The Flyte verify workflow takes any text as run_id (the CLI checks it, the task did not): "" verified the
    runs folder itself, every run's files as one run's, and '../x' was a store error about a key."""
    from ml8s.errors import ConfigError

    (tmp_path / layout.run_prefix("abcdefabcdef")).mkdir(parents=True)
    (tmp_path / layout.run_prefix("abcdefabcdef") / layout.SUCCESS_MARKER).write_bytes(b"")
    with pytest.raises(ConfigError, match="is not a RUN_ID; expected 12 lowercase hex digits"):
        verify_run(str(tmp_path), run_id, {})


def test_unreachable_store_is_an_error_not_a_verdict(monkeypatch: pytest.MonkeyPatch) -> None:
    from ml8s.errors import StoreUnavailableError

    for name, value in {"AWS_ENDPOINT_URL": "http://127.0.0.1:9", "AWS_MAX_ATTEMPTS": "1"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "x")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "x")
    with pytest.raises(StoreUnavailableError, match="cannot reach S3 endpoint"):
        verify_run("s3://bucket/root", "0" * 12, {})


def test_tmp_and_logs_entries_are_allowed(tampered: Run) -> None:
    for rel in (".tmp/features-worker.parquet", "logs/tensorboard/events.out.tfevents.ml8s-train"):
        (tampered.directory / rel).parent.mkdir(parents=True, exist_ok=True)
        (tampered.directory / rel).write_bytes(b"x")
    report = verify(tampered)
    assert report.passed, report.failed()
    assert len(report.check("unexpected_files").details) == 2


# ---------------------------------------------------------------------------------- tamper matrix


@pytest.mark.parametrize("where", [0.25, 0.5, 0.75])
@pytest.mark.parametrize("rel", FINAL)
def test_every_artifact_byte_flipped(tampered: Run, rel: str, where: float) -> None:
    path = tampered.directory / rel
    data = bytearray(path.read_bytes())
    data[int(len(data) * where)] ^= 0xFF
    path.write_bytes(bytes(data))
    assert_fails(verify(tampered), OWNER.get(rel, "artifacts"), rel)


@pytest.mark.parametrize("rel", [*FINAL, layout.SUCCESS_MARKER])
def test_each_artifact_deleted(tampered: Run, rel: str) -> None:
    (tampered.directory / rel).unlink()
    report = verify(tampered)
    if rel == layout.SUCCESS_MARKER:
        assert report.failed() == ("marker",)
        return
    assert_fails(report, OWNER.get(rel, "artifacts"), rel)
    if rel != layout.CONFIG_SNAPSHOT:  # without the snapshot the layout (MODEL_FORMAT) is unknown: SKIP
        assert_fails(report, "artifacts", f"{rel} is missing")


@pytest.mark.parametrize("rel", ["extra.txt", "model/model.safetensors", "features/.hidden", "model/x/y.bin"])
def test_extra_file_added(tampered: Run, rel: str) -> None:
    (tampered.directory / rel).parent.mkdir(parents=True, exist_ok=True)
    (tampered.directory / rel).write_bytes(b"extra")
    report = verify(tampered)
    assert report.failed() == ("unexpected_files",)
    assert_fails(report, "unexpected_files", rel)


def test_marker_with_content(tampered: Run) -> None:
    (tampered.directory / layout.SUCCESS_MARKER).write_bytes(b"ok")
    assert verify(tampered).failed() == ("marker",)


def test_snapshot_hash_edited(tampered: Run) -> None:
    def change(snapshot: dict[str, object]) -> None:
        snapshot["full_config_hash"] = str(snapshot["full_config_hash"])[:12] + "0" * 52

    edit_json(tampered.directory / layout.CONFIG_SNAPSHOT, change)
    assert_fails(verify(tampered), "config_snapshot", "is not sha256(CANONICAL_JSON")


def test_snapshot_canonical_config_edited(tampered: Run) -> None:
    def change(snapshot: dict[str, object]) -> None:
        config = snapshot["canonical_config"]
        assert isinstance(config, dict)
        config["epochs"] = 3

    edit_json(tampered.directory / layout.CONFIG_SNAPSHOT, change)
    report = verify(tampered)
    assert_fails(report, "config_snapshot", "is not sha256(CANONICAL_JSON")
    assert_fails(report, "artifacts", "config_snapshot.json: sha256")  # manifest.json records its sha256


def test_snapshot_reformatted(tampered: Run) -> None:
    path = tampered.directory / layout.CONFIG_SNAPSHOT
    path.write_text(json.dumps(json.loads(path.read_text()), sort_keys=True))  # same content, other bytes
    assert_fails(verify(tampered), "config_snapshot", "canonical form")


def test_fingerprint_edited(tampered: Run) -> None:
    edit_json(tampered.directory / layout.DATA_FINGERPRINT, lambda r: r.update(fingerprint="0" * 64))
    assert_fails(verify(tampered), "data_fingerprint", "differs from config_snapshot.json")


def test_fingerprint_token_edited(tampered: Run) -> None:
    def change(record: dict[str, object]) -> None:
        files = record["files"]
        assert isinstance(files, list)
        files[0]["size"] += 1

    edit_json(tampered.directory / layout.DATA_FINGERPRINT, change)
    assert_fails(verify(tampered), "data_fingerprint", "is not the sha256 of its file tokens")


def test_metadata_checksum_edited(tampered: Run) -> None:
    def change(metadata: dict[str, object]) -> None:
        artifacts = metadata["artifacts"]
        assert isinstance(artifacts, dict)
        artifacts["model/model.onnx"]["sha256"] = "0" * 64

    edit_json(tampered.directory / layout.TRAINING_METADATA, change)
    report = verify(tampered)
    assert report.failed() == ("artifacts", "chain")  # the chain holds training_metadata.json too (2.1.0)
    assert_fails(report, "artifacts", "model/model.onnx", "training_metadata.json records " + "0" * 64)
    assert_fails(report, "chain", "payload training_metadata.json")


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("model", "feature_names", 0), "other_feature"),
        (("model", "parameter_count"), 4867),
        (("model", "architecture"), "mlp:8-64-2"),
        (("training", "epoch_losses", -1), 0.5),
        (("training", "train_rows"), 481),
        (("training", "optimizer"), "sgd"),
        (("determinism", "use_deterministic_algorithms"), False),
        (("export", "max_abs_diff"), 0.5),
        (("versions", "jax"), "0.1"),
        (("training", "epochs"), "2"),
        (("notes",), "added"),
    ],
)
def test_metadata_content_edited(tampered: Run, path: tuple[str | int, ...], value: object) -> None:
    def change(metadata: dict[str, object]) -> None:
        target: Any = metadata
        for part in path[:-1]:
            target = target[part]
        target[path[-1]] = value

    edit_json(tampered.directory / layout.TRAINING_METADATA, change)
    assert_fails(verify(tampered), "training_metadata")


def test_manifest_edited(tampered: Run) -> None:
    edit_json(tampered.directory / layout.MANIFEST, lambda m: m.update(artifact_root="file:///elsewhere"))
    assert_fails(verify(tampered), "manifest", "artifact_root is file:///elsewhere")


@pytest.mark.parametrize("rel", [layout.CONFIG_SNAPSHOT, layout.MANIFEST])
def test_a_sparse_record_is_refused_unread(tampered: Run, rel: str) -> None:
    # Read whole before: a sparse 64 GiB record (truncate -s 64G) made verify and audit bundle allocate 64 GiB.
    # Just past the bound here: other checks still stream the file to hash it.
    size = 16 * 1024 * 1024 + 1
    os.truncate(tampered.directory / rel, size)
    assert_fails(verify(tampered), rel.removesuffix(".json"), f"{rel} holds {size} bytes", "(not read)")


@pytest.mark.parametrize(("rel", "check"), [(layout.CONFIG_SNAPSHOT, "config_snapshot"), ("metrics.json", "artifacts")])
def test_a_record_replaced_by_a_link_is_not_followed(tampered: Run, tmp_path: Path, rel: str, check: str) -> None:
    # Followed before: a link to a file outside the root (readable by root alone) had it read, and carried into
    # an audit bundle (--allow-failed), even a PASS when the link named a copy of the right bytes.
    copy = tmp_path / "copy"
    shutil.copy(tampered.directory / rel, copy)
    (tampered.directory / rel).unlink()
    (tampered.directory / rel).symlink_to(copy)
    assert_fails(verify(tampered), check, f"{rel}: cannot read ", "a symbolic link; expected a regular file")


@pytest.mark.parametrize(
    ("what", "said"), [("fifo", "a FIFO"), ("directory", "a directory"), ("dangling", "a symbolic")]
)
def test_a_record_replaced_by_no_file_is_named_not_missing(tampered: Run, what: str, said: str) -> None:
    # Left out of the listing, these were reported as "config_snapshot.json is missing".
    record = tampered.directory / layout.CONFIG_SNAPSHOT
    record.unlink()
    {"fifo": lambda: os.mkfifo(record), "directory": record.mkdir, "dangling": lambda: record.symlink_to("gone")}[
        what
    ]()
    assert_fails(verify(tampered), "config_snapshot", f"{layout.CONFIG_SNAPSHOT}: cannot read ", said)


def test_manifest_nested_too_deep_for_the_parser_fails_its_check(tampered: Run) -> None:
    # json.loads raises RecursionError (no ValueError) on such input: it was an INTERNAL_ERROR, not a verdict
    (tampered.directory / layout.MANIFEST).write_bytes(b"[" * 100_000)
    assert_fails(verify(tampered), "manifest", "nested too deeply")


# ------------------------------------------------------------------------------------------- MLflow


@pytest.fixture
def registry(verified_run: Run, tmp_path: Path) -> tuple[Any, str]:
    """A copy of the run's MLflow database, a client on it, and its URI (the original stays untouched)."""
    from mlflow import MlflowClient

    shutil.copy(verified_run.root / "mlflow.db", tmp_path / "mlflow.db")
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    return MlflowClient(tracking_uri=uri), uri


def _manifest(run: Run) -> dict[str, str]:
    return dict(json.loads((run.directory / layout.MANIFEST).read_text())["mlflow"])


@pytest.mark.parametrize("tag", ["run_id", "full_config_hash", "data_fingerprint", "artifact_uri"])
def test_mlflow_version_tag_changed(verified_run: Run, registry: tuple[Any, str], tag: str) -> None:
    client, uri = registry
    ref = _manifest(verified_run)
    client.set_model_version_tag(ref["model_name"], ref["model_version"], tag, "tampered")
    report = verify_at(verified_run, uri)
    assert report.failed() == ("mlflow",)
    assert_fails(report, "mlflow", f"model version tag {tag} is 'tampered'")


def test_mlflow_run_tag_changed(verified_run: Run, registry: tuple[Any, str]) -> None:
    client, uri = registry
    client.set_tag(_manifest(verified_run)["mlflow_run_id"], "full_config_hash", "0" * 64)
    assert_fails(verify_at(verified_run, uri), "mlflow", "MLflow run tag full_config_hash")


def test_a_version_registered_from_the_same_run_under_another_root_passes(
    verified_run: Run, registry: tuple[Any, str]
) -> None:
    """Roots sharing one MLflow share its one version per full_config_hash: the same configuration and data run
    under a second root reuses the first root's version, tagged with the first root's run folder. Every run of
    the second root used to FAIL verify, forever (FORCE_RERUN reuses the same version)."""
    client, uri = registry
    ref = _manifest(verified_run)
    elsewhere = f"file:///other/root/{layout.RUNS_DIR}/{verified_run.run_id}"

    def tag(version: str, run: str) -> None:
        client.set_model_version_tag(ref["model_name"], ref["model_version"], "artifact_uri", version)
        client.set_tag(ref["mlflow_run_id"], "artifact_uri", run)

    tag(f"{elsewhere}/model", f"{elsewhere}/model")
    report = verify_at(verified_run, uri)
    assert report.status is Status.PASS, report.check("mlflow").reason
    assert any(elsewhere in line and "another pipeline root" in line for line in report.check("mlflow").details)
    another_run = elsewhere.replace(verified_run.run_id, "0" * 12)
    for version, run in ((f"{another_run}/model",) * 2, (f"{elsewhere}/model", "tampered"), (elsewhere,) * 2):
        tag(version, run)
        assert_fails(verify_at(verified_run, uri), "mlflow", "tag artifact_uri is")


def test_mlflow_version_deleted(verified_run: Run, registry: tuple[Any, str]) -> None:
    client, uri = registry
    ref = _manifest(verified_run)
    client.delete_model_version(ref["model_name"], ref["model_version"])
    assert_fails(verify_at(verified_run, uri), "mlflow", "not found")


def test_chain_block_payload_changed(tampered: Run) -> None:
    versions = tampered.root / "ml8s_chain" / "ml8s-model" / "versions"
    (payload,) = versions.glob("v0000000001_*/payload/model_native.safetensors")
    original = payload.read_bytes()
    try:
        payload.write_bytes(original[:-1] + bytes([original[-1] ^ 0xFF]))
        assert_fails(verify(tampered), "chain", "model_native.safetensors")
    finally:
        payload.write_bytes(original)
    assert verify(tampered).status is Status.PASS


def test_run_missing_from_the_chain(tampered: Run) -> None:
    index = tampered.root / "ml8s_chain" / "ml8s-model" / "runs"
    moved = tampered.root / "runs-aside"
    index.rename(moved)
    try:
        assert_fails(verify(tampered), "chain", "not in chain")
    finally:
        moved.rename(index)


def test_mlflow_duplicate_version(verified_run: Run, registry: tuple[Any, str]) -> None:
    client, uri = registry
    ref = _manifest(verified_run)
    version = client.get_model_version(ref["model_name"], ref["model_version"])
    with registry_resolves_with(uri):  # the source is a logged model (models:/...), which MLflow looks up
        client.create_model_version(ref["model_name"], version.source, run_id=version.run_id, tags=version.tags)
    assert_fails(verify_at(verified_run, uri), "mlflow", "one registered version per")


def test_mlflow_database_missing_is_a_fail_and_is_not_created(verified_run: Run, tmp_path: Path) -> None:
    report = verify_at(verified_run, f"sqlite:///{tmp_path}/absent.db")
    assert_fails(report, "mlflow", "does not exist")
    assert not (tmp_path / "absent.db").exists()


# --------------------------------------------------------------------------------------- data drift


def test_recheck_data_reports_drift(verified_run: Run) -> None:
    part = verified_run.data / "part-000.csv"
    original = part.read_bytes()
    assert verify_run(str(verified_run.root), verified_run.run_id, {}, recheck_data=True).passed
    try:
        part.write_bytes(original + b"C99999,12,50.5,basic,true,no\n")
        report = verify_run(str(verified_run.root), verified_run.run_id, {}, recheck_data=True)
    finally:
        part.write_bytes(original)
    assert report.failed() == ("data_recheck",)
    assert_fails(report, "data_recheck", "DATA_ROOT drifted", "changed part-000.csv")


# ------------------------------------------------------------------------------------- Flyte + Deck

_WORKFLOW_PROBE = """
import json, sys
import workflows.verify as wf
import tasks.verify as t
light = sorted(m for m in ("torch", "mlflow") if m in sys.modules)
decks = []
class Recorder:
    def __init__(self, name, html):
        decks.append((name, html))
t.Deck = Recorder
report = json.loads(wf.verify_run(run_id=sys.argv[1], pipeline_root_uri=sys.argv[2]))
print(json.dumps({"light": light, "enable_deck": t.verify_run_task.enable_deck, "report": report, "decks": decks}))
"""


def test_verify_workflow_returns_the_report_and_renders_a_deck(verified_run: Run) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _WORKFLOW_PROBE, verified_run.run_id, str(verified_run.root)],
        cwd=REPO,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    probe = json.loads(done.stdout.strip().splitlines()[-1])
    assert probe["light"] == [] and probe["enable_deck"] is True
    assert probe["report"]["status"] == "PASS"
    [(name, html)] = probe["decks"]
    assert name == "verification" and "<table" in html
    assert all(f"<code>{check}</code>" in html for check in CHECKS)


def test_a_large_artifact_is_hashed_where_it_lies_not_copied(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file over the record bound was downloaded into $TMPDIR to be hashed (a sparse 64 GiB artifact wrote
    64 GiB there); it is hashed as it streams from the store, and a link there is an integrity failure."""
    import hashlib

    from ml8s.audit.state import RunState
    from ml8s.errors import IntegrityError
    from ml8s.store import LocalStore

    run = tmp_path / "root" / layout.run_prefix("r")
    (run / "features").mkdir(parents=True)
    data = os.urandom(1 << 20) * 17  # over the 16 MiB read whole
    (run / "features/feature_matrix.parquet").write_bytes(data)
    (run / "linked").symlink_to(run / "features/feature_matrix.parquet")
    store = LocalStore(str(tmp_path / "root"))
    state = RunState("", "r", {}, store=store)
    monkeypatch.setattr(store, "download", None)  # a copy fails the test
    assert state.digest("features/feature_matrix.parquet") == (hashlib.sha256(data).hexdigest(), len(data))
    state._listing = {**state.listing(), "linked": state.listing()["features/feature_matrix.parquet"]}
    with pytest.raises(IntegrityError, match="linked"):
        state.digest("linked")


@pytest.mark.parametrize("what", ["link", "fifo"])
def test_a_marker_that_is_no_regular_file_fails(tampered: Run, tmp_path: Path, what: str) -> None:
    # The listing follows a link to a file: a link to any empty file was taken for the marker and PASSed.
    marker = tampered.directory / layout.SUCCESS_MARKER
    marker.unlink()
    (tmp_path / "empty").write_bytes(b"")
    {"link": lambda: marker.symlink_to(tmp_path / "empty"), "fifo": lambda: os.mkfifo(marker)}[what]()
    report = verify(tampered)
    assert report.failed() == ("marker",)
    assert_fails(report, "marker", "is no regular file (a symbolic link, FIFO, socket or device)")


@pytest.mark.parametrize("where", ["features/outside", "extra.fifo", "."])
def test_a_link_or_fifo_planted_in_the_run_fails_unexpected_files(tampered: Run, tmp_path: Path, where: str) -> None:
    # The listing leaves out a link to a directory and a FIFO, and reads a run directory that is a link through it:
    # unexpected_files saw nothing, and the run PASSed.
    planted = tampered.directory / where
    if where == "features/outside":
        planted.symlink_to(tmp_path, target_is_directory=True)
    elif where == "extra.fifo":
        os.mkfifo(planted)
    else:
        real = tmp_path / "real"
        shutil.copytree(tampered.directory, real)
        shutil.rmtree(tampered.directory)
        tampered.directory.symlink_to(real, target_is_directory=True)
    try:
        report = verify(tampered)
    finally:
        if where == ".":
            tampered.directory.unlink()
            tampered.directory.mkdir()
    if where == ".":  # no record is read through the link (the store's reads walk without following one)
        assert report.failed() == ("config_snapshot", "data_fingerprint", "training_metadata", "manifest")
        for check in report.failed():
            assert_fails(report, check, f"under file://{tampered.directory}: a symbolic link; expected a directory")
            assert_fails(report, check, "never followed (nothing read)")
        return
    assert report.failed() == ("unexpected_files",)
    assert_fails(report, "unexpected_files", f"unexpected entry {where}")


@pytest.mark.parametrize("length", [2**64 - 1, 2**40])
def test_native_weights_whose_header_length_is_absurd_fail_not_crash(tampered: Run, length: int) -> None:
    # Over 16 MiB, so streamed: the safetensors length field was read as a count of bytes to read, and verify (and
    # audit bundle) ended in OverflowError or MemoryError, with no report.
    weights = tampered.directory / layout.MODEL_NATIVE
    with open(weights, "wb") as handle:
        handle.write(length.to_bytes(8, "little"))
        handle.truncate(layout.RECORD_MAX_BYTES + 1024)
    assert_fails(verify(tampered), "training_metadata", "the native weights' safetensors header cannot be read")


def test_a_stray_file_named_with_a_newline_prints_no_report_line_of_its_own(tampered: Run) -> None:
    # The unexpected_files reason carried the name as it is: its newline printed a forged 'RESULT: PASS' line.
    (tampered.directory / "x\nRESULT: PASS (10 checks)\x1b[2J").write_bytes(b"planted")
    report = verify(tampered)
    assert report.failed() == ("unexpected_files",)
    text = render_text(report)
    assert "\x1b" not in text and "x\\nRESULT: PASS (10 checks)\\x1b[2J" in text
    assert [line for line in text.splitlines() if line.startswith("RESULT")] == [
        "RESULT: FAIL (1 of 10 checks failed: unexpected_files)"
    ]


def test_a_stray_file_named_with_a_line_separator_prints_no_report_line_of_its_own(tampered: Run) -> None:
    # U+2028 and U+2029 break a line where a terminal or log viewer honours them; the report escaped category C
    # only (they are Zl and Zp), so the name's 'RESULT: PASS' could read as a line of its own.
    (tampered.directory / "x\u2028RESULT: PASS (10 checks)\u2029\u202eb").write_bytes(b"planted")
    text = render_text(verify(tampered))
    assert not {"\u2028", "\u2029", "\u202e"} & set(text), text
    assert "x\\u2028RESULT: PASS (10 checks)\\u2029\\u202eb" in text, text


def test_a_nan_version_committed_by_another_hand_is_a_note_of_a_runs_verify_not_its_fail(
    verified_run: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ml8s chain verify reports a version whose weights hold a NaN (weights_nan). A run's own verify checks its
    whole chain, so one such version (committed before commits refused NaN, or by hand) failed the verify of every
    run on that chain for good, though each passed its own steps: it is a note unless it is the run's version."""
    import torch
    from serving_support import meta

    from ml8s.chain import ChainStore
    from ml8s.store import LocalStore
    from ml8s.weights import commit_weights

    kept = verified_run.root / "ml8s_chain"
    shutil.copytree(kept, tmp_path / "chain")  # the shared run's chain, put back after (a copied root is another case)
    try:
        chain = ChainStore(LocalStore(str(verified_run.root)), "ml8s-model")
        monkeypatch.setattr("ml8s.weights.commit.first_nan", lambda tensors: None)  # as an older ml8s committed it
        commit_weights(chain, {"w": torch.tensor([1.0, float("nan")])}, meta("nan"), interval=1)
        report = verify(verified_run)
    finally:
        shutil.rmtree(kept)
        shutil.copytree(tmp_path / "chain", kept)
    chain_result = report.check("chain")
    failed = [(c.name, c.reason, c.details) for c in report.checks if c.status is Status.FAIL]
    assert report.status is Status.PASS, failed
    assert any(d.startswith("weights_nan: v2 ") for d in chain_result.details), chain_result.details


def test_an_older_full_without_a_weights_hash_is_checked_for_nan_and_what_cannot_be_is_said(
    verified_run: Run, tmp_path: Path
) -> None:
    """A FULL committed by an older ml8s records no weights hash, so verify rebuilt nothing and a NaN in it went
    unreported; its weights are read anyway, and a payload that is no safetensors is a 'not checked' note."""
    import safetensors.torch
    import torch
    from serving_support import meta

    from ml8s.chain import WEIGHTS_FULL, ChainStore, ChainVersion, PayloadBuilder, RetryPolicy, WeightsFields
    from ml8s.store import LocalStore

    def old_full(data: bytes) -> PayloadBuilder:
        return lambda _v: ({WEIGHTS_FULL: data}, WeightsFields())

    kept = verified_run.root / "ml8s_chain"
    shutil.copytree(kept, tmp_path / "chain")  # the shared run's chain, put back after
    try:
        chain = ChainStore(LocalStore(str(verified_run.root)), "ml8s-model")
        nan = safetensors.torch.save({"w": torch.tensor([1.0, float("nan")])})
        chain.commit_with_retry(old_full(nan), meta("old-nan"), RetryPolicy())
        chain.commit_with_retry(old_full(b"no safetensors"), meta("old-opaque"), RetryPolicy())
        versions: list[ChainVersion] = chain.list()
        report = verify(verified_run)
    finally:
        shutil.rmtree(kept)
        shutil.copytree(tmp_path / "chain", kept)
    assert [v.header.weights_hash for v in versions[-2:]] == ["", ""]
    details = report.check("chain").details
    assert report.status is Status.PASS, [(c.name, c.reason) for c in report.checks]  # not this run's version
    assert any(d.startswith("weights_nan: v2 tensor 'w' holds NaN (element 1)") for d in details), details
    assert any(d.startswith("not checked: v3: weights_nan not checked: ") for d in details), details
