"""The fault campaign's newer scenarios (``bench/faults.py`` runs them after kill, race, forced and disk).

- rank: TRAIN_WORLD_SIZE=2, one rank SIGKILLed: the run fails with one named line, a re-run heals.
- parent: TRAIN_WORLD_SIZE=2, only the parent SIGKILLed: its ranks must die with it (an orphan is *wedged*).
- signal: SIGTERM or SIGINT at a random moment: exit 143 / 130 with one line, no rank left, nothing left in
  $TMPDIR (counted before any tmp-cleanup: a signalled run cleans up itself).
- warm: WARM_START=head runs of a growing lineage killed at random moments, some after their commit landed:
  the re-run heals and the chain holds exactly one version per generation (any other is a duplicate).
- warm-race: three warm runs (EPOCHS 2, 3, 4) from one head, STALE_PARENT_POLICY retrain and fail in turn:
  each exits 0, or 1 with LINEAGE_STALE_PARENT under fail; never RECORDS_APPEND_ONLY or another error.
- gc / payload: ``ml8s chain gc --execute`` and ``ml8s chain commit --payload`` SIGKILLed at random
  moments: the chain verifies, and the next commit lands.
- disk-warm: a warm run and a ``chain commit --payload`` on a tmpfs too small for them (root only): one
  named line, then a re-run on the grown disk heals.
- mlflow-db: the MLflow database overwritten with garbage, then deleted and recreated by a later run:
  ``ml8s verify`` and ``ml8s run`` say so in named lines (REGISTRY_REPLACED for the recreated one), and
  ``ml8s runs list`` marks the old runs' registrations unconfirmed.
- skew: ``faketime -f +2d`` GC and tmp-cleanup in a loop while a run commits (installed by ``.ci/run``):
  the run's version must be intact and the chain verify; a run that GC broke counts as lost.
- readonly: verify, chain verify, chain log, audit bundle and a gate hit on a root this user cannot write.

A scenario's trial is *lost* when anything ends in a traceback, an unnamed error, a chain that does not
verify or a run whose re-run fails; tracebacks and $TMPDIR leftovers are counted on their own too.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from faults import Campaign, Tally

REPO = Path(__file__).resolve().parents[1]
ML8S = str(Path(sys.executable).with_name("ml8s"))
SCENARIOS = ("rank", "parent", "signal", "warm", "warm-race", "gc", "payload", "disk-warm", "mlflow-db", "skew")
SCENARIOS += ("readonly",)
LONG = {"TRAIN_WORLD_SIZE": "2", "EPOCHS": "60"}  # long enough training for a kill to land in it


def _tally() -> Tally:
    from faults import Tally

    return Tally()


def _children(pid: int) -> list[int]:
    found: list[int] = []
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            found += [int(p) for p in (task / "children").read_text().split()]
    except OSError:
        return []
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def _until(predicate: Callable[[], bool], limit_s: float) -> bool:
    deadline = time.monotonic() + limit_s
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def _named(stderr: str, *codes: str) -> bool:
    """One ``ml8s: CODE: ...`` line as the last line, with one of ``codes`` (any code when none given)."""
    last = (stderr.strip().splitlines() or [""])[-1]
    return last.startswith("ml8s: ") and (not codes or any(last.startswith(f"ml8s: {c}: ") for c in codes))


def _ml8s(env: dict[str, str], *args: str, prefix: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*prefix, ML8S, *args], env=env, text=True, capture_output=True, timeout=600)


def _lost(tally: Tally, note: str) -> None:
    tally.lost += 1
    tally.notes.append(note[:500])


def _chain_ok(c: Campaign, tally: Tally, root: Path, env: dict[str, str], what: str) -> bool:
    checked = _ml8s(env, "chain", "verify", "--root", str(root))
    c.seen(checked.stderr)
    if checked.returncode != 0:
        _lost(tally, f"{what}: chain verify failed: {(checked.stdout + checked.stderr)[-300:]}")
    return checked.returncode == 0


def _generation(data: Path, g: int, rows: int = 60) -> None:
    """A new top-level file of DATA_ROOT: a new generation for a warm start."""
    lines = ["customer_id,tenure,monthly_charges,plan,auto_pay,churned"]
    for i in range(rows):
        n = 7919 * g + i
        plan = ("basic", "plus", "pro")[(n + g) % 3]
        churned = "yes" if (n * 11) % 72 < 12 + 3 * g else "no"
        lines.append(f"G{g}-{i:05d},{(n * 11) % 72},{25 + (n * 17) % 100}.{n % 10},{plan},{n % 3 > 0},{churned}")
    (data / f"gen-{g:03d}.csv").write_text("\n".join(lines).replace("True", "true").replace("False", "false") + "\n")


# -- ranks and signals ----------------------------------------------------------------------------


def _with_ranks(c: Campaign, env: dict[str, str]) -> tuple[subprocess.Popen[str], list[int]]:
    proc = c.start(env)
    _until(lambda: proc.poll() is not None or len(_children(proc.pid)) >= 2, 600)
    return proc, (_children(proc.pid) if proc.poll() is None else [])


def rank_trials(c: Campaign, n: int) -> Tally:
    tally, root = _tally(), c.work / "rank"
    for t in range(n):
        env = c.env(root, 2000 + t, **LONG)
        proc, ranks = _with_ranks(c, env)
        time.sleep(c.rng.uniform(0.0, 1.0))
        landed = bool(ranks) and proc.poll() is None
        if landed:
            os.kill(c.rng.choice(ranks), signal.SIGKILL)
        _, err = proc.communicate(timeout=600)
        c.seen(err)
        tally.killed += landed
        if landed and proc.returncode != 0 and not _named(err, "TRAINING_RANK_ERROR"):
            _lost(tally, f"rank {t}: not one named line: {err[-300:]}")
        c.judge(tally, root, env, set(), f"rank {t}")
        print(f"  rank trial {t + 1}/{n}: {'a rank killed' if landed else 'finished first'}", flush=True)
    c.audit_root(tally, root, c.env(root, 0))
    return tally


def parent_trials(c: Campaign, n: int) -> Tally:
    tally, root = _tally(), c.work / "parent"
    for t in range(n):
        env = c.env(root, 3000 + t, **LONG)
        proc, ranks = _with_ranks(c, env)
        time.sleep(c.rng.uniform(0.0, 1.0))
        landed = bool(ranks) and proc.poll() is None
        if landed:
            proc.kill()  # the parent only, not its process group
        c.seen(*proc.communicate(timeout=600))
        tally.killed += landed
        if not _until(lambda ranks=ranks: not any(_alive(r) for r in ranks), 60):  # type: ignore[misc]
            tally.wedged += 1
            tally.notes.append(f"parent {t}: ranks {[r for r in ranks if _alive(r)]} outlived their parent")
            for rank in ranks:
                if _alive(rank):
                    os.kill(rank, signal.SIGKILL)
        c.judge(tally, root, env, set(), f"parent {t}")
        print(f"  parent trial {t + 1}/{n}: {'parent killed' if landed else 'finished first'}", flush=True)
    c.audit_root(tally, root, c.env(root, 0))
    return tally


def signal_trials(c: Campaign, n: int) -> Tally:
    tally, root = _tally(), c.work / "signal"
    for t in range(n):
        signum, code = (signal.SIGTERM, 143) if t % 2 == 0 else (signal.SIGINT, 130)
        env = c.env(root, 4000 + t, **(LONG if t % 4 < 2 else {}))
        proc = c.start(env)
        time.sleep(c.rng.uniform(0.0, c.run_seconds))
        ranks = _children(proc.pid)
        landed = proc.poll() is None
        if landed:
            proc.send_signal(signum)
        out, err = proc.communicate(timeout=600)
        c.seen(out, err)
        tally.killed += landed and proc.returncode == code
        if proc.returncode not in (0, code) or (proc.returncode == code and not _named(err, "INTERRUPTED")):
            _lost(tally, f"signal {t} ({signum.name}): exit {proc.returncode}: {err[-300:]}")
        if any(_alive(r) for r in ranks):
            tally.wedged += 1
            tally.notes.append(f"signal {t}: a rank outlived its stopped parent")
        if left := c.stray_tmp():  # before any tmp-cleanup: the stopped run must have removed its own
            tally.stray_tmp += len(left)
            tally.notes.append(f"signal {t} ({signum.name}): left in $TMPDIR: {left}")
        c.judge(tally, root, env, set(), f"signal {t}")
        print(f"  signal trial {t + 1}/{n}: {signum.name} -> exit {proc.returncode}", flush=True)
    c.audit_root(tally, root, c.env(root, 0))
    return tally


# -- warm starts ----------------------------------------------------------------------------------


def _lineage(c: Campaign, name: str) -> tuple[Path, Path]:
    data, root = c.work / f"{name}-data", c.work / name
    shutil.copytree(c.data, data)
    first = c.run(c.env(root, 1, DATA_ROOT=str(data), WARM_START="head"))
    c.seen(first.stderr)
    if first.returncode != 0:
        raise SystemExit(f"{name}: the lineage's cold start failed: {first.stderr[-2000:]}")
    return data, root


def _versions(root: Path, env: dict[str, str]) -> list[dict[str, object]]:
    """The chain's versions that hold a run (not genesis, not a bare payload commit)."""
    log = _ml8s(env, "chain", "log", "--json", "--root", str(root), "--chain", "ml8s-model")
    return [v for v in json.loads(log.stdout) if v.get("run_id")] if log.returncode == 0 else []


