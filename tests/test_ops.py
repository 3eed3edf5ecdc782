"""Operator tools (issue 5): tmp-cleanup, resolve-collision (then the new config runs), runs list."""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import write_small_churn
from test_verify import clean_env, ml8s

from ml8s.audit.offline import is_run_id
from ml8s.cli.main import main
from ml8s.cli.ops import _days, _tmp_cleanup
from ml8s.contract import layout
from ml8s.errors import ConfigError, IntegrityError, ResolutionRefusedError, StoreError, UnsafeObjectError
from ml8s.ops.collision import resolve_collision
from ml8s.ops.runs import list_root, list_runs
from ml8s.ops.tmp_cleanup import SEEN_KEY, cleanup_tmp, is_tmp_key
from ml8s.ops.tmp_local import cleanup_local_tmp
from ml8s.store import LocalStore, _walk
from ml8s.tempdirs import OWNER_FILE

REPO = Path(__file__).resolve().parent.parent
RUN = "abcdef012345"
DAY = 86400.0


def plant(root: Path, rel: str, age_days: float) -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x")
    stamp = time.time() - age_days * DAY
    os.utime(path, (stamp, stamp))
    return path


STALE = [  # what a cleanup older than 3 days removes
    f"ml8s_training_runs/{RUN}/.tmp/features-w1.parquet",
    "ml8s_incidents/.tmp/incident-w1.json",
    "ml8s_quarantine/.tmp/quarantine-w1.bin",
]
KEPT = [  # final artifacts, young tmp entries, tmp-like names elsewhere: never removed
    f"ml8s_training_runs/{RUN}/config_snapshot.json",
    f"ml8s_training_runs/{RUN}/model/model.onnx",
    f"ml8s_training_runs/{RUN}/success.marker",
    f"ml8s_training_runs/{RUN}/model/.tmp/x.bin",
    f"ml8s_training_runs/{RUN}/.tmp/export-w2.onnx",  # young
    "ml8s_training_runs/not-a-run/.tmp/x.bin",
    f"ml8s_incidents/{RUN}/run_id_hash_collision-{'f' * 64}.json",
    "ml8s_registry/claims/.tmp/claim.json",
    "ml8s_chain/ml8s-model/.tmp/upload.bin",
]


@pytest.fixture
def planted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The entries, backdated. A file's ctime cannot be set back and the age is measured from it too, so in this
    process a listing takes the backdated mtime for when a file changed: what a file written then shows.
    Commands that judge ages run in this process (``cli``), not in ``ml8s``'s."""
    for rel in [*STALE, *KEPT]:
        plant(tmp_path, rel, 1 if rel.endswith("export-w2.onnx") else 10)
    monkeypatch.setattr(_walk, "changed", lambda info: info.st_mtime)
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path / "local-tmp"))  # not this machine's $TMPDIR
    (tmp_path / "local-tmp").mkdir()
    monkeypatch.delenv("TMP_RETENTION_DAYS", raising=False)
    return tmp_path


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """``ml8s *args`` in this process: exit code, stdout, stderr."""
    capsys.readouterr()
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def remaining(root: Path) -> set[str]:
    """Files under ``root`` but the store's locks and tmp-cleanup's own record of first sightings."""
    found = {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and ".ml8s-locks" not in p.parts}
    return found - {SEEN_KEY}


