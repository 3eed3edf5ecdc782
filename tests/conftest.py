"""Shared fixtures: small deterministic datasets and run contexts under tmp_path."""

from __future__ import annotations

import fcntl
import functools
import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from s3_servers import moto_server, radosgw_server, s3_server  # noqa: F401  (pytest fixtures)

from ml8s.context.run import RunContext
from ml8s.pipeline.bootstrap import bootstrap
from ml8s.registry.schema import TEMPLATE_ENV, create_template

# Every file of a completed (onnx) run that is byte-identical wherever it was written: the seed's layout.
# manifest.json is not among them: it names its own pipeline root and MLflow run.
SEED_LAYOUT = (
    "config_snapshot.json",
    "data_fingerprint.json",
    "features/feature_matrix.parquet",
    "features/feature_schema.json",
    "metrics.json",
    "model/model.onnx",
    "model/model_native.safetensors",
    "success.marker",
    "training_metadata.json",
)


@pytest.fixture(scope="session", autouse=True)
def mlflow_schema_template(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """An empty MLflow database made once per test session (shared by the xdist workers) that every new
    local registry of the session is copied from (``ML8S_MLFLOW_SCHEMA_TEMPLATE``, inherited by the ``ml8s``
    and ``pyflyte`` processes tests start): some fifty migrations once, not once per registry. The copy is
    checked against alembic's head revision before use; tests of the creation itself unset the variable."""
    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent  # popen-gwN's parent: this session's, the same for every worker
    path = shared / "mlflow-schema-template.db"
    with open(shared / "mlflow-schema-template.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one worker creates it, the others wait and reuse it
        if not path.exists():
            create_template(str(path))
    previous = os.environ.get(TEMPLATE_ENV)
    os.environ[TEMPLATE_ENV] = str(path)
    yield path
    if previous is None:
        os.environ.pop(TEMPLATE_ENV, None)
    else:
        os.environ[TEMPLATE_ENV] = previous


# What makes a module's tests share a run: a fixture scoped wider than one test (made once per worker), or the
# session run of test_verify.py that test_audit_bundle.py uses too.
_SHARED_FIXTURE = re.compile(r"""scope=["'](?:module|class|package)["']""")
SHARED_SESSION_RUN = "verified_run"


@functools.cache
def _shares_runs(path: Path) -> str | None:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return None
    if re.search(rf"\b{SHARED_SESSION_RUN}\b", text):
        return SHARED_SESSION_RUN
    return "module" if _SHARED_FIXTURE.search(text) else None


def shared_run_scope(rootpath: Path, nodeid: str) -> str:
    """The unit ``make test`` schedules ``nodeid`` with: its module when the module's tests share a run, the
    session run's name for the tests of that run, else the test alone."""
    module = nodeid.split("::", 1)[0]
    shared = _shares_runs(rootpath / module)
    if shared is None:
        return nodeid
    return module if shared == "module" else shared


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """``-n auto`` (``make test``): one worker more than the usable cores, at most 8 (each worker keeps its own fork
    servers and S3 servers). Two workers on two cores left the cores idle while a test waited on a server, a
    back-off or a disk sync (7% of the cores' time); a third takes most of it (2% idle). Alternated on a fresh
    clone of this project's 2-core machine: 8:59 against 9:13 with two. ``PYTEST_XDIST_AUTO_NUM_WORKERS``
    still decides where it is set (xdist reads it)."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None
    return min(len(os.sched_getaffinity(0)) + 1, 8)


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """``--dist loadgroup`` (``make test``): the tests that share a run go to one worker as one unit, so the run is
    made once, not once per worker (the load scheduler deals a module's tests to the workers in turn); the other
    tests are dealt one by one, after the units, and balance the end. Done here, by module, because xdist 3.8's own
    loadgroup groups nothing under pytest 9.2 (it renames node ids, which pytest 9.2 no longer reads back)."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class SharedRunScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return shared_run_scope(config.rootpath, nodeid)

    return SharedRunScheduling(config, log)  # type: ignore[arg-type]


def write_small_churn(directory: Path, rows: int = 600, files: int = 2) -> Path:
    """A tiny churn-like CSV dataset (numeric, categorical, boolean, missing values), deterministic."""
    directory.mkdir(parents=True, exist_ok=True)
    per_file = rows // files
    plans = ["basic", "plus", "pro"]
    for f in range(files):
        lines = ["customer_id,tenure,monthly_charges,plan,auto_pay,churned"]
        for i in range(per_file):
            n = f * per_file + i
            tenure = "" if n % 37 == 0 else str((n * 7) % 72)
            charges = f"{20 + (n * 13) % 100}.{n % 10}"
            plan = "" if n % 41 == 0 else plans[(n * 5) % 3]
            auto = "true" if (n * 3) % 4 else "false"
            churned = "yes" if ((n * 7) % 72 < 12) != (n % 9 == 0) else "no"
            lines.append(f"C{n:05d},{tenure},{charges},{plan},{auto},{churned}")
        (directory / f"part-{f:03d}.csv").write_text("\n".join(lines) + "\n")
    return directory


@pytest.fixture
def small_data(tmp_path: Path) -> Path:
    return write_small_churn(tmp_path / "data")


def make_context(data: Path, root: Path, **overrides: str) -> RunContext:
    env = {"DATA_ROOT": str(data), "TARGET_COLUMN": "churned", "PIPELINE_ROOT_URI": str(root), "EPOCHS": "2"}
    env.update({k.upper(): v for k, v in overrides.items()})
    return bootstrap(env)


@pytest.fixture
def small_ctx(small_data: Path, tmp_path: Path) -> RunContext:
    return make_context(small_data, tmp_path / "root")