def warm_trials(c: Campaign, n: int) -> Tally:
    tally = _tally()
    data, root = _lineage(c, "warm")
    for t in range(n):
        _generation(data, t + 1)
        env = c.env(root, 1, DATA_ROOT=str(data), WARM_START="head")
        how = c.kill(c.start(env), delay=c.rng.uniform(0.3, 1.3) * c.run_seconds)  # some land after the commit
        tally.killed += how.startswith("killed")
        c.judge(tally, root, env, set(), f"warm {t} ({how})")
        again = c.run(env)  # a plain re-run after success: a gate hit, never another version
        c.seen(again.stderr)
        if again.returncode != 0:
            _lost(tally, f"warm {t}: the re-run after success failed: {again.stderr[-300:]}")
        print(f"  warm trial {t + 1}/{n}: {how}", flush=True)
    versions = _versions(root, c.env(root, 0))
    if len(versions) != n + 1:
        tally.duplicates += max(0, len(versions) - (n + 1))
        tally.notes.append(f"warm: {len(versions)} chain versions for {n + 1} generations")
    c.audit_root(tally, root, c.env(root, 0))
    return tally


def warm_race_trials(c: Campaign, n: int) -> Tally:
    tally = _tally()
    data, root = _lineage(c, "warm-race")
    for t in range(n):
        _generation(data, t + 1)
        policy = "retrain" if t % 2 == 0 else "fail"
        envs = [
            c.env(root, 1, DATA_ROOT=str(data), WARM_START="head", EPOCHS=str(e), STALE_PARENT_POLICY=policy)
            for e in (2, 3, 4)
        ]
        procs = [c.start(env) for env in envs]
        outs = [p.communicate(timeout=600) for p in procs]
        c.seen(*(err for _, err in outs))
        tally.killed += 1
        winners = [env for env, p in zip(envs, procs, strict=True) if p.returncode == 0]
        for p, (_, err) in zip(procs, outs, strict=True):
            if p.returncode != 0 and not (policy == "fail" and _named(err, "LINEAGE_STALE_PARENT")):
                _lost(tally, f"warm-race {t} ({policy}): a racer exited {p.returncode}: {err.strip()[-300:]}")
        if winners:
            c.judge(tally, root, winners[0], set(), f"warm-race {t} ({policy})")
        else:
            _lost(tally, f"warm-race {t} ({policy}): no racer completed")
        print(f"  warm race {t + 1}/{n} ({policy}): exits {[p.returncode for p in procs]}", flush=True)
    c.audit_root(tally, root, c.env(root, 0))
    return tally