def test_tmp_cleanup_removes_only_old_tmp_entries(planted: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = LocalStore(str(planted))
    dry = cleanup_tmp(store, 3, dry_run=True)
    assert sorted(e.uri for e in dry.removed) == sorted(store.uri(rel) for rel in STALE) and dry.kept == 1
    assert remaining(planted) == {*STALE, *KEPT}
    assert cleanup_tmp(store, 30).removed == ()  # nothing is 30 days old
    code, out, err = cli(capsys, "tmp-cleanup", "--older-than-days", "3", "--root", str(planted))
    assert code == 0, err
    assert f"removed {len(STALE)} tmp entries older than 3 days; kept 1 younger ones" in out
    assert remaining(planted) == set(KEPT)
    assert ml8s(clean_env(), "tmp-cleanup", "--older-than-days", "-1", "--root", str(planted)).returncode == 2


def test_tmp_cleanup_reports_what_is_no_regular_file_and_leaves_it(planted: Path, tmp_path: Path) -> None:
    """A link to a directory, a dangling link, a FIFO, or a run's ``.tmp`` replaced by a link: never removed
    (nor anything they point to), each named on stderr and in --json; a link to a file is removed, not its target."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious.bin").write_bytes(b"keep")
    run_tmp = planted / f"ml8s_training_runs/{RUN}/.tmp"
    (run_tmp / "to-dir").symlink_to(outside)
    (run_tmp / "dangling").symlink_to(tmp_path / "nowhere")
    os.mkfifo(run_tmp / "fifo")
    (run_tmp / "to-file").symlink_to(outside / "precious.bin")
    other = planted / "ml8s_training_runs" / ("b" * 12)
    other.mkdir()
    (other / ".tmp").symlink_to(outside)
    store = LocalStore(str(planted))
    expected = [store.uri(f"ml8s_training_runs/{RUN}/.tmp/{name}") for name in ("dangling", "fifo", "to-dir")] + [
        store.uri(f"ml8s_training_runs/{'b' * 12}/.tmp")
    ]
    assert list(cleanup_tmp(store, 3, dry_run=True).left_alone) == sorted(expected)
    done = ml8s(clean_env(), "tmp-cleanup", "--older-than-days", "0", "--allow-short-grace", "--root", str(planted))
    assert done.returncode == 0, done.stderr
    warned = [line for line in done.stderr.splitlines() if line.startswith("ml8s: warning: left alone ")]
    assert [line.split()[4].rstrip(":") for line in warned] == sorted(expected)
    assert {p.name for p in run_tmp.iterdir()} == {"to-dir", "dangling", "fifo"}  # the link to a file removed
    assert (outside / "precious.bin").read_bytes() == b"keep" and (other / ".tmp").is_symlink()
    report = json.loads(ml8s(clean_env(), "tmp-cleanup", "--json", "--root", str(planted)).stdout)
    assert report["left_alone"] == sorted(expected)


def test_a_link_to_a_file_is_judged_and_reported_by_its_own_age_and_size(
    planted: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A link made now to a 30-day-old file is no old entry, and an old link to a new file is one: the listing
    (stat, through the link) gave the target's age and size, so the first went at 7 days as '100 bytes, 30.0 days
    old' and the second was kept. The link is judged, removed and reported by its own (lstat); targets stay."""
    run_tmp = planted / f"ml8s_training_runs/{RUN}/.tmp"
    old_target, new_target = tmp_path / "old-target.bin", tmp_path / "new-target.bin"
    for target, age in ((old_target, 30), (new_target, 0)):
        target.write_bytes(b"t" * 100)
        os.utime(target, (time.time() - age * DAY,) * 2)
    (run_tmp / "new-link").symlink_to(old_target)
    (run_tmp / "old-link").symlink_to(new_target)
    stamp = time.time() - 10 * DAY
    os.utime(run_tmp / "old-link", (stamp, stamp), follow_symlinks=False)
    store = LocalStore(str(planted))
    code, out, err = cli(capsys, "tmp-cleanup", "--older-than-days", "7", "--root", str(planted))
    assert code == 0, err
    old_link = store.uri(f"ml8s_training_runs/{RUN}/.tmp/old-link")
    assert f"removed {old_link} ({len(str(new_target))} bytes, 10.0 days old)" in out.splitlines()
    assert "new-link" not in out and "kept 2 younger ones" in out  # export-w2.onnx (1 day) and the new link
    assert {p.name for p in run_tmp.iterdir()} == {"export-w2.onnx", "new-link"}
    assert old_target.read_bytes() == new_target.read_bytes() == b"t" * 100


def test_tmp_cleanup_neither_writes_nor_lists_through_a_linked_directory_on_the_way(
    planted: Path, tmp_path: Path
) -> None:
    """The root's ``.tmp`` linked out of the root: refused before the clock's probe is written through it.
    ``ml8s_training_runs`` linked out: left alone and named, nothing behind it listed, removed or failed on."""
    outside = tmp_path / "outside"
    (outside / RUN / ".tmp").mkdir(parents=True)
    precious = plant(outside, f"{RUN}/.tmp/precious.bin", 10)
    (planted / ".tmp").symlink_to(outside)
    store = LocalStore(str(planted))
    with pytest.raises(UnsafeObjectError, match=r"/\.tmp: a symbolic link; expected the store's staging directory"):
        cleanup_tmp(store, 3)
    assert sorted(p.name for p in outside.iterdir()) == [RUN]  # no clock probe left (or made) there
    (planted / ".tmp").unlink()
    (planted / "ml8s_training_runs").rename(tmp_path / "runs")
    (planted / "ml8s_training_runs").symlink_to(outside)
    for dry_run in (True, False):
        report = cleanup_tmp(store, 3, dry_run=dry_run)
        assert [entry.uri for entry in report.removed] == [store.uri(rel) for rel in STALE[1:]]
        assert report.left_alone == (store.uri("ml8s_training_runs"),)
    assert precious.read_bytes() == b"x"


def test_tmp_cleanup_reports_a_file_name_that_is_no_utf8(planted: Path) -> None:
    """Such a name was listed with surrogates: --json removed the entry, then failed to print what it removed
    (INTERNAL_ERROR). Now the report shows the odd bytes as escapes."""
    name = os.fsencode(planted / f"ml8s_training_runs/{RUN}/.tmp") + b"/stale-\xff.bin"
    with open(name, "wb") as handle:
        handle.write(b"x")
    os.utime(name, (time.time() - 10 * DAY,) * 2)
    report = cleanup_tmp(LocalStore(str(planted)), 3)
    assert not os.path.lexists(name)
    uris = [entry["uri"] for entry in json.loads(report.model_dump_json())["removed"]]
    assert LocalStore(str(planted)).uri(f"ml8s_training_runs/{RUN}/.tmp/stale-\\xff.bin") in uris


def test_tmp_cleanup_refuses_a_retention_that_is_nan_or_infinite(planted: Path) -> None:
    """NaN compares false with every age: cleanup_tmp(store, nan) removed every tmp entry, in-flight ones too."""
    for days in (math.nan, math.inf, -1.0):
        with pytest.raises(ConfigError, match="expected a finite number of days >= 0"):
            cleanup_tmp(LocalStore(str(planted)), days)
    assert remaining(planted) == set(STALE + KEPT)
    with pytest.raises(argparse.ArgumentTypeError, match="expected a finite number of days >= 0"):
        _days("inf")


def test_local_tmp_cleanup_is_not_held_by_a_planted_fifo_owner_file(tmp_path: Path) -> None:
    """$TMPDIR is anyone's: an ``ml8s-*`` directory whose owner file is a FIFO (or a link, or a directory) is
    not judged dead and is left alone; the cleanup does not wait on it for a writer that never comes."""
    for name, make in (
        ("ml8s-fifo", os.mkfifo),
        ("ml8s-dir", os.mkdir),
        ("ml8s-link", lambda p: os.symlink(tmp_path / "nowhere", p)),
    ):
        (tmp_path / name).mkdir()
        make(tmp_path / name / OWNER_FILE)
    (tmp_path / "ml8s-dead").mkdir()
    (tmp_path / "ml8s-dead" / OWNER_FILE).write_text("1\n")
    found: list[tuple[list[str], list[str]]] = []
    worker = threading.Thread(target=lambda: found.append(cleanup_local_tmp(str(tmp_path))), daemon=True)
    worker.start()
    worker.join(timeout=5)
    assert found == [([str(tmp_path / "ml8s-dead")], [])], "tmp-cleanup blocked on a FIFO in $TMPDIR"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ml8s-dir", "ml8s-fifo", "ml8s-link"]


def test_tmp_cleanup_prints_no_control_character_of_a_name(
    planted: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Names in $TMPDIR (anyone's) and in the store: a newline forged an output line, an escape sequence
    reached the terminal. Both are shown escaped, in the text output and in --json."""
    scratch = tmp_path / "scratch"
    odd = scratch / "ml8s-x\x1b[2J\nremoved everything"
    odd.mkdir(parents=True)
    (odd / OWNER_FILE).write_text("1\n")  # no process holds its lock: an ended run's
    plant(planted, f"ml8s_training_runs/{RUN}/.tmp/a\x1b]0;owned\x07\nb", 10)
    monkeypatch.setattr("tempfile.tempdir", str(scratch))
    for as_json in (False, True):
        args = argparse.Namespace(
            older_than_days=3.0, allow_short_grace=False, dry_run=True, json=as_json, root=str(planted)
        )
        assert _tmp_cleanup(args) == 0
        out = capsys.readouterr().out
        assert "\x1b" not in out and "\x07" not in out, out
        assert not any(line.startswith("removed everything") for line in out.splitlines()), out
        shown = "\n".join(json.loads(out)["local_temp_dirs"]) if as_json else out
        assert "ml8s-x\\x1b[2J\\nremoved everything" in shown, out
    assert odd.exists()  # a dry run


BIDI_AND_BREAKS = "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f\u061c\u2028\u2029"


def test_tmp_cleanup_prints_no_bidirectional_mark_or_line_separator_of_a_name(
    planted: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A bidirectional override, isolate or mark in a name reorders the rest of the printed line (a key ending
    in U+202E 'txt.exe' reads as 'exe.txt'), and U+2028/U+2029 break it where a terminal or log viewer honours
    them: ``ml8s tmp-cleanup`` printed them raw. Each is escaped, in the text output and in --json."""
    scratch = tmp_path / "scratch"
    odd = scratch / f"ml8s-x{BIDI_AND_BREAKS}y"
    odd.mkdir(parents=True)
    (odd / OWNER_FILE).write_text("1\n")
    plant(planted, f"ml8s_training_runs/{RUN}/.tmp/a{BIDI_AND_BREAKS}b", 10)
    monkeypatch.setattr("tempfile.tempdir", str(scratch))
    escaped = "".join(f"\\u{ord(c):04x}" for c in BIDI_AND_BREAKS)
    for json_flag in ([], ["--json"]):
        capsys.readouterr()
        args = ["tmp-cleanup", "--root", str(planted), "--older-than-days", "3", "--dry-run", *json_flag]
        assert main(args) == 0
        out, err = capsys.readouterr()
        shown = json.dumps(json.loads(out), ensure_ascii=False) if json_flag else out + err  # the values, read
        assert not set(BIDI_AND_BREAKS) & set(shown), shown
        shown = shown.replace("\\\\", "\\") if json_flag else shown  # JSON's escape of the escape's backslash
        assert f"ml8s-x{escaped}y" in shown and f".tmp/a{escaped}b" in shown, shown
    assert odd.exists()  # a dry run


def test_json_results_print_no_bidirectional_mark_or_line_separator_raw(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The JSON a command prints (``ml8s identity``, the chain and promote commands) is written with
    ensure_ascii=False, which escapes control characters but writes these marks raw: a DATA_ROOT named with
    them printed reordered. They are now JSON escapes: the printed text has none, the parsed values are the
    same."""
    data = write_small_churn(tmp_path / f"d{BIDI_AND_BREAKS}x")
    monkeypatch.setenv("DATA_ROOT", str(data))
    monkeypatch.setenv("TARGET_COLUMN", "churned")
    monkeypatch.setenv("PIPELINE_ROOT_URI", str(tmp_path / "root"))
    capsys.readouterr()
    assert main(["identity"]) == 0
    out, err = capsys.readouterr()
    assert not set(BIDI_AND_BREAKS) & set(out + err), out + err
    assert f"file://{data}" in json.dumps(json.loads(out), ensure_ascii=False)  # the same document, read


def test_local_tmp_cleanup_reports_only_what_it_removed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """rmtree with ignore_errors says nothing of what it could not remove (another user's ``ml8s-*`` directory
    in a shared $TMPDIR, with an owner file no process holds): it was reported "removed" all the same."""
    for name in ("ml8s-theirs", "ml8s-mine"):
        (tmp_path / name).mkdir()
        (tmp_path / name / OWNER_FILE).write_text("1\n")
    real = shutil.rmtree

    def rmtree(path: str, ignore_errors: bool = False) -> None:
        if not path.endswith("ml8s-theirs"):  # what a non-owner's rmtree of it achieves: nothing
            real(path, ignore_errors=ignore_errors)

    monkeypatch.setattr("ml8s.ops.tmp_local.shutil.rmtree", rmtree)
    assert cleanup_local_tmp(str(tmp_path)) == ([str(tmp_path / "ml8s-mine")], [str(tmp_path / "ml8s-theirs")])
    assert [p.name for p in tmp_path.iterdir()] == ["ml8s-theirs"]


def test_tmp_cleanup_goes_on_past_an_entry_it_cannot_remove(planted: Path) -> None:
    """One entry whose removal failed (a directory not writable by this user, an S3 DELETE refused) stopped the
    cleanup with a STORE_ERROR: the entries removed before it were never reported, those after it never tried."""
    stuck = STALE[1]

    class Refusing(LocalStore):
        def delete(self, key: str) -> None:
            if key == stuck:
                raise StoreError(f"cannot delete {self.uri(key)}: Permission denied")
            super().delete(key)

    report = cleanup_tmp(Refusing(str(planted)), 3)
    assert sorted(e.uri for e in report.removed) == sorted(LocalStore(str(planted)).uri(k) for k in STALE if k != stuck)
    assert len(report.failed) == 1 and "Permission denied" in report.failed[0] and stuck in report.failed[0]
    assert remaining(planted) == {stuck, *KEPT}


def test_tmp_cleanup_default_retention_and_zero_days(
    planted: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TMP_RETENTION_DAYS", "20")
    report = json.loads(cli(capsys, "tmp-cleanup", "--json", "--root", str(planted))[1])
    assert report["older_than_days"] == 20 and report["removed"] == []
    monkeypatch.delenv("TMP_RETENTION_DAYS")
    report = json.loads(cli(capsys, "tmp-cleanup", "--json", "--root", str(planted))[1])
    assert report["older_than_days"] == 7 and len(report["removed"]) == len(STALE)
    zero = cleanup_tmp(LocalStore(str(planted)), 0, allow_short_grace=True)  # every tmp entry; still no artifact
    assert [e.uri.rsplit("/", 1)[1] for e in zero.removed] == ["export-w2.onnx"]
    assert remaining(planted) == set(KEPT) - {f"ml8s_training_runs/{RUN}/.tmp/export-w2.onnx"}


def test_zero_days_removes_an_entry_written_in_the_same_second(tmp_path: Path) -> None:
    """An object store's clock has whole seconds: an entry written just now is 0.0 days old, and 0 takes it."""
    store = LocalStore(str(tmp_path))
    store.put_atomic(f"ml8s_training_runs/{RUN}/manifest.json", b"{}", tmp_key=".tmp/w")
    store.put_atomic(f"ml8s_training_runs/{RUN}/.tmp/x.bin", b"x", tmp_key=".tmp/w2")
    (entry,) = [i for i in store.list(f"ml8s_training_runs/{RUN}/.tmp") if i.key.endswith("x.bin")]
    zero = cleanup_tmp(store, 0, dry_run=True, now=entry.mtime, allow_short_grace=True)
    assert [e.age_days for e in zero.removed] == [0.0]
    assert cleanup_tmp(store, 1, dry_run=True, now=entry.mtime).removed == ()


def test_zero_days_keeps_an_entry_under_an_hour_old_unless_told_no_write_runs(
    planted: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``tmp-cleanup --older-than-days 0`` removed a live write's staging file (its rename then failed): as chain
    GC keeps its ``.tmp/``, an entry is now kept until an hour old, and said so; ``--allow-short-grace`` removes it."""
    live = plant(planted, f"ml8s_training_runs/{RUN}/.tmp/model-w9.bin", 0)
    code, out, err = cli(capsys, "tmp-cleanup", "--older-than-days", "0", "--root", str(planted))
    assert code == 0, err
    assert live.exists() and f"removed {len(STALE) + 1} tmp entries older than 1 hour; kept 1 younger" in out
    assert (
        "ml8s: note: --older-than-days 0 raised to 1 hour: a younger .tmp/ entry may be a write in flight; "
        "--allow-short-grace removes it too (no write may run)"
    ) in err
    monkeypatch.setenv("TMP_RETENTION_DAYS", "0")  # no --older-than-days: the note named one the user never gave
    code, out, err = cli(capsys, "tmp-cleanup", "--dry-run", "--root", str(planted))
    assert code == 0 and "would remove 0 tmp entries older than 1 hour; kept 1 younger" in out, err
    assert "ml8s: note: TMP_RETENTION_DAYS=0 raised to 1 hour: a younger .tmp/ entry" in err
    assert "--older-than-days" not in err.split("--allow-short-grace")[0]
    monkeypatch.delenv("TMP_RETENTION_DAYS")
    minutes = cleanup_tmp(LocalStore(str(planted)), 0.01, dry_run=True)  # 14 minutes: the hour still holds
    assert minutes.removed == () and minutes.kept == 1 and minutes.min_age_days == 1 / 24
    usage = " ".join(ml8s(clean_env(), "tmp-cleanup", "--help").stdout.split())
    assert "--allow-short-grace apply an --older-than-days under 1 hour to .tmp/ too: a write in flight" in usage
    code, out, err = cli(capsys, "tmp-cleanup", "--older-than-days", "0", "--allow-short-grace", "--root", str(planted))
    assert code == 0, err
    assert not live.exists() and "removed 1 tmp entries older than 0 days; kept 0 younger ones" in out
    assert "raised to 1 hour" not in err
    assert remaining(planted) == set(KEPT) - {f"ml8s_training_runs/{RUN}/.tmp/export-w2.onnx"}


def test_a_live_entry_backdated_with_touch_is_not_taken_for_an_old_one(tmp_path: Path) -> None:
    """The age was measured from the mtime alone, which anyone may set back (``touch -d``, a copy keeping times):
    a live write's staging file backdated a month went at a retention of 7 days. Its ctime says it changed now."""
    live = plant(tmp_path, f"ml8s_training_runs/{RUN}/.tmp/model-w9.bin", 30)
    ahead = plant(tmp_path, f"ml8s_training_runs/{RUN}/.tmp/model-w8.bin", -30)  # set ahead: young too
    store = LocalStore(str(tmp_path))
    report = cleanup_tmp(store, 7)
    assert report.removed == () and report.kept == 2 and live.exists() and ahead.exists()
    later = cleanup_tmp(store, 7, dry_run=True, now=time.time() + 8 * DAY)  # a week on, the backdated one is old
    # and the one set ahead too: unchanged since this cleanup first saw it (tests/test_tmp_seen.py)
    assert [e.uri.rsplit("/", 1)[1] for e in later.removed] == ["model-w8.bin", "model-w9.bin"]


_MAINTENANCE_PROBE = """
import json, sys
import ml8s.store._walk as w
w.changed = lambda info: info.st_mtime  # the planted entries' backdated mtimes (see ``planted``)
import workflows.maintenance as m
out = json.loads(m.tmp_cleanup_wf(pipeline_root_uri=sys.argv[1], older_than_days=3, dry_run=False))
print(json.dumps({"cron": m.tmp_cleanup_lp.schedule.cron_schedule.schedule, "name": m.tmp_cleanup_lp.name,
                  "removed": len(out["removed"])}))
"""


def test_cleanup_workflow_and_daily_launch_plan(planted: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _MAINTENANCE_PROBE, str(planted)],
        cwd=REPO,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    probe = json.loads(done.stdout.strip().splitlines()[-1])
    assert probe == {"cron": "30 3 * * *", "name": "tmp_cleanup_lp", "removed": len(STALE)}
    assert remaining(planted) == set(KEPT)


_SHORT_GRACE_PROBE = """
import json, sys
import workflows.maintenance as m
allow = sys.argv[2] == "1"
out = json.loads(m.tmp_cleanup_wf(pipeline_root_uri=sys.argv[1], older_than_days=0, allow_short_grace=allow))
print(json.dumps({"removed": [e["uri"].rsplit("/", 1)[1] for e in out["removed"]], "kept": out["kept"],
                  "min_age_days": out["min_age_days"]}))
"""


def test_the_cleanup_workflow_takes_allow_short_grace_as_the_cli_does(tmp_path: Path) -> None:
    """The task had no way to say --allow-short-grace: older_than_days 0 kept a crash's minute-old leftover, and
    nothing could remove it before an hour. Unset, it is still kept (a write may be in flight), as by the CLI."""
    young = plant(tmp_path, f"ml8s_training_runs/{RUN}/.tmp/model-w9.bin", 0)

    def probe(allow: str) -> dict[str, object]:
        done = subprocess.run(
            [sys.executable, "-c", _SHORT_GRACE_PROBE, str(tmp_path), allow],
            cwd=REPO,
            env=clean_env(),
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr
        return dict(json.loads(done.stdout.strip().splitlines()[-1]))

    assert probe("0") == {"removed": [], "kept": 1, "min_age_days": 1 / 24} and young.exists()
    assert probe("1") == {"removed": ["model-w9.bin"], "kept": 0, "min_age_days": 0.0} and not young.exists()


# --------------------------------------------------------------------------------- collisions


def forge_collision(root: Path, run_id: str, forged: str) -> Path:
    """A run of another FULL_CONFIG_HASH at RUN_ID (as tests/test_pipeline.py simulates a collision)."""
    directory = root / layout.run_prefix(run_id)
    directory.mkdir(parents=True)
    snapshot = {"full_config_hash": forged, "run_id": run_id, "data_fingerprint": "0" * 64}
    (directory / layout.CONFIG_SNAPSHOT).write_text(json.dumps(snapshot))
    (directory / "model").mkdir()
    (directory / "model" / "model.onnx").write_bytes(b"the other model")
    (directory / layout.TMP_DIR).mkdir()
    (directory / layout.TMP_DIR / "leftover-w.bin").write_bytes(b"tmp")
    (directory / layout.SUCCESS_MARKER).write_bytes(b"")
    return directory


def files(directory: Path) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def runs(env: dict[str, str]) -> list[dict[str, object]]:
    done = ml8s(env, "runs", "list", "--json")
    assert done.returncode == 0, done.stderr
    return list(json.loads(done.stdout))


def test_resolve_collision_then_the_new_config_runs(tmp_path: Path) -> None:
    from conftest import write_small_churn

    data, root, forged = write_small_churn(tmp_path / "data"), tmp_path / "root", "f" * 64
    env = clean_env(DATA_ROOT=str(data), TARGET_COLUMN="churned", PIPELINE_ROOT_URI=str(root), EPOCHS="2")
    identity = json.loads(ml8s(env, "identity").stdout)
    run_id = identity["run_id"]
    directory = forge_collision(root, run_id, forged)
    colliding = files(directory)
    halted = ml8s(env, "run")
    assert halted.returncode == 1 and "RUN_ID_HASH_COLLISION" in halted.stderr
    assert [(r["run_id"], r["status"]) for r in runs(env)] == [(run_id, "collided")]

    resolved = ml8s(env, "resolve-collision", run_id, "--quarantine", "--reason", "audit 42")
    assert resolved.returncode == 0, resolved.stderr
    outcome = json.loads(resolved.stdout)
    quarantine = root / "ml8s_quarantine" / run_id / forged
    assert outcome["already_resolved"] is False
    assert outcome["resolution"]["quarantine_uri"] == f"file://{quarantine}"
    assert files(quarantine) == colliding  # every byte moved, the tmp leftover included
    assert files(directory) == {}
    record = json.loads((root / layout.incident_key(run_id, "RESOLUTION", forged)).read_text())
    assert record["reason"] == "audit 42" and len(record["incidents"]) == 1
    assert sorted(f["path"] for f in record["files"]) == sorted(colliding)

    again = ml8s(env, "resolve-collision", run_id, "--quarantine")
    assert again.returncode == 0 and json.loads(again.stdout)["already_resolved"] is True

    manifest = json.loads(ml8s(env, "run").stdout)  # the new configuration runs now
    assert manifest["run_id"] == run_id and manifest["full_config_hash"] == identity["full_config_hash"]
    assert ml8s(env, "verify", run_id).returncode == 0
    listed = {(r["run_id"], r["status"], r["full_config_hash"], r["model_version"]) for r in runs(env)}
    assert listed == {(run_id, "complete", identity["full_config_hash"], "1"), (run_id, "quarantined", forged, "")}
    before = files(directory)
    assert json.loads(ml8s(env, "resolve-collision", run_id, "--quarantine").stdout)["already_resolved"] is True
    assert files(directory) == before and files(quarantine) == colliding  # the new run is never moved


def test_resolve_collision_refuses_without_a_recorded_collision(tmp_path: Path) -> None:
    directory = forge_collision(tmp_path, RUN, "f" * 64)
    before = files(directory)
    env = clean_env(PIPELINE_ROOT_URI=str(tmp_path))
    refused = ml8s(env, "resolve-collision", RUN, "--quarantine")
    assert refused.returncode == 1 and "RESOLUTION_REFUSED" in refused.stderr
    assert ml8s(env, "resolve-collision", RUN).returncode == 2  # --quarantine is required
    assert files(directory) == before and not (tmp_path / "ml8s_quarantine").exists()
    assert [(r.run_id, r.status) for r in list_runs(LocalStore(str(tmp_path)))] == [(RUN, "complete")]


def test_resolve_collision_refuses_a_reason_that_is_not_utf8_before_moving_anything(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Its lone surrogates failed the resolution record after the run was moved: INTERNAL_ERROR, exit 2, and a
    quarantined run without its record."""
    from ml8s.cli.main import main

    directory = forge_collision(tmp_path, RUN, "f" * 64)
    incident = {"kind": "RUN_ID_HASH_COLLISION", "stored": {"full_config_hash": "f" * 64}}
    (tmp_path / layout.INCIDENTS_DIR / RUN).mkdir(parents=True)
    (tmp_path / layout.INCIDENTS_DIR / RUN / "run_id_hash_collision-1.json").write_text(json.dumps(incident))
    before = files(directory)
    with pytest.raises(SystemExit) as exited:
        main(["resolve-collision", RUN, "--quarantine", "--reason", "audit \udcff", "--root", str(tmp_path)])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "argument --reason" in err and "not UTF-8" in err and "INTERNAL_ERROR" not in err
    assert files(directory) == before and not (tmp_path / "ml8s_quarantine").exists()


def test_resolve_collision_copies_nothing_through_a_link_in_the_run(tmp_path: Path) -> None:
    """A link planted in the colliding run was listed and followed: the file it named, outside the root and
    maybe readable by root alone, was copied into the quarantine, where whoever can read the store reads it."""
    secret = tmp_path / "secret"
    secret.write_bytes(b"root only")
    root = tmp_path / "root"
    directory = forge_collision(root, RUN, "f" * 64)
    record_incident(root, "f" * 64)
    (directory / "model" / "notes.txt").symlink_to(secret)
    before = files(directory)
    with pytest.raises(ResolutionRefusedError, match=r"model/notes.txt is no regular file .*nothing was moved"):
        resolve_collision(LocalStore(str(root)), RUN)
    assert files(directory) == before and not (root / "ml8s_quarantine").exists()


def test_a_damaged_resolution_record_is_named_not_an_internal_error(tmp_path: Path) -> None:
    """Resolving again read the stored record with pydantic alone: a record cut short was INTERNAL_ERROR
    (ValidationError); it is an INTEGRITY_ERROR naming it now, and nothing is changed."""
    directory = forge_collision(tmp_path, RUN, "f" * 64)
    record_incident(tmp_path, "f" * 64)
    store = LocalStore(str(tmp_path))
    first = resolve_collision(store, RUN)
    record = tmp_path / layout.incident_key(RUN, "RESOLUTION", "f" * 64)
    assert first.record_uri == record.as_uri()
    record.write_bytes(record.read_bytes()[:50])
    quarantine = tmp_path / "ml8s_quarantine" / RUN / ("f" * 64)
    before = files(quarantine), files(directory)
    with pytest.raises(
        IntegrityError,
        match=rf"^INTEGRITY_ERROR: {record.as_uri()} is not valid UTF-8 JSON: .*"
        r"expected the resolution ml8s wrote .*the incident log was damaged since",
    ):
        resolve_collision(store, RUN)
    assert (files(quarantine), files(directory)) == before and len(record.read_bytes()) == 50


def record_incident(root: Path, stored: str) -> None:
    record = {"kind": "RUN_ID_HASH_COLLISION", "run_id": RUN, "stored": {"full_config_hash": stored}}
    path = root / layout.incident_key(RUN, "RUN_ID_HASH_COLLISION", "a" * 64)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record))


def test_resolve_collision_refuses_when_the_store_is_not_what_was_recorded(tmp_path: Path) -> None:
    directory = forge_collision(tmp_path, RUN, "e" * 64)
    record_incident(tmp_path, "f" * 64)
    with pytest.raises(ResolutionRefusedError, match="not the colliding run recorded"):
        resolve_collision(LocalStore(str(tmp_path)), RUN)
    assert (directory / layout.CONFIG_SNAPSHOT).exists()


class FailingDeletes(LocalStore):
    """Deletes fail after ``allowed`` of them: a crash in the middle of a quarantine."""

    def __init__(self, root: str, allowed: int) -> None:
        super().__init__(root)
        self.allowed = allowed

    def delete(self, key: str) -> None:
        if self.allowed == 0:
            raise StoreError(f"simulated failure deleting {key}")
        self.allowed -= 1
        super().delete(key)


def test_interrupted_quarantine_resumes_and_loses_nothing(tmp_path: Path) -> None:
    directory = forge_collision(tmp_path, RUN, "f" * 64)
    record_incident(tmp_path, "f" * 64)
    original = files(directory)
    with pytest.raises(StoreError, match="simulated"):
        resolve_collision(FailingDeletes(str(tmp_path), allowed=2), RUN)
    assert not (directory / layout.SUCCESS_MARKER).exists()  # the marker goes first
    assert (directory / layout.CONFIG_SNAPSHOT).exists()  # the snapshot last: the gate still refuses
    assert next(r.status for r in list_runs(LocalStore(str(tmp_path)))) == "collided"
    outcome = resolve_collision(LocalStore(str(tmp_path)), RUN)
    quarantine = tmp_path / "ml8s_quarantine" / RUN / ("f" * 64)
    assert files(quarantine) == original and files(directory) == {}
    assert sorted(f.path for f in outcome.resolution.files) == sorted(original)


def test_runs_list_shows_incomplete_runs(tmp_path: Path) -> None:
    plant(tmp_path, f"ml8s_training_runs/{RUN}/config_snapshot.json", 0)
    done = ml8s(clean_env(), "runs", "list", "--root", str(tmp_path))
    assert done.returncode == 0
    assert done.stdout.splitlines()[1].split()[:3] == [RUN, "incomplete", "-"]
    assert ml8s(clean_env(), "runs", "list", "--root", str(tmp_path / "empty")).stdout == "no runs\n"


def test_runs_list_takes_records_nested_too_deep_for_the_parser_as_unreadable(tmp_path: Path) -> None:
    full_hash = "f" * 64
    plant(tmp_path, f"ml8s_training_runs/{RUN}/{layout.CONFIG_SNAPSHOT}", 0).write_text(
        json.dumps({"full_config_hash": full_hash})
    )
    for rel in (layout.MANIFEST, layout.SUCCESS_MARKER):
        plant(tmp_path, f"ml8s_training_runs/{RUN}/{rel}", 0).write_bytes(b"[" * 100_000)
    plant(tmp_path, f"ml8s_incidents/{RUN}/run_id_hash_collision-{full_hash}.json", 0).write_bytes(b"{" * 100_000)
    runs = list_runs(LocalStore(str(tmp_path)))
    assert [(r.run_id, r.status, r.full_config_hash, r.model_version) for r in runs] == [
        (RUN, "complete", full_hash, "")
    ]
    (tmp_path / f"ml8s_training_runs/{RUN}/{layout.CONFIG_SNAPSHOT}").write_bytes(b"[" * 100_000)
    assert [(r.status, r.full_config_hash) for r in list_runs(LocalStore(str(tmp_path)))] == [("complete", "")]


def test_runs_list_lists_a_run_whose_records_are_no_regular_file_or_sparse(tmp_path: Path) -> None:
    """One run's config_snapshot.json a FIFO, manifest.json a sparse 64 GiB file: it was STORE_UNSAFE_OBJECT (no
    listing at all) or a 64 GiB read; now that run is listed without its hash and model, the others as ever."""
    other = "b" * 12
    plant(tmp_path, f"ml8s_training_runs/{other}/{layout.CONFIG_SNAPSHOT}", 0).write_text('{"full_config_hash": "x"}')
    plant(tmp_path, f"ml8s_training_runs/{RUN}/{layout.SUCCESS_MARKER}", 0)
    os.mkfifo(tmp_path / f"ml8s_training_runs/{RUN}/{layout.CONFIG_SNAPSHOT}")
    os.truncate(plant(tmp_path, f"ml8s_training_runs/{RUN}/{layout.MANIFEST}", 0), 64 * 1024**3)
    runs = list_runs(LocalStore(str(tmp_path)))
    assert [(r.run_id, r.status, r.full_config_hash, r.model_version) for r in runs] == [
        (RUN, "complete", "", ""),
        (other, "incomplete", "x", ""),
    ]


def test_a_name_that_is_a_run_id_and_a_newline_is_no_run_id(tmp_path: Path) -> None:
    """The patterns ended in '$', which matches before a final newline: a folder 'RUN_ID\n' was listed as a run
    (its id broke the table), its .tmp/ files were tmp-cleanup's, and `ml8s verify 'RUN_ID\n'` was accepted."""
    plant(tmp_path, f"ml8s_training_runs/{RUN}\n/config_snapshot.json", 0)
    plant(tmp_path, f"ml8s_quarantine/{RUN}/{'f' * 64}\n/config_snapshot.json", 0)
    listing = list_root(LocalStore(str(tmp_path)))
    assert listing.runs == ()
    assert listing.not_runs == tuple(
        sorted(
            f"file://{tmp_path}/{rel}" for rel in (f"ml8s_training_runs/{RUN}\n", f"ml8s_quarantine/{RUN}/{'f' * 64}\n")
        )
    )
    assert not is_tmp_key(f"ml8s_training_runs/{RUN}\n/.tmp/x") and is_tmp_key(f"ml8s_training_runs/{RUN}/.tmp/x")
    assert not is_run_id(f"{RUN}\n") and is_run_id(RUN)


def test_runs_list_names_what_is_no_run_apart_from_the_runs(tmp_path: Path) -> None:
    # A folder named like no RUN_ID was listed as an "incomplete" run; a stray file was skipped in silence.
    plant(tmp_path, f"ml8s_training_runs/{RUN}/config_snapshot.json", 0)
    strays = [
        "ml8s_training_runs/notes/readme.txt",
        "ml8s_training_runs/README",
        f"ml8s_training_runs/{RUN}x/success.marker",
        f"ml8s_quarantine/{RUN}/not-a-hash/config_snapshot.json",
        f"ml8s_quarantine/{RUN}/stray.txt",
        "ml8s_quarantine/misc/x",
    ]
    for rel in strays:
        plant(tmp_path, rel, 0)
    done = ml8s(clean_env(), "runs", "list", "--json", "--root", str(tmp_path))
    assert done.returncode == 0
    assert [(r["run_id"], r["status"]) for r in json.loads(done.stdout)] == [(RUN, "incomplete")]
    named = [line.split(" ")[2] for line in done.stderr.splitlines() if line.startswith("ml8s: warning: ")]
    expected = [
        f"ml8s_quarantine/{RUN}/not-a-hash",
        f"ml8s_quarantine/{RUN}/stray.txt",
        "ml8s_quarantine/misc",
        "ml8s_training_runs/README",
        f"ml8s_training_runs/{RUN}x",
        "ml8s_training_runs/notes",
    ]
    assert named == sorted(f"file://{tmp_path}/{rel}" for rel in expected)


def test_resolve_collision_reads_an_incident_or_snapshot_whole_only_up_to_the_record_bound(tmp_path: Path) -> None:
    """A sparse incident or snapshot of 64 GiB was read into memory whole; each is refused unread, named."""
    from ml8s.errors import ObjectTooLargeError

    store = LocalStore(str(tmp_path))
    run_id = "ab" * 6
    incident = tmp_path / layout.INCIDENTS_DIR / run_id / "run_id_hash_collision-1.json"
    incident.parent.mkdir(parents=True)
    with open(incident, "wb") as handle:
        handle.truncate(layout.RECORD_MAX_BYTES + 1)  # sparse: one byte over the bound
    with pytest.raises(ObjectTooLargeError, match=r"run_id_hash_collision-1\.json"):
        resolve_collision(store, run_id)


def test_runs_list_lists_every_run_when_an_incident_record_is_a_link_or_too_large(tmp_path: Path) -> None:
    """A collision record replaced by a link (or a sparse file over the record bound) made `ml8s runs list` fail
    whole (STORE_UNSAFE_OBJECT, exit 1, no run listed); it is skipped like a malformed record, the others counted."""
    other = "b" * 12
    for run_id, full_hash in ((RUN, "e" * 64), (other, "f" * 64)):
        plant(tmp_path, f"ml8s_training_runs/{run_id}/{layout.CONFIG_SNAPSHOT}", 0).write_text(
            json.dumps({"full_config_hash": full_hash})
        )
    (tmp_path / "elsewhere.json").write_text(json.dumps({"kind": "RUN_ID_HASH_COLLISION", "stored": {}}))
    plant(tmp_path, f"ml8s_incidents/{RUN}/run_id_hash_collision-1.json", 0).unlink()
    (tmp_path / f"ml8s_incidents/{RUN}/run_id_hash_collision-1.json").symlink_to(tmp_path / "elsewhere.json")
    os.truncate(plant(tmp_path, f"ml8s_incidents/{RUN}/run_id_hash_collision-2.json", 0), layout.RECORD_MAX_BYTES + 1)
    plant(tmp_path, f"ml8s_incidents/{other}/run_id_hash_collision-1.json", 0).write_text(
        json.dumps({"kind": "RUN_ID_HASH_COLLISION", "stored": {"full_config_hash": "f" * 64}})
    )
    runs = list_runs(LocalStore(str(tmp_path)))
    assert [(r.run_id, r.status) for r in runs] == [(RUN, "incomplete"), (other, "collided")]
    with pytest.raises(UnsafeObjectError, match=r"run_id_hash_collision-1\.json"):
        resolve_collision(LocalStore(str(tmp_path)), RUN)  # resolving still refuses, naming the record


def test_runs_list_names_a_run_folder_replaced_by_a_link_or_a_fifo(tmp_path: Path) -> None:
    """The listing leaves out what is no file or folder: a RUN_ID folder replaced by a link (to a copy elsewhere) or
    a FIFO where runs are kept vanished from `runs list` without a word; each is now named apart, as a stray is."""
    linked, other = "c" * 12, "b" * 12
    plant(tmp_path, f"ml8s_training_runs/{other}/{layout.SUCCESS_MARKER}", 0)
    plant(tmp_path, f"elsewhere/{linked}/{layout.SUCCESS_MARKER}", 0)
    (tmp_path / "ml8s_training_runs" / linked).symlink_to(tmp_path / "elsewhere" / linked)
    os.mkfifo(tmp_path / "ml8s_training_runs" / ("d" * 12))
    os.mkfifo(tmp_path / f"ml8s_training_runs/{other}/inside.fifo")  # inside a run: verify's to report
    listing = list_root(LocalStore(str(tmp_path)))
    assert [r.run_id for r in listing.runs] == [other]
    runs_uri = LocalStore(str(tmp_path)).uri("ml8s_training_runs")
    assert listing.not_runs == (f"{runs_uri}/{linked}", f"{runs_uri}/{'d' * 12}")
