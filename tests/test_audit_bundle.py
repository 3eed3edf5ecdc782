"""``ml8s audit bundle`` / ``ml8s audit verify`` (issue 5): deterministic bundles, verified offline.

Uses the completed run of test_verify.py (one per session).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import shutil
import tarfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from tar_support import tar_bytes
from test_verify import Run, clean_env, ml8s, restore, verified_run  # noqa: F401  (a fixture)

from ml8s.audit import Status, build_bundle, verify_bundle, write_bundle
from ml8s.audit.bundle import CHECKSUMS, BundleEntry, write_archive
from ml8s.audit.bundle_open import OpenedBundle, open_bundle
from ml8s.audit.chain_proof import CHAIN_PROOF
from ml8s.contract import checksum_lines, layout

# The check that FAILs when a member is changed *and* checksums.sha256 is recomputed to match.
SEMANTIC = {
    "run/config_snapshot.json": "config_snapshot",
    "run/data_fingerprint.json": "data_fingerprint",
    "run/training_metadata.json": "training_metadata",
    "run/manifest.json": "manifest",
    "run/metrics.json": "artifacts",
    "run/features/feature_schema.json": "artifacts",
    "run/model/model.onnx": "artifacts",
    "run/model/model_native.safetensors": "artifacts",
    "artifacts.sha256": "artifacts",
    "mlflow.json": "mlflow",
    "chain_proof.json": "chain",
    "verification.json": "verification",
    "bundle.json": "archive",
    "VERIFY.md": "verify_md",
}


@pytest.fixture(scope="module")
def run(verified_run: Run) -> Iterator[Run]:  # noqa: F811  (the imported fixture, requested)
    restore(verified_run)
    yield verified_run


@pytest.fixture(scope="module")
def bundle(run: Run, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A bundle written by `ml8s audit bundle` in its own process."""
    out = tmp_path_factory.mktemp("bundle") / "bundle.tar.gz"
    done = ml8s(clean_env(PIPELINE_ROOT_URI=str(run.root)), "audit", "bundle", run.run_id, "-o", str(out))
    assert done.returncode == 0, done.stderr
    return out


def members(path: Path) -> dict[str, bytes]:
    return open_bundle(str(path)).members


