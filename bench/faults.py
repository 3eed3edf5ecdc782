"""Fault campaign: run the pipeline the way production breaks it, and count what survives (`make faults`).

Not a test and not a benchmark: a tool anyone can run on a machine to see whether crashes, races and
full disks ever lose a run, register a model twice or wedge the registry. Every run is a real
``ml8s run`` process on the small churn dataset of ``tests/conftest.py``:

- kill: runs until ``--trials`` kills landed (each a new RUN_ID in one shared pipeline root, so the MLflow database and
  the chain are shared like in production) are SIGKILLed, half at a random moment of a run, half
  inside a write (as soon as the k-th temporary file of the run, its chain commit or the MLflow
  schema shows up). A plain re-run must then complete and ``verify`` must pass.
- race: ``--races`` rounds of ``--racers`` identical runs started together: one artifact set, one
  MLflow version, one chain block, and each run verifies.
- forced: a completed run re-run with FORCE_RERUN=true and killed midway, then re-run plainly.
- disk: a tmpfs of a few sizes below and above what a run needs (root only; skipped with the reason
  otherwise): the run fails with one named error (never a traceback), then the disk is grown and a
  re-run heals.

A trial counts as *killed* when the kill landed before the run ended by itself. It is *recovered*
when the re-run exits 0 and verify passes; *stray* when the only failure is a leftover ``*.new``
temporary file; *baseline* when verify fails exactly as it does with no fault at all (measured first,
per scenario); *wedged* when the re-run fails on the registry; *lost* otherwise. Duplicates are MLflow
versions or chain blocks counted more than once per run. Exit status 1 when
anything was lost, duplicated or wedged.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ML8S = str(Path(sys.executable).with_name("ml8s"))
# A file whose path holds one of these is a write in progress: a store temp file (.tmp/ or *.new), the
# MLflow schema being created, a sqlite transaction.
KILL_MARKERS = ("/.tmp/", ".new", ".creating-", "-journal")
RUN_TIMEOUT_S = 600


def small_churn(directory: Path, rows: int) -> Path:
    """The tests' dataset generator (tests/conftest.py), imported by path so there is one copy."""
    sys.path.insert(0, str(REPO / "tests"))
    spec = importlib.util.spec_from_file_location("ml8s_tests_conftest", REPO / "tests" / "conftest.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return Path(module.write_small_churn(directory, rows=rows, files=2))


@dataclass
class Tally:
    trials: int = 0
    killed: int = 0
    recovered: int = 0
    stray: int = 0
    baseline: int = 0
    wedged: int = 0
    lost: int = 0
    duplicates: int = 0
    tracebacks: int = 0
    stray_tmp: int = 0
    notes: list[str] = field(default_factory=list)

    COLUMNS = ("trials", "killed", "recovered", "stray", "baseline", "wedged", "lost", "duplicates")
    COLUMNS += ("tracebacks", "stray_tmp")
    HEADERS = ("trials", "landed", "recovered", "stray", "baseline", "wedged", "lost", "dupl.", "tracebk", "tmp")

    def row(self, name: str) -> str:
        return f"{name:<10}" + "".join(f"{getattr(self, c):>10}" for c in self.COLUMNS)

    @property
    def bad(self) -> int:
        return self.lost + self.duplicates + self.wedged + self.tracebacks + self.stray_tmp


class Campaign:
    def __init__(self, work: Path, data: Path, rng: random.Random) -> None:
        self.work, self.data, self.rng = work, data, rng
        self.durations: list[float] = []
        # every run's $TMPDIR: what a trial leaves there is counted (ml8s-* after the re-run and tmp-cleanup)
        self.tmp = work / "tmp"
        self.tmp.mkdir(exist_ok=True)
        self.tracebacks = 0  # seen in the output of processes since the last judged trial

    @property
    def run_seconds(self) -> float:
        """How long a full run takes now: the median of the last plain runs (the machine's load changes)."""
        recent = sorted(self.durations[-5:]) or [10.0]
        return recent[len(recent) // 2]

    def env(self, root: Path, seed: int, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "FORCE_RERUN", "CHAIN_"))}
        env.update(DATA_ROOT=str(self.data), TARGET_COLUMN="churned", PIPELINE_ROOT_URI=str(root), EPOCHS="2")
        env.update(RANDOM_SEED=str(seed), PYTHONPATH=os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]))
        env.update(TMPDIR=str(self.tmp))
        env.update(extra)
        return env

    def seen(self, *outputs: str | None) -> None:
        """Count a traceback in any output a process printed (never acceptable: every failure is one line)."""
        self.tracebacks += sum("Traceback (most recent call last)" in (o or "") for o in outputs)

    def stray_tmp(self) -> list[str]:
        return sorted(p.name for p in self.tmp.iterdir() if p.name.startswith("ml8s-"))

    def tmp_cleanup(self, root: Path, env: dict[str, str]) -> None:
        done = subprocess.run([ML8S, "tmp-cleanup", "--root", str(root)], env=env, text=True, capture_output=True)
        self.seen(done.stderr)

    def start(self, env: dict[str, str]) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [ML8S, "run"], env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True
        )

    def run(self, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run([ML8S, "run"], env=env, text=True, capture_output=True, timeout=RUN_TIMEOUT_S)

    @staticmethod
    def run_id(env: dict[str, str]) -> str:
        from ml8s.pipeline.bootstrap import bootstrap

        return bootstrap(env).run_id

    @staticmethod
    def verify(root: Path, run_id: str, env: dict[str, str]) -> tuple[set[str], list[str]]:
        """The failed checks of ``ml8s verify`` and their problems (in-process: no interpreter start)."""
        from ml8s.audit import verify_run

        report = verify_run(str(root), run_id, env)
        failed = [c for c in report.checks if c.status.value != "PASS"]
        return {c.name for c in failed}, [f"{c.name}: {c.reason}" for c in failed]

    def kill(self, proc: subprocess.Popen[str], *, delay: float | None = None, watch: list[Path] | None = None) -> str:
        """SIGKILL the run's process group after ``delay`` seconds, or when its k-th write shows up in ``watch``
        (directories walked; the pipeline root itself only at its top level)."""
        started, target = time.monotonic(), self.rng.randint(1, 6)
        before = _in_progress(watch or [])
        seen: set[str] = set()
        while proc.poll() is None:
            if delay is not None and time.monotonic() - started >= delay:
                break
            if watch is not None:
                seen |= _in_progress(watch) - before
                if len(seen) >= target:
                    break
            time.sleep(0.002)
        if proc.poll() is not None:
            self.seen(*proc.communicate())
            return "finished before the kill"
        os.killpg(proc.pid, signal.SIGKILL)
        self.seen(*proc.communicate())
        return f"killed after {time.monotonic() - started:.2f}s" + (f" at write {len(seen)}" if watch else "")

    def judge(self, tally: Tally, root: Path, env: dict[str, str], baseline: set[str], what: str) -> None:
        """Re-run plainly, verify, and put the trial in exactly one class."""
        tally.trials += 1
        started = time.monotonic()
        rerun = self.run(env)
        if rerun.returncode == 0:
            self.durations.append(time.monotonic() - started)
        self.seen(rerun.stderr)
        self.tmp_cleanup(root, env)
        tally.tracebacks, self.tracebacks = tally.tracebacks + self.tracebacks, 0
        if left := self.stray_tmp():
            tally.stray_tmp += len(left)
            tally.notes.append(f"{what}: left in $TMPDIR after the re-run and tmp-cleanup: {left}")
            for name in left:
                shutil.rmtree(self.tmp / name, ignore_errors=True)
        last = (rerun.stderr.strip().splitlines() or [""])[-1]
        if rerun.returncode != 0:
            wedged = "REGISTRY" in last
            tally.wedged += wedged
            tally.lost += not wedged
            tally.notes.append(f"{what}: re-run exited {rerun.returncode}: {last[:300]}")
            return
        run_id = json.loads(rerun.stdout)["run_id"]
        failed, problems = self.verify(root, run_id, env)
        if not failed:
            tally.recovered += 1
        elif failed == {"unexpected_files"} and all(".new" in p for p in problems):
            tally.stray += 1
            tally.notes.append(f"{what}: stray temporary file: {problems[0][:200]}")
        elif failed <= baseline:
            tally.baseline += 1
        else:
            tally.lost += 1
            tally.notes.append(f"{what}: verify failed: {'; '.join(problems)[:400]}")

    def audit_root(self, tally: Tally, root: Path, env: dict[str, str]) -> None:
        """Duplicates (MLflow versions, chain blocks per run), chain integrity and the registry schema."""
        from mlflow import MlflowClient

        from ml8s.errors import RegistryError
        from ml8s.registry.schema import ensure_schema

        uri = f"sqlite:///{root}/mlflow.db"
        if (root / "mlflow.db").exists():
            try:
                ensure_schema(uri)
            except RegistryError as exc:
                tally.wedged += 1
                tally.notes.append(f"{root.name}: registry schema: {exc}")
                return
            counts: dict[str, int] = {}
            for version in MlflowClient(tracking_uri=uri).search_model_versions("name = 'ml8s-model'"):
                key = str(version.tags.get("full_config_hash", ""))
                counts[key] = counts.get(key, 0) + 1
            for key, n in sorted(counts.items()):
                if n > 1:
                    tally.duplicates += n - 1
                    tally.notes.append(f"{root.name}: {n} MLflow versions for full_config_hash {key[:12]}")
        log = subprocess.run(
            [ML8S, "chain", "log", "--json", "--root", str(root), "--chain", "ml8s-model"],
            env=env,
            text=True,
            capture_output=True,
        )
        if log.returncode == 0:
            blocks: dict[str, int] = {}
            for block in json.loads(log.stdout):
                blocks[block["run_id"]] = blocks.get(block["run_id"], 0) + 1
            for run_id, n in sorted(blocks.items()):
                if run_id and n > 1:
                    tally.duplicates += n - 1
                    tally.notes.append(f"{root.name}: {n} chain blocks for run {run_id}")
        checked = subprocess.run(
            [ML8S, "chain", "verify", "--root", str(root)], env=env, text=True, capture_output=True
        )
        if log.returncode != 0 or checked.returncode != 0:
            tally.lost += 1
            tally.notes.append(f"{root.name}: chain log/verify failed: {(checked.stdout + checked.stderr)[-300:]}")


def _in_progress(watch: list[Path]) -> set[str]:
    found: set[str] = set()
    for i, directory in enumerate(watch):
        if i == len(watch) - 1:  # the pipeline root: top level only (mlflow.db.creating-*, mlflow.db-journal)
            names = os.listdir(directory) if directory.is_dir() else []
            found |= {str(directory / n) for n in names if any(m in n for m in KILL_MARKERS)}
            continue
        for base, _, files in os.walk(directory):
            found |= {p for p in (os.path.join(base, f) for f in files) if any(m in p for m in KILL_MARKERS)}
    return found


def calibrate(c: Campaign) -> set[str]:
    root = c.work / "calibrate"
    env = c.env(root, 1)
    first = c.run(env)
    if first.returncode != 0:
        raise SystemExit(f"a plain run fails without any fault: {first.stderr[-2000:]}")
    failed, problems = c.verify(root, json.loads(first.stdout)["run_id"], env)
    if failed:
        raise SystemExit(f"a plain run does not verify without any fault: {problems}")
    started = time.monotonic()  # a run in a root that has its MLflow database: what the trials see
    forced = c.run({**env, "FORCE_RERUN": "true"})
    c.durations.append(time.monotonic() - started)
    forced_failed, problems = c.verify(root, json.loads(forced.stdout)["run_id"], env)
    if forced_failed:
        print(f"baseline: verify after an uninterrupted FORCE_RERUN fails: {problems}", flush=True)
    return forced_failed


def kill_trials(c: Campaign, kills: int) -> Tally:
    """Trials until ``kills`` kills landed (a run may end before its random moment or its k-th write)."""
    tally, root = Tally(), c.work / "kill"
    trial = 0
    while tally.killed < kills and trial < 3 * kills:
        env = c.env(root, 1000 + trial)
        run_id = c.run_id(env)
        proc = c.start(env)
        if trial % 2:
            watch = [root / "ml8s_training_runs" / run_id, root / "ml8s_chain", root]
            how = c.kill(proc, watch=watch)
        else:
            how = c.kill(proc, delay=c.rng.uniform(0.0, c.run_seconds))
        tally.killed += how.startswith("killed")
        c.judge(tally, root, env, set(), f"kill {trial} ({how})")
        print(f"  kill trial {trial + 1} ({tally.killed}/{kills} kills): {how}", flush=True)
        trial += 1
    c.audit_root(tally, root, c.env(root, 0))
    return tally


def race_trials(c: Campaign, rounds: int, racers: int) -> Tally:
    tally, root = Tally(), c.work / "race"
    for round_ in range(rounds):
        env = c.env(root, 5000 + round_)
        procs = [c.start(env) for _ in range(racers)]
        outs = [p.communicate(timeout=RUN_TIMEOUT_S) for p in procs]
        c.seen(*(err for _, err in outs))
        for proc, (_, err) in zip(procs, outs, strict=True):
            if proc.returncode != 0:
                tally.lost += 1
                tally.notes.append(f"race {round_}: a racer exited {proc.returncode}: {err.strip()[-300:]}")
        manifests = {json.loads(out)["run_id"] for (out, _), p in zip(outs, procs, strict=True) if p.returncode == 0}
        if len(manifests) > 1:
            tally.notes.append(f"race {round_}: racers report different runs {sorted(manifests)}")
        c.judge(tally, root, env, set(), f"race {round_}")
        print(f"  race round {round_ + 1}/{rounds}: {racers} racers", flush=True)
    if rounds:  # --races 0: no root was written, so there is nothing to audit
        c.audit_root(tally, root, c.env(root, 0))
    return tally


def forced_trials(c: Campaign, kills: int, baseline: set[str]) -> Tally:
    tally, root = Tally(), c.work / "forced"
    env = c.env(root, 9000)
    c.run(env)
    trial = 0
    while tally.killed < kills and trial < 3 * kills:
        how = c.kill(c.start({**env, "FORCE_RERUN": "true"}), delay=c.rng.uniform(0.1, 0.9) * c.run_seconds)
        tally.killed += how.startswith("killed")
        c.judge(tally, root, env, baseline, f"forced {trial} ({how})")
        print(f"  forced re-run trial {trial + 1} ({tally.killed}/{kills} kills): {how}", flush=True)
        trial += 1
    c.audit_root(tally, root, env)
    return tally


def disk_trials(c: Campaign, sizes_kib: list[int]) -> Tally | str:
    tally = Tally()
    for i, size in enumerate(sizes_kib):
        # A new path each time: MLflow clients cache their database connection by URI, in this process too.
        mount = c.work / f"disk-{size}k"
        mount.mkdir()
        attempt = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}k", "tmpfs", str(mount)], capture_output=True
        )
        if attempt.returncode != 0:
            reason = attempt.stderr.decode().strip() or "mount failed"
            return f"cannot mount a tmpfs ({reason}); a loop device needs mount too"
        try:
            env = c.env(mount / "root", 7000 + i)
            full = c.run(env)
            c.seen(full.stderr)
            last = (full.stderr.strip().splitlines() or [""])[-1]
            if full.returncode != 0 and ("Traceback" in full.stderr or not last.startswith("ml8s: ")):
                tally.lost += 1
                tally.notes.append(f"disk {size} KiB: not one named error: {full.stderr[-300:]}")
            subprocess.run(["mount", "-o", "remount,size=262144k", str(mount)], check=True)
            c.judge(tally, mount / "root", env, set(), f"disk {size} KiB ({last[:120] or 'fit'})")
            c.audit_root(tally, mount / "root", env)
            print(f"  disk {size} KiB: {'completed' if full.returncode == 0 else last[:160]}", flush=True)
        finally:
            subprocess.run(["umount", "-l", str(mount)], capture_output=True)
    return tally