# -- chain operations -----------------------------------------------------------------------------


def _weights(c: Campaign) -> Path:
    return next((c.work / "calibrate").glob("ml8s_training_runs/*/model/model_native.safetensors"))


def _killed_op(c: Campaign, tally: Tally, n: int, name: str, args: list[str]) -> Tally:
    root = c.work / name
    shutil.copytree(c.work / "calibrate", root)
    env = c.env(root, 0)
    for t in range(n):
        proc = subprocess.Popen(
            [ML8S, *args, "--root", str(root)],
            env=env,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,  # Campaign.kill kills the process group
        )
        how = c.kill(proc, delay=c.rng.uniform(0.0, 2.0))
        tally.killed += how.startswith("killed")
        tally.trials += 1
        ok = _chain_ok(c, tally, root, env, f"{name} {t} ({how})")
        after = _ml8s(env, "chain", "commit", "--payload", str(_weights(c)), "--steps", "1", "--root", str(root))
        c.seen(after.stderr)
        if after.returncode != 0:
            _lost(tally, f"{name} {t}: the next commit failed: {after.stderr[-300:]}")
        elif ok:
            tally.recovered += 1
        print(f"  {name} trial {t + 1}/{n}: {how}", flush=True)
    tally.tracebacks, c.tracebacks = tally.tracebacks + c.tracebacks, 0
    return tally


