"""A registration claim left by a killed holder on this machine is taken over at once (defect 7).

The claim records its holder's host, boot, pid namespace, pid and process start time. A waiter on the
same machine takes over a claim whose process is gone (no such pid, a zombie, or a pid reused by a
later process) without waiting for the lease; a live holder, and any holder on another machine, is
still waited for until its lease expires.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import make_context, write_small_churn
from mlflow import MlflowClient
from mlflow_support import copy_run, train_run

from ml8s.context.run import RunContext
from ml8s.errors import RegistryError
from ml8s.identity.settings import worker_id
from ml8s.registry.claim import HolderProcess, gone_reason, this_process
from ml8s.registry.registration import CLAIMS_DIR, register

# A child that records itself the way a claim does, then waits for its stdin to close.
HOLDER = """
import sys
from ml8s.registry.claim import this_process
print(this_process().model_dump_json(), flush=True)
sys.stdin.read()
"""


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    base = tmp_path_factory.mktemp("lease")
    data = write_small_churn(base / "data", rows=120, files=1)
    train_run(make_context(data, base / "template", epochs="1"))
    return data, base / "template"


@pytest.fixture
def ctx(trained: tuple[Path, Path], tmp_path: Path) -> RunContext:
    data, template = trained
    made = make_context(data, tmp_path / "root", epochs="1")
    copy_run(template, made.run_id, tmp_path / "root")
    return made


@pytest.fixture
def live_holder() -> Iterator[tuple[subprocess.Popen[str], HolderProcess]]:
    child = subprocess.Popen([sys.executable, "-c", HOLDER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    record = HolderProcess.model_validate_json(child.stdout.readline())
    yield child, record
    if child.stdin is not None:
        child.stdin.close()
    child.wait(timeout=30)


def _dead_holder() -> HolderProcess:
    """The record of a process of this machine that has exited and been reaped."""
    child = subprocess.Popen([sys.executable, "-c", HOLDER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    out, _ = child.communicate("", timeout=60)
    return HolderProcess.model_validate_json(out)


def _key(ctx: RunContext) -> str:
    return f"{CLAIMS_DIR}/{ctx.identity.full_config_hash}.json"


def _write_claim(ctx: RunContext, holder: HolderProcess) -> None:
    claim = {
        "holder": "killed-run",
        "generation": 7,
        "lease_expires": time.time() + 3600,  # an hour: only the holder's death lets a waiter in now
        "done": False,
        "process": holder.model_dump(),
    }
    ctx.open_store().put_if_match(_key(ctx), json.dumps(claim).encode(), None)


def _versions(ctx: RunContext) -> list[str]:
    client = MlflowClient(tracking_uri=ctx.settings.mlflow_tracking_uri)
    return sorted(str(v.version) for v in client.search_model_versions(f"name = '{ctx.settings.mlflow_model_name}'"))


def test_a_dead_holder_on_this_host_is_taken_over_at_once(ctx: RunContext, caplog: pytest.LogCaptureFixture) -> None:
    dead = _dead_holder()
    _write_claim(ctx, dead)

    with caplog.at_level(logging.INFO, logger="ml8s"):
        ref = register(ctx, ctx.open_store(), timeout_s=60)

    assert ref.model_version == "1" and _versions(ctx) == ["1"]
    claim = json.loads(ctx.open_store().get(_key(ctx)))
    assert claim["generation"] == 8 and claim["holder"] == worker_id() and claim["done"] is True
    # Linux hands out pids in increasing order: the dead child's pid is not reused within this test.
    assert claim["taken_over_from"] == f"killed-run (generation 7): process {dead.pid} on {dead.host} no longer exists"
    assert claim["process"] == this_process().model_dump()
    assert "taken over at once from dead holder killed-run (generation 7)" in caplog.text


def test_a_live_holder_on_this_host_still_blocks(
    ctx: RunContext, live_holder: tuple[subprocess.Popen[str], HolderProcess]
) -> None:
    child, record = live_holder
    assert record.pid == child.pid and record.start_ticks is not None
    _write_claim(ctx, record)

    with pytest.raises(RegistryError, match="timed out waiting for a model version") as caught:
        register(ctx, ctx.open_store(), timeout_s=0.6)

    assert "held by killed-run (generation 7)" in str(caught.value)
    assert _versions(ctx) == []
    assert json.loads(ctx.open_store().get(_key(ctx)))["generation"] == 7


@pytest.mark.parametrize(
    "elsewhere",
    [{"host": "another-host"}, {"boot_id": "another-boot"}, {"pid_namespace": "pid:[1]"}],
    ids=["other_host", "rebooted_or_other_kernel", "other_container"],
)
def test_a_holder_on_another_machine_is_waited_for(ctx: RunContext, elsewhere: dict[str, str]) -> None:
    _write_claim(ctx, _dead_holder().model_copy(update=elsewhere))

    with pytest.raises(RegistryError, match="timed out waiting for a model version"):
        register(ctx, ctx.open_store(), timeout_s=0.6)
    assert _versions(ctx) == []


def test_gone_reason_judges_only_what_it_can_know(live_holder: tuple[subprocess.Popen[str], HolderProcess]) -> None:
    _, record = live_holder
    assert gone_reason(None) == ""
    assert gone_reason(this_process()) == ""
    assert gone_reason(record) == ""
    assert gone_reason(record.model_copy(update={"start_ticks": None})) == ""  # no start time: the pid decides
    reused = gone_reason(record.model_copy(update={"start_ticks": (record.start_ticks or 0) + 1}))
    assert reused.startswith(f"process {record.pid} on {record.host} is another process now")
    assert gone_reason(record.model_copy(update={"pid": 0})) == ""
    dead = _dead_holder()
    assert gone_reason(dead) == f"process {dead.pid} on {dead.host} no longer exists"


def test_a_killed_unreaped_holder_is_gone() -> None:
    child = subprocess.Popen([sys.executable, "-c", HOLDER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    record = HolderProcess.model_validate_json(child.stdout.readline())
    child.kill()
    deadline = time.monotonic() + 30
    while gone_reason(record) == "" and time.monotonic() < deadline:  # the kernel makes it a zombie shortly
        time.sleep(0.01)
    try:
        assert gone_reason(record) == f"process {record.pid} on {record.host} has exited (state Z)"
    finally:
        child.wait(timeout=30)
    assert gone_reason(record) == f"process {record.pid} on {record.host} no longer exists"