def repack(source: Path, target: Path, change: str, *, fix_checksums: bool) -> None:
    """Rewrite the bundle with one member's middle byte flipped (and its checksum list updated, or not)."""
    data = dict(members(source))
    flipped = bytearray(data[change])
    flipped[len(flipped) // 2] ^= 0x01 if change.endswith(".md") else 0xFF
    data[change] = bytes(flipped)
    if fix_checksums:
        data[CHECKSUMS] = checksum_lines(
            {rel: hashlib.sha256(body).hexdigest() for rel, body in data.items() if rel != CHECKSUMS}
        )
    top = open_bundle(str(source)).top
    write_bundle(str(target), write_archive(top, [BundleEntry(rel, body) for rel, body in data.items()]))


def test_bundle_contents_and_determinism(run: Run, bundle: Path, tmp_path: Path) -> None:
    again = tmp_path / "again.tar.gz"
    done = ml8s(clean_env(PIPELINE_ROOT_URI=str(run.root)), "audit", "bundle", run.run_id, "-o", str(again))
    assert done.returncode == 0, done.stderr
    assert again.read_bytes() == bundle.read_bytes()  # two processes, byte-identical
    with tarfile.open(bundle) as archive:
        infos = archive.getmembers()
    assert [i.name for i in infos] == sorted(i.name for i in infos)
    assert {(i.mtime, i.uid, i.gid, i.uname, i.gname, i.mode) for i in infos} == {(0, 0, 0, "", "", 0o644)}
    assert bundle.read_bytes()[4:8] == b"\0\0\0\0"  # gzip header mtime 0
    got = members(bundle)
    assert sorted(got) == sorted([*SEMANTIC, CHECKSUMS])
    for rel in (layout.CONFIG_SNAPSHOT, layout.MANIFEST, "model/model.onnx"):
        assert got[f"run/{rel}"] == (run.directory / rel).read_bytes()
    listed = dict(line.split("  ")[::-1] for line in got["artifacts.sha256"].decode().splitlines())
    for rel in layout.final_artifacts("onnx"):
        assert listed[rel] == hashlib.sha256((run.directory / rel).read_bytes()).hexdigest()
    assert "ml8s audit verify" in got["VERIFY.md"].decode()


def test_audit_verify_passes_offline_after_the_store_is_gone(run: Run, bundle: Path) -> None:
    away = run.root.with_name(run.root.name + "-gone")
    env = clean_env(AWS_ENDPOINT_URL="http://127.0.0.1:9", MLFLOW_TRACKING_URI="http://127.0.0.1:9")
    run.root.rename(away)  # the store and its MLflow database no longer exist where the bundle names them
    try:
        done = ml8s(env, "audit", "verify", str(bundle))
        as_json = ml8s(env, "audit", "verify", str(bundle), "--json")
    finally:
        away.rename(run.root)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[-1] == "RESULT: PASS (11 checks)"
    assert json.loads(as_json.stdout)["status"] == "PASS"


@pytest.mark.parametrize("where", [0.25, 0.5, 0.75])
def test_flipped_byte_in_the_archive_fails(bundle: Path, tmp_path: Path, where: float) -> None:
    data = bytearray(bundle.read_bytes())
    data[int(len(data) * where)] ^= 0xFF
    (tmp_path / "b.tar.gz").write_bytes(bytes(data))
    report = verify_bundle(str(tmp_path / "b.tar.gz"))
    assert report.status is Status.FAIL
    assert "archive" in report.failed() or "checksums" in report.failed()
    done = ml8s(clean_env(), "audit", "verify", str(tmp_path / "b.tar.gz"))
    assert done.returncode == 1 and "RESULT: FAIL" in done.stdout


@pytest.mark.parametrize("member", [*SEMANTIC, CHECKSUMS])
def test_flipped_member_fails_checksums(bundle: Path, tmp_path: Path, member: str) -> None:
    repack(bundle, tmp_path / "b.tar.gz", member, fix_checksums=False)
    report = verify_bundle(str(tmp_path / "b.tar.gz"))
    assert "checksums" in report.failed(), report.failed()


@pytest.mark.parametrize("member", sorted(SEMANTIC))
def test_flipped_member_with_recomputed_checksums_fails_its_check(bundle: Path, tmp_path: Path, member: str) -> None:
    repack(bundle, tmp_path / "b.tar.gz", member, fix_checksums=True)
    report = verify_bundle(str(tmp_path / "b.tar.gz"))
    assert report.failed() and "checksums" not in report.failed()
    assert SEMANTIC[member] in report.failed(), (member, report.failed())


def test_unsafe_or_foreign_archives_fail(tmp_path: Path) -> None:
    evil = gzip.compress(tar_bytes({"ml8s-audit-x/../../etc/passwd": b"x"}))
    (tmp_path / "evil.tar.gz").write_bytes(evil)
    report = verify_bundle(str(tmp_path / "evil.tar.gz"))
    assert report.check("archive").status is Status.FAIL and "unsafe" in report.check("archive").reason
    assert verify_bundle(str(tmp_path / "absent.tar.gz")).failed()[0] == "archive"


@pytest.mark.parametrize("output", ["", " "])
def test_an_empty_output_path_is_a_usage_error(run: Run, output: str) -> None:
    # -o "$UNSET" verified the run, then failed 'cannot write the bundle to : Is a directory' (exit 1)
    done = ml8s(clean_env(PIPELINE_ROOT_URI=str(run.root)), "audit", "bundle", run.run_id, "-o", output)
    assert done.returncode == 2 and done.stdout == ""
    assert f"argument -o/--output: {output!r} is empty; expected the path of a file to write" in done.stderr


def test_bundle_without_model_and_refusal_of_a_failing_run(run: Run, tmp_path: Path) -> None:
    data, report = build_bundle(str(run.root), run.run_id, {}, include_model=False)
    assert report.passed
    write_bundle(str(tmp_path / "b.tar.gz"), data)
    got = members(tmp_path / "b.tar.gz")
    assert not [rel for rel in got if rel.startswith("run/model/")]
    assert verify_bundle(str(tmp_path / "b.tar.gz")).passed
    (run.directory / layout.METRICS).write_bytes(b"{}\n")
    try:
        done = ml8s(
            clean_env(PIPELINE_ROOT_URI=str(run.root)), "audit", "bundle", run.run_id, "-o", str(tmp_path / "x")
        )
        assert done.returncode == 1 and "VERIFICATION_FAILED" in done.stderr and "artifacts" in done.stderr
        assert not (tmp_path / "x").exists()
        evidence, failed = build_bundle(str(run.root), run.run_id, {}, allow_failed=True)
        write_bundle(str(tmp_path / "evidence.tar.gz"), evidence)
        assert failed.failed() == ("artifacts",)
        assert "verification" in verify_bundle(str(tmp_path / "evidence.tar.gz")).failed()
    finally:
        restore(run)
    assert os.path.exists(run.directory / layout.METRICS)


def test_bundle_to_standard_output_is_the_archive_alone(
    run: Run, bundle: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    """`-o -` wrote a file named '-', and after `-o /dev/stdout | ...` the 'wrote ...' line was appended to the
    .tar.gz on stdout: the saved stream then failed its archive check."""
    from ml8s.cli.main import main

    monkeypatch.chdir(tmp_path)
    for name in set(os.environ) - set(clean_env()):  # as the bundle fixture's process ran
        monkeypatch.delenv(name)
    assert main(["audit", "bundle", run.run_id, "-o", "-", "--root", str(run.root)]) == 0
    out, err = capsysbinary.readouterr()
    assert out == bundle.read_bytes()
    assert b"wrote the bundle to standard output" in err
    assert list(tmp_path.iterdir()) == []


def test_a_run_file_no_checksum_lists_is_named_as_such(bundle: Path, tmp_path: Path) -> None:
    """An extra file under run/ (its member checksum added) was reported as 'artifacts.sha256 lists None'."""
    data = dict(members(bundle))
    data["run/extra.txt"] = b"planted"
    data[CHECKSUMS] = checksum_lines(
        {rel: hashlib.sha256(body).hexdigest() for rel, body in data.items() if rel != CHECKSUMS}
    )
    top = open_bundle(str(bundle)).top
    target = tmp_path / "b.tar.gz"
    write_bundle(str(target), write_archive(top, [BundleEntry(rel, body) for rel, body in data.items()]))
    problems = [p for check in verify_bundle(str(target)).checks for p in (check.reason, *check.details)]
    assert any("run/extra.txt is bundled, but" in p and "does not list it" in p for p in problems), problems
    assert not any("None" in p for p in problems)


def test_a_member_name_that_is_not_utf8_is_shown_escaped(bundle: Path, tmp_path: Path) -> None:
    """A member named with a byte that is not UTF-8 was printed raw (or failed printing); it is shown as \\xff."""
    import gzip
    import io
    import tarfile

    top = open_bundle(str(bundle)).top
    buffer = io.BytesIO()
    with (
        gzip.GzipFile(filename="", mode="wb", fileobj=buffer, mtime=0) as zipped,
        tarfile.open(fileobj=zipped, mode="w", format=tarfile.GNU_FORMAT, errors="surrogateescape") as tar,
    ):
        for rel, body in sorted({**members(bundle), "run/caf\udcff.txt": b"planted"}.items()):
            info = tarfile.TarInfo(f"{top}/{rel}")
            info.size = len(body)
            tar.addfile(info, io.BytesIO(body))
    target = tmp_path / "b.tar.gz"
    target.write_bytes(buffer.getvalue())
    report = verify_bundle(str(target))
    problems = [p for check in report.checks for p in (check.reason, *check.details)]
    assert any("run/caf\\xff.txt is in the bundle but not in" in p for p in problems), problems
    assert not any("\udcff" in p for p in problems)


def forge(bundle: Path, target: Path, change: Callable[[dict[str, bytes]], None]) -> None:
    """Rewrite the bundle with ``change`` made to its members and every list recomputed to match, as a forger would:
    artifacts.sha256 (the bundled run files), VERIFY.md and checksums.sha256. Only chain_proof.json is beyond reach."""
    from ml8s.audit import mlflow_refs
    from ml8s.audit.bundle import ARTIFACT_CHECKSUMS, MLFLOW, VERIFICATION, VERIFY_MD
    from ml8s.audit.report import Report
    from ml8s.audit.verify_md import verify_md

    opened = open_bundle(str(bundle))
    data = dict(opened.members)
    change(data)
    listed = opened.checksum_list(ARTIFACT_CHECKSUMS)
    listed |= {rel[4:]: hashlib.sha256(data[rel]).hexdigest() for rel in data if rel[4:] in listed}
    data[ARTIFACT_CHECKSUMS] = checksum_lines(listed)
    forged = OpenedBundle(opened.path, opened.top, data, ())
    index = forged.index()
    data[VERIFY_MD] = verify_md(
        artifact_root=index.artifact_root,
        snapshot=forged.snapshot(),
        checksum_kind=forged.fingerprint_record().checksum,
        artifact_sha256=listed,
        report=forged.parse(VERIFICATION, Report),
        view=forged.parse(MLFLOW, mlflow_refs.MlflowView),
        models=index.model_files,
    ).encode("utf-8")
    data[CHECKSUMS] = checksum_lines(
        {rel: hashlib.sha256(body).hexdigest() for rel, body in data.items() if rel != CHECKSUMS}
    )
    write_bundle(str(target), write_archive(opened.top, [BundleEntry(rel, body) for rel, body in data.items()]))


def test_the_forge_helper_alone_changes_no_verdict(bundle: Path, tmp_path: Path) -> None:
    """The forge helper is faithful: a bundle rewritten with no change still PASSes (so the tests below can fail)."""
    forge(bundle, tmp_path / "b.tar.gz", lambda data: None)
    assert verify_bundle(str(tmp_path / "b.tar.gz")).passed


def test_an_edit_of_training_metadata_with_every_list_recomputed_fails_the_chain_check(
    bundle: Path, tmp_path: Path
) -> None:
    """training_metadata.json's sha256 is recorded in no run file, only in the chain block; the offline chain check
    compared the block with the weights and the manifest alone, so a library version edited in the bundle (with
    artifacts.sha256, VERIFY.md and checksums.sha256 recomputed) PASSed every check."""

    def edit(data: dict[str, bytes]) -> None:
        record = json.loads(data[f"run/{layout.TRAINING_METADATA}"])
        record["versions"]["torch"] += ".edited"
        data[f"run/{layout.TRAINING_METADATA}"] = (json.dumps(record, indent=2, sort_keys=True) + "\n").encode()

    forge(bundle, tmp_path / "b.tar.gz", edit)
    report = verify_bundle(str(tmp_path / "b.tar.gz"))
    assert report.failed() == ("chain",), [(c.name, c.reason) for c in report.checks]
    assert f"records another {layout.TRAINING_METADATA} than the bundle's" in report.check("chain").reason


def test_a_bundle_relabelled_to_another_root_cannot_hide_where_its_run_was_committed(
    bundle: Path, run: Run, tmp_path: Path
) -> None:
    """The chain holds the manifest without its artifact_root: a bundle whose records all say the run lives under
    another root (manifest, bundle.json, mlflow.json, verification.json rewritten, lists recomputed) PASSed, though
    the run's block header records where it really lives. Where a run lives now no bundle proves offline (a copied
    root's bundle says the same, truly: the next test), so the chain check names where the block was committed, as
    ``ml8s verify``'s does; a location that is no RUN_ID folder under a root FAILs."""
    here, committed_at = f"file://{run.root}/".encode(), f"file://{run.root}/{layout.run_prefix(run.run_id)}"

    def relabel(there: bytes, what: bytes = here) -> Callable[[dict[str, bytes]], None]:
        def change(data: dict[str, bytes]) -> None:
            for rel in [rel for rel in data if rel != CHAIN_PROOF]:
                data[rel] = data[rel].replace(what, there)

        return change

    forge(bundle, tmp_path / "b.tar.gz", relabel(b"file:///srv/prod/"))
    report = verify_bundle(str(tmp_path / "b.tar.gz"))
    assert report.failed() == (), [(c.name, c.reason) for c in report.checks]
    assert report.check("chain").details == (
        f"recorded at another root: the run's block v1 was committed from {committed_at}; the bundle says the run is "
        f"at file:///srv/prod/{layout.run_prefix(run.run_id)} (the pipeline root was copied or moved from "
        f"file://{run.root})",
    )
    forge(bundle, tmp_path / "c.tar.gz", relabel(f"file:///srv/prod/{run.run_id}".encode(), committed_at.encode()))
    report = verify_bundle(str(tmp_path / "c.tar.gz"))
    assert "chain" in report.failed(), [(c.name, c.reason) for c in report.checks]
    assert f"records artifact_root {committed_at!r}; the bundle says 'file:///srv/prod/" in report.check("chain").reason


def test_a_copied_root_audits_as_the_original(run: Run, tmp_path: Path) -> None:
    """cp -a of a pipeline root, the run recorded again there (FORCE_RERUN, as docs/audits.md says), bundled there:
    ``ml8s verify`` PASSed at the copy, but the bundle's offline chain check FAILed, the block recording the root
    it was committed at and the bundle the copy's. It PASSes now, naming where the block was committed."""
    copy = tmp_path / "copy"
    shutil.copytree(run.root, copy, symlinks=True)
    env = clean_env(DATA_ROOT=str(run.data), TARGET_COLUMN="churned", PIPELINE_ROOT_URI=str(copy), EPOCHS="2")
    forced = ml8s(env, "run", "--force-rerun")
    assert forced.returncode == 0, forced.stderr
    out = tmp_path / "copy.tar.gz"
    done = ml8s(clean_env(PIPELINE_ROOT_URI=str(copy)), "audit", "bundle", run.run_id, "-o", str(out))
    assert done.returncode == 0, done.stderr
    report = verify_bundle(str(out))
    assert report.status is Status.PASS, [(c.name, c.reason) for c in report.checks]
    assert report.check("chain").details == (
        f"recorded at another root: the run's block v1 was committed from {run.root.as_uri()}/"
        f"{layout.run_prefix(run.run_id)}; the bundle says the run is at {copy.as_uri()}/"
        f"{layout.run_prefix(run.run_id)} (the pipeline root was copied or moved from {run.root.as_uri()})",
    )
    done = ml8s(clean_env(), "audit", "verify", str(out))
    assert done.returncode == 0 and "RESULT: PASS (11 checks)" in done.stdout, done.stdout + done.stderr


def test_model_files_larger_than_a_record_are_bundled(
    run: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Model files were read with a record's 16 MiB bound: a run whose model is larger (but under the bundle's
    256 MiB) could not be bundled at all (AUDIT_BUNDLE_ERROR '... expected a record of at most ... bytes').
    Here the record bound is lowered below this run's model files, above its records."""
    import ml8s.audit.state as state

    models = [run.directory / rel for rel in (layout.MODEL_NATIVE, "model/model.onnx")]
    bound = min(path.stat().st_size for path in models) - 1
    assert max((run.directory / rel).stat().st_size for rel in (layout.TRAINING_METADATA, layout.MANIFEST)) < bound
    monkeypatch.setattr(state, "_SMALL", bound)
    data, report = build_bundle(str(run.root), run.run_id, {})
    assert report.passed
    write_bundle(str(tmp_path / "b.tar.gz"), data)
    got = members(tmp_path / "b.tar.gz")
    for path in models:
        assert got[f"run/{path.relative_to(run.directory)}"] == path.read_bytes()
    assert verify_bundle(str(tmp_path / "b.tar.gz")).passed


def test_a_snapshot_recording_a_billion_ranks_is_checked_at_once(bundle: Path, tmp_path: Path) -> None:
    """TRAIN_WORLD_SIZE of an edited snapshot was trusted up to any size: 10**9 (canonical form kept) had the
    layout list 10**9 shard names, and `ml8s audit verify` (and `ml8s verify`) ran for minutes into memory
    exhaustion. Above the bound a run accepts, the layout expects one rank's files; the snapshot check FAILs."""
    from ml8s.identity.hashing import canonical_bytes
    from ml8s.identity.params import MAX_WORLD_SIZE
    from ml8s.identity.versions import world_size_of

    assert world_size_of({"train_world_size": 10**9}) == 1
    assert world_size_of({"train_world_size": MAX_WORLD_SIZE}) == MAX_WORLD_SIZE

    def edit(data: dict[str, bytes]) -> None:
        snapshot = json.loads(data[f"run/{layout.CONFIG_SNAPSHOT}"])
        snapshot["canonical_config"]["train_world_size"] = 10**9
        data[f"run/{layout.CONFIG_SNAPSHOT}"] = canonical_bytes(snapshot)

    forge(bundle, tmp_path / "b.tar.gz", edit)
    report = verify_bundle(str(tmp_path / "b.tar.gz"))
    assert "config_snapshot" in report.failed()


def test_a_spec_with_more_hidden_layers_than_a_run_accepts_is_named_not_rebuilt(bundle: Path, tmp_path: Path) -> None:
    """The check rebuilt the family's layers, one per hidden layer, from an edited training_metadata.json: 10**6
    took 35 s, 10**9 never ended (`ml8s verify` too). Past the bound a run accepts, it is a problem, not rebuilt."""
    from ml8s.identity.params import MAX_HIDDEN_LAYERS

    def edit(data: dict[str, bytes]) -> None:
        record = json.loads(data[f"run/{layout.TRAINING_METADATA}"])
        record["model"]["spec"]["hidden_layers"] = MAX_HIDDEN_LAYERS + 1
        data[f"run/{layout.TRAINING_METADATA}"] = (json.dumps(record, indent=2, sort_keys=True) + "\n").encode()

    forge(bundle, tmp_path / "b.tar.gz", edit)
    check = verify_bundle(str(tmp_path / "b.tar.gz")).check("training_metadata")
    assert check.status is Status.FAIL
    said = f"model.spec.hidden_layers is {MAX_HIDDEN_LAYERS + 1}; a run accepts 0 to {MAX_HIDDEN_LAYERS}"
    assert any(said in p for p in (check.reason, *check.details)), (check.reason, check.details)


def test_a_member_name_with_a_newline_or_an_escape_prints_no_line_of_its_own(bundle: Path, tmp_path: Path) -> None:
    """A member named 'run/x\\nRESULT: PASS (11 checks)' (with an escape sequence) passed the archive check as a
    'safe name', and its name, in the checksums and artifacts reasons, printed forged report lines to the terminal."""
    from ml8s.audit import render_text

    opened = open_bundle(str(bundle))
    forged = "run/x\nPASS  chain  fine\x1b[2J\nRESULT: PASS (11 checks)"
    entries = [BundleEntry(rel, body) for rel, body in {**opened.members, forged: b"x"}.items()]
    write_bundle(str(tmp_path / "b.tar.gz"), write_archive(opened.top, entries))
    report = verify_bundle(str(tmp_path / "b.tar.gz"))
    assert "archive" in report.failed() and "unsafe or unexpected member" in report.check("archive").reason
    text = render_text(report)
    assert "\x1b" not in text
    assert [line for line in text.splitlines() if line.startswith(("RESULT", "PASS  chain  fine"))] == [
        text.splitlines()[-1]
    ]
    assert text.splitlines()[-1].startswith("RESULT: FAIL")


@pytest.mark.parametrize("where", ["run", "runs"])
def test_a_bundle_is_never_written_into_the_run_folders(
    run: Run, where: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`-o` inside the run's ARTIFACT_ROOT wrote the bundle there: the run it proves then FAILed its next
    verification (an unexpected file). Refused before anything is read or written."""
    from ml8s.cli.main import main

    target = (run.directory if where == "run" else run.directory.parent) / "bundle.tar.gz"
    try:
        assert main(["audit", "bundle", run.run_id, "-o", str(target), "--root", str(run.root)]) == 1
        assert not target.exists()
    finally:
        target.unlink(missing_ok=True)  # the shared run stays as it was, whatever happened
    assert "inside the run folders of" in capsys.readouterr().err