def gc_trials(c: Campaign, n: int) -> Tally:
    return _killed_op(c, _tally(), n, "gc", ["chain", "gc", "--execute"])


def payload_trials(c: Campaign, n: int) -> Tally:
    return _killed_op(c, _tally(), n, "payload", ["chain", "commit", "--payload", str(_weights(c)), "--steps", "1"])


def tmpfs_kib(tree: Path) -> int:
    """What a copy of ``tree`` takes on a tmpfs, in KiB: every file whole pages (a root holds hundreds of small
    files, e.g. the MLflow model's code, so the sum of their sizes falls short and the copy hit ENOSPC)."""
    page = os.sysconf("SC_PAGE_SIZE")
    return sum(-(-p.stat().st_size // page) * page for p in tree.rglob("*") if p.is_file()) // 1024


def disk_warm_trials(c: Campaign, n: int) -> Tally | str:
    tally = _tally()
    data, source = _lineage(c, "disk-warm-source")
    _generation(data, 1)
    for t in range(n):
        mount = c.work / f"disk-warm-{t}"
        mount.mkdir()
        # measured per trial: the copied MLflow database names the source's artifact location, so each warm run
        # writes its MLflow model files into the source root, which grows trial by trial
        used = tmpfs_kib(source)
        size = used + used // 8 + 256 + c.rng.randint(0, max(64, used // 2))  # the copy fits, then the run fills it
        tmpfs = ["mount", "-t", "tmpfs", "-o", f"size={size}k", "tmpfs", str(mount)]
        mounted = subprocess.run(tmpfs, capture_output=True)
        if mounted.returncode != 0:
            return f"cannot mount a tmpfs ({mounted.stderr.decode().strip() or 'mount failed'})"
        try:
            shutil.copytree(source, mount / "root")
            env = c.env(mount / "root", 1, DATA_ROOT=str(data), WARM_START="head")
            # a chain of its own: a bare payload version at the lineage's head would (rightly) stop its warm starts
            args = ["chain", "commit", "--payload", str(_weights(c)), "--steps", "1", "--root", str(mount / "root")]
            args += ["--chain", "ml8s-payloads"]
            for what, proc in (("warm run", c.run(env)), ("payload commit", _ml8s(env, *args))):
                c.seen(proc.stderr)
                if proc.returncode != 0 and not _named(proc.stderr):
                    _lost(tally, f"disk-warm {size} KiB {what}: not one named error: {proc.stderr[-300:]}")
            subprocess.run(["mount", "-o", "remount,size=262144k", str(mount)], check=True)
            tally.killed += 1
            c.judge(tally, mount / "root", env, set(), f"disk-warm {size} KiB")
            _chain_ok(c, tally, mount / "root", env, f"disk-warm {size} KiB")
            print(f"  disk-warm {t + 1}/{n}: {size} KiB", flush=True)
        finally:
            subprocess.run(["umount", "-l", str(mount)], capture_output=True)
    return tally


# -- the registry, clocks, read-only roots --------------------------------------------------------


def mlflow_db_trials(c: Campaign, n: int) -> Tally:
    tally = _tally()
    for t in range(n):
        root = c.work / f"mlflow-db-{t}"  # a run of its own: a copied one would name the original's database
        env = c.env(root, 1)
        first = c.run(env)
        c.seen(first.stderr)
        if first.returncode != 0:
            _lost(tally, f"mlflow-db {t}: a plain run failed: {first.stderr[-300:]}")
            continue
        old = json.loads(first.stdout)["run_id"]
        database = root / "mlflow.db"
        blob = bytearray(database.read_bytes())
        start = c.rng.randrange(100, max(101, len(blob) - 4096))
        blob[start : start + 4096] = bytes(c.rng.randrange(256) for _ in range(min(4096, len(blob) - start)))
        database.write_bytes(bytes(blob))
        tally.trials += 1
        tally.killed += 1
        checks = [("verify", _ml8s(env, "verify", old)), ("run", c.run(c.env(root, 50 + t)))]
        for what, proc in checks:
            c.seen(proc.stdout, proc.stderr)
            if proc.returncode != 0 and not (_named(proc.stderr) or "RESULT: FAIL" in proc.stdout):
                _lost(tally, f"mlflow-db {t} {what} on a damaged database: unnamed: {proc.stderr[-300:]}")
        database.unlink()
        new = c.run(c.env(root, 90 + t))
        c.seen(new.stderr)
        verified = _ml8s(env, "verify", old)
        listed = _ml8s(env, "runs", "list", "--json")
        c.seen(verified.stderr, listed.stderr)
        states = {r["run_id"]: r.get("registration", "") for r in json.loads(listed.stdout or "[]")}
        if new.returncode != 0:
            _lost(tally, f"mlflow-db {t}: a run on a deleted database failed: {new.stderr[-300:]}")
        elif "REGISTRY_REPLACED" not in verified.stdout or not str(states.get(old, "")).startswith("unconfirmed"):
            _lost(tally, f"mlflow-db {t}: a recreated registry went unnoticed: {verified.stdout[-400:]} {states}")
        else:
            tally.recovered += 1
        print(f"  mlflow-db trial {t + 1}/{n}", flush=True)
    tally.tracebacks, c.tracebacks = tally.tracebacks + c.tracebacks, 0
    return tally


def skew_trials(c: Campaign, n: int) -> Tally | str:
    faketime = shutil.which("faketime")
    if faketime is None:
        return "faketime is not installed (.ci/run installs it)"
    tally, root = _tally(), c.work / "skew"
    for t in range(n):
        env = c.env(root, 6000 + t)
        proc = c.start(env)
        skewed = [faketime, "-f", "+2d", ML8S]
        rounds = 0
        while proc.poll() is None:
            for args in (["chain", "gc", "--execute"], ["tmp-cleanup", "--older-than-days", "1"]):
                done = subprocess.run([*skewed, *args, "--root", str(root)], env=env, text=True, capture_output=True)
                c.seen(done.stderr)
            rounds += 1
        out, err = proc.communicate()
        c.seen(err)
        tally.killed += rounds > 0
        if proc.returncode != 0:
            _lost(tally, f"skew {t}: the run failed under skewed GC: {err.strip()[-300:]}")
        elif _chain_ok(c, tally, root, env, f"skew {t}"):
            counter = [v for v in _versions(root, env) if v.get("run_id") == json.loads(out)["run_id"]]
            if len(counter) != 1:
                _lost(tally, f"skew {t}: the run's version is {'gone' if not counter else 'duplicated'}")
        c.judge(tally, root, env, set(), f"skew {t}")
        print(f"  skew trial {t + 1}/{n}: {rounds} skewed GC rounds during the run", flush=True)
    c.audit_root(tally, root, c.env(root, 0))
    return tally


def readonly_trials(c: Campaign, n: int) -> Tally:
    """The calibration root in place (a copy would verify as moved), read-only to the commands: as root they
    run as nobody (the campaign's directories are readable, not writable, by it), else it is chmod a-w."""
    tally, root = _tally(), c.work / "calibrate"
    for t in range(n):
        out = Path(tempfile.mkdtemp(prefix="faults-ro-"))
        out.chmod(0o777)
        prefix: tuple[str, ...] = ("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups")
        if os.geteuid() != 0:
            prefix = ()
            for path in [root, *root.rglob("*")]:
                path.chmod(path.stat().st_mode & ~0o222)
        env = c.env(root, 1, HOME=str(out), TMPDIR=str(out))
        run_id = json.loads(c.run(c.env(root, 1)).stdout)["run_id"]
        tally.trials += 1
        tally.killed += 1
        failed = []
        for args in (
            ("verify", run_id),
            ("chain", "verify", "--root", str(root)),
            ("chain", "log", "--root", str(root)),
            ("audit", "bundle", run_id, "-o", str(out / "bundle.tar.gz")),
            ("run",),
        ):
            proc = subprocess.run([*prefix, ML8S, *args], env=env, cwd=out, text=True, capture_output=True)
            c.seen(proc.stderr)
            if proc.returncode != 0:
                failed.append(f"{' '.join(args[:2])}: {proc.stderr.strip()[-200:]}")
        if failed:
            _lost(tally, f"readonly {t}: {failed}")
        else:
            tally.recovered += 1
        if not prefix:
            for path in [root, *root.rglob("*")]:
                path.chmod(path.stat().st_mode | 0o200)
        shutil.rmtree(out)
        print(f"  readonly trial {t + 1}/{n}", flush=True)
    tally.tracebacks, c.tracebacks = tally.tracebacks + c.tracebacks, 0
    return tally


def run_scenarios(c: Campaign, each: int, wanted: Callable[[str], bool], *, disk: bool) -> dict[str, Tally]:
    plain: dict[str, Callable[[Campaign, int], Tally]] = {
        "rank": rank_trials,
        "parent": parent_trials,
        "signal": signal_trials,
        "warm": warm_trials,
        "warm-race": warm_race_trials,
        "gc": gc_trials,
        "payload": payload_trials,
        "mlflow-db": mlflow_db_trials,
        "readonly": readonly_trials,
    }
    results: dict[str, Tally] = {}
    for name in SCENARIOS:
        if not wanted(name):
            continue
        if name in plain:
            results[name] = plain[name](c, each)
            print(results[name].row(name), flush=True)  # at once: a later scenario's crash loses nothing
            continue
        if name == "disk-warm" and not disk:
            print("disk-warm: skipped (--no-disk)")
            continue
        outcome = disk_warm_trials(c, each) if name == "disk-warm" else skew_trials(c, each)
        if isinstance(outcome, str):
            print(f"{name}: skipped: {outcome}")
        else:
            results[name] = outcome
            print(outcome.row(name), flush=True)
    return results