def main(argv: list[str] | None = None) -> int:
    from faults_scenarios import SCENARIOS, run_scenarios

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=50, help="kill -9 trials that land (default 50)")
    parser.add_argument("--races", type=int, default=2, help="rounds of racing identical runs")
    parser.add_argument("--racers", type=int, default=4, help="identical runs per round")
    parser.add_argument("--forced", type=int, default=4, help="FORCE_RERUN runs killed midway (kills that land)")
    parser.add_argument("--each", type=int, default=0, help="trials per newer scenario (default: trials / 10, >= 2)")
    names = ",".join(("kill", "race", "forced", "disk", *SCENARIOS))
    parser.add_argument("--only", default="", help=f"scenarios, comma-separated (default all): {names}")
    parser.add_argument("--no-disk", action="store_true", help="skip the disk-full parts")
    parser.add_argument(
        "--disk-sizes", default="0.05,0.25,0.5,0.8,0.95,1.5", help="tmpfs sizes, as fractions of what a run writes"
    )
    parser.add_argument("--rows", type=int, default=200, help="rows of the generated dataset")
    parser.add_argument("--seed", type=int, default=0, help="seed of the kill moments")
    args = parser.parse_args(argv)
    only = {name for name in args.only.split(",") if name}
    wanted = lambda name: not only or name in only  # noqa: E731
    work = Path(tempfile.mkdtemp(prefix="ml8s-faults-"))
    work.chmod(0o755)  # the readonly scenario reads the calibration root as another user
    os.environ["PYTHONPATH"] = os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])
    c = Campaign(work, small_churn(work / "data", args.rows), random.Random(args.seed))
    print(f"fault campaign in {work}", flush=True)
    forced_baseline = calibrate(c)
    print(f"a plain run takes {c.run_seconds:.1f}s here", flush=True)
    results: dict[str, Tally] = {}
    if wanted("kill"):
        results["kill"] = kill_trials(c, args.trials)
        print(results["kill"].row("kill"), flush=True)
    if wanted("race"):
        results["race"] = race_trials(c, args.races, args.racers)
        print(results["race"].row("race"), flush=True)
    if wanted("forced"):
        results["forced"] = forced_trials(c, args.forced, forced_baseline)
        print(results["forced"].row("forced"), flush=True)
    if args.no_disk or not wanted("disk"):
        print("disk: skipped")
    else:
        used_kib = sum(p.stat().st_size for p in (work / "calibrate").rglob("*") if p.is_file()) // 1024
        fractions = [float(f) for f in args.disk_sizes.split(",") if f]
        disk = disk_trials(c, sorted({max(64, int(used_kib * f)) for f in fractions}))
        if isinstance(disk, str):
            print(f"disk: skipped: {disk}")
        else:
            results["disk"] = disk
    each = args.each or max(2, args.trials // 10)
    results.update(run_scenarios(c, each, wanted, disk=not args.no_disk))
    print("\n" + f"{'':<10}" + "".join(f"{h:>10}" for h in Tally.HEADERS))
    total = Tally()
    for name, tally in results.items():
        print(tally.row(name))
        for attr in Tally.COLUMNS:
            setattr(total, attr, getattr(total, attr) + getattr(tally, attr))
    print(total.row("total"))
    for name, tally in results.items():
        for note in tally.notes:
            print(f"  [{name}] {note}")
    print(
        f"\n{'FAIL' if total.bad else 'PASS'}: {total.lost} lost, {total.duplicates} duplicates, {total.wedged} "
        f"wedged, {total.tracebacks} tracebacks, {total.stray_tmp} stray temp files"
    )
    return 1 if total.bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
