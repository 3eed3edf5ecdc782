"""MLflow registration: one model version and one run per full_config_hash, across processes and crashes.

Registration logs the run's MLflow model from its published artifacts, so each test registers a copy of
runs trained once for the module.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import make_context, write_small_churn
from mlflow import MlflowClient
from mlflow.entities import ViewType
from mlflow_support import copy_run, train_run

from ml8s.context.run import RunContext
from ml8s.contract import layout
from ml8s.errors import RegistryError
from ml8s.identity.settings import PlatformSettings, worker_id
from ml8s.registry import registration as registry
from ml8s.registry.mlflow_model import experiment_location
from ml8s.registry.registration import CLAIMS_DIR, MlflowRef, register

TAGS = ("run_id", "full_config_hash", "data_fingerprint", "artifact_uri")

# A child process: import everything, say it is ready, wait for the barrier, register.
CHILD = """
import os, sys, time
import mlflow
from ml8s.context.run import RunContext
from ml8s.contract import layout
from ml8s.registry.mlflow_model import experiment_location
from ml8s.registry.registration import register
ctx_file, ready, barrier = sys.argv[1:4]
ctx = RunContext.from_json(open(ctx_file).read())
open(ready, "w").close()
deadline = time.monotonic() + 600  # a test that gave up never leaves this child waiting
while not os.path.exists(barrier):
    assert time.monotonic() < deadline, "no go from the test"
    time.sleep(0.005)
print(register(ctx, ctx.open_store(), timeout_s=60).model_dump_json())
"""


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The data and a root holding two trained runs of it (EPOCHS 2 and 3), not registered."""
    base = tmp_path_factory.mktemp("registry")
    data = write_small_churn(base / "data")
    for epochs in ("2", "3"):
        train_run(make_context(data, base / "template", epochs=epochs))
    return data, base / "template"


def _context(trained: tuple[Path, Path], root: Path, **overrides: str) -> RunContext:
    """A context of a trained run whose artifacts are copied under ``root``."""
    data, template = trained
    ctx = make_context(data, root, **overrides)
    copy_run(template, ctx.run_id, root)
    return ctx


def _client(ctx: RunContext) -> MlflowClient:
    return MlflowClient(tracking_uri=ctx.settings.mlflow_tracking_uri)


def _versions(ctx: RunContext) -> list[int]:
    found = _client(ctx).search_model_versions(f"name = '{ctx.settings.mlflow_model_name}'")
    return sorted(int(v.version) for v in found)


def _runs(ctx: RunContext) -> list[str]:
    client = _client(ctx)
    experiment = client.get_experiment_by_name(ctx.settings.mlflow_experiment_prefix)
    return [str(r.info.run_id) for r in client.search_runs([experiment.experiment_id])]


def _expected_tags(ctx: RunContext) -> dict[str, str]:
    identity = ctx.identity
    return {
        "run_id": identity.run_id,
        "full_config_hash": identity.full_config_hash,
        "data_fingerprint": identity.data_fingerprint,
        "artifact_uri": ctx.uri("model"),
    }


def _write_claim(ctx: RunContext, holder: str, lease_expires: float) -> None:
    claim = {"holder": holder, "generation": 7, "lease_expires": lease_expires, "done": False}
    ctx.open_store().put_if_match(
        f"{CLAIMS_DIR}/{ctx.identity.full_config_hash}.json", json.dumps(claim).encode(), None
    )


def test_register_twice_is_idempotent(trained: tuple[Path, Path], tmp_path: Path) -> None:
    ctx = _context(trained, tmp_path / "root")
    metrics = {"accuracy": 0.75, "loss": 0.5, "per_class": {"yes": 0.5}, "flag": True}
    ctx.writer(ctx.open_store()).write_bytes("metrics.json", json.dumps(metrics).encode(), "test")  # numbers only

    first = register(ctx, ctx.open_store())
    second = register(ctx, ctx.open_store())

    assert first == second
    assert first.model_version == "1" and first.model_name == ctx.settings.mlflow_model_name
    assert first.tracking_uri == f"sqlite:///{tmp_path}/root/mlflow.db"
    assert first.experiment_name == ctx.settings.mlflow_experiment_prefix
    assert _versions(ctx) == [1]
    assert _runs(ctx) == [first.mlflow_run_id]
    client = _client(ctx)
    version = client.get_model_version(first.model_name, first.model_version)
    assert {k: version.tags[k] for k in TAGS} == _expected_tags(ctx)
    (logged,) = client.search_logged_models([first.experiment_id])
    assert version.source == f"models:/{logged.model_id}" and version.run_id == first.mlflow_run_id
    assert logged.source_run_id == first.mlflow_run_id and str(logged.status) == "READY"
    assert ctx.run_id in version.description
    run = client.get_run(first.mlflow_run_id)
    assert {k: run.data.tags[k] for k in TAGS} == _expected_tags(ctx)
    losses = [m.value for m in client.get_metric_history(first.mlflow_run_id, "train_loss")]
    epochs = json.loads(ctx.open_store().get(ctx.key(layout.EPOCH_LOG)))["epochs"]
    curves = {f"held_out_{k}": epochs[-1][f"held_out_{k}"] for k in ("log_loss", "accuracy")}
    assert len(losses) == 2 and run.data.metrics == {"accuracy": 0.75, "loss": 0.5, "train_loss": losses[-1], **curves}
    for name in ("train_loss", *curves):  # each point at the time its epoch ended, not at registration
        history = sorted(client.get_metric_history(first.mlflow_run_id, name), key=lambda m: m.step)
        assert [(m.step, m.timestamp) for m in history] == [(e["epoch"], e["time_ms"]) for e in epochs], name
    assert run.data.params["epochs"] == "2"
    assert run.data.params["target_column"] == "churned"
    assert set(run.data.params) == set(ctx.identity.canonical_config)
    assert run.info.status == "FINISHED"
    claim = json.loads(ctx.open_store().get(f"{CLAIMS_DIR}/{ctx.identity.full_config_hash}.json"))
    assert claim["done"] is True and claim["model_version"] == "1" and claim["holder"] == worker_id()


def test_racing_processes_register_one_version(trained: tuple[Path, Path], tmp_path: Path) -> None:
    ctx = _context(trained, tmp_path / "root")
    ctx_file = tmp_path / "ctx.json"
    ctx_file.write_text(ctx.to_json())
    barrier = tmp_path / "go"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", CHILD, str(ctx_file), str(tmp_path / f"ready-{i}"), str(barrier)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(4)
    ]
    try:
        # importing mlflow in four processes at once takes long on a loaded machine: the bound is generous
        deadline = time.monotonic() + 180
        while not all((tmp_path / f"ready-{i}").exists() for i in range(4)):
            assert time.monotonic() < deadline and all(p.poll() is None for p in procs), "children did not start"
            time.sleep(0.01)
        barrier.touch()
        refs = []
        for proc in procs:
            out, err = proc.communicate(timeout=120)
            assert proc.returncode == 0, err
            refs.append(MlflowRef.model_validate_json(out.strip().splitlines()[-1]))
    finally:
        for proc in procs:  # none is left waiting for the go when an assertion above failed
            proc.kill()
            proc.wait()

    assert len(set(refs)) == 1
    assert refs[0].model_version == "1"
    assert _versions(ctx) == [1]
    assert _runs(ctx) == [refs[0].mlflow_run_id]
    assert len(_client(ctx).search_logged_models([refs[0].experiment_id])) == 1


def test_stale_claim_is_taken_over(trained: tuple[Path, Path], tmp_path: Path) -> None:
    ctx = _context(trained, tmp_path / "root")
    _write_claim(ctx, "crashed-host-1", time.time() - 5)

    ref = register(ctx, ctx.open_store(), timeout_s=30)

    assert ref.model_version == "1" and _versions(ctx) == [1]
    claim = json.loads(ctx.open_store().get(f"{CLAIMS_DIR}/{ctx.identity.full_config_hash}.json"))
    assert claim["generation"] == 8 and claim["holder"] == worker_id() and claim["done"] is True


def test_live_claim_makes_register_wait_then_fail(trained: tuple[Path, Path], tmp_path: Path) -> None:
    ctx = _context(trained, tmp_path / "root")
    _write_claim(ctx, "busy-host-1", time.time() + 3600)

    started = time.monotonic()
    with pytest.raises(RegistryError, match="timed out waiting for a model version") as caught:
        register(ctx, ctx.open_store(), timeout_s=0.6)

    assert time.monotonic() - started >= 0.6
    assert "busy-host-1" in str(caught.value) and ctx.identity.full_config_hash in str(caught.value)
    assert _versions(ctx) == []


def test_done_claim_without_version_registers_again(trained: tuple[Path, Path], tmp_path: Path) -> None:
    """A claim marked done is no proof: MLflow is checked (the version may have been deleted)."""
    ctx = _context(trained, tmp_path / "root")
    first = register(ctx, ctx.open_store())
    client = _client(ctx)
    source = client.get_model_version(first.model_name, first.model_version).source
    client.delete_model_version(first.model_name, first.model_version)

    again = register(ctx, ctx.open_store())

    assert again.model_version == "2" and again.mlflow_run_id == first.mlflow_run_id
    assert _versions(ctx) == [2] and _runs(ctx) == [first.mlflow_run_id]
    assert client.get_model_version(again.model_name, "2").source == source  # the run's logged model, reused
    assert len(client.search_logged_models([first.experiment_id])) == 1


def test_a_version_whose_mlflow_run_was_purged_is_named_with_the_fix(
    trained: tuple[Path, Path], tmp_path: Path
) -> None:
    """A deleted MLflow run purged by `mlflow gc` while its version stays: every re-registration (FORCE_RERUN)
    failed with MLflow's bare 'Run with id=... not found'. It names the version, the run and the way out, which
    then registers one version again."""
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    ctx = _context(trained, tmp_path / "root")
    first = register(ctx, ctx.open_store())
    client = _client(ctx)
    client.delete_run(first.mlflow_run_id)
    SqlAlchemyStore(ctx.settings.mlflow_tracking_uri, str(tmp_path / "artifacts"))._hard_delete_run(first.mlflow_run_id)

    with pytest.raises(RegistryError) as caught:
        register(ctx, ctx.open_store())
    message = str(caught.value)
    assert f"model version 1 of {ctx.settings.mlflow_model_name!r}" in message
    assert f"MLflow run {first.mlflow_run_id} no longer exists" in message and "delete model version 1" in message

    client.delete_model_version(first.model_name, first.model_version)
    again = register(ctx, ctx.open_store())
    assert again.model_version == "2" and again.mlflow_run_id != first.mlflow_run_id and _versions(ctx) == [2]


def test_different_config_creates_second_version(trained: tuple[Path, Path], tmp_path: Path) -> None:
    ctx2 = _context(trained, tmp_path / "root")
    ctx3 = _context(trained, tmp_path / "root", epochs="3")
    assert ctx2.identity.full_config_hash != ctx3.identity.full_config_hash

    ref2, ref3 = register(ctx2, ctx2.open_store()), register(ctx3, ctx3.open_store())

    assert (ref2.model_version, ref3.model_version) == ("1", "2")
    assert ref2.mlflow_run_id != ref3.mlflow_run_id
    assert _versions(ctx2) == [1, 2]
    assert sorted(_runs(ctx2)) == sorted([ref2.mlflow_run_id, ref3.mlflow_run_id])
    tags = _client(ctx3).get_model_version(ref3.model_name, "2").tags
    assert tags["full_config_hash"] == ctx3.identity.full_config_hash and tags["run_id"] == ctx3.run_id


def test_duplicate_from_an_unseen_racer_is_reconciled(
    trained: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A racer invisible at check time (another root, same MLflow): the lowest version wins, ours goes."""
    ctx = _context(trained, tmp_path / "root")
    client = _client(ctx)
    other = client.create_experiment("other-root")
    racer_run = client.create_run(other, tags=_expected_tags(ctx)).info.run_id
    client.create_registered_model(ctx.settings.mlflow_model_name)
    tags = _expected_tags(ctx)
    client.create_model_version(ctx.settings.mlflow_model_name, tags["artifact_uri"], racer_run, tags=tags)
    monkeypatch.setattr(registry, "_find_version", lambda client, ctx: None)

    ref = register(ctx, ctx.open_store())

    assert (ref.model_version, ref.mlflow_run_id, ref.experiment_name) == ("1", racer_run, "other-root")
    assert _versions(ctx) == [1] and _runs(ctx) == []
    ours = client.get_experiment_by_name(ctx.settings.mlflow_experiment_prefix).experiment_id
    deleted = client.search_runs([ours], run_view_type=ViewType.DELETED_ONLY)
    assert len(deleted) == 1 and deleted[0].info.lifecycle_stage == "deleted"
    assert client.search_logged_models([ours]) == []  # our run's logged model went with it


@pytest.mark.parametrize(
    ("root", "tracking", "expected"),
    [
        ("/data/root", "", "file:///data/root/mlruns"),  # the local default: sqlite under the root
        ("/data/root", "sqlite:////elsewhere/m.db", "file:///data/root/mlruns"),
        ("s3://bucket/runs", "sqlite:////var/mlflow/m.db", "s3://bucket/runs/mlruns"),  # with the runs
        ("s3://bucket/runs", "sqlite:///m.db", "s3://bucket/runs/mlruns"),  # never ./mlruns of a pod
        ("s3://bucket/runs", "http://127.0.0.1:5000", None),  # a server keeps its own artifact store
        ("/data/root", "http://127.0.0.1:5000", None),
    ],
)
def test_experiment_artifacts_never_land_in_the_working_directory(
    root: str, tracking: str, expected: str | None
) -> None:
    settings = PlatformSettings.load({}, {"pipeline_root_uri": root, "mlflow_tracking_uri": tracking})
    assert experiment_location(settings) == expected


def test_the_registration_lock_held_elsewhere_times_out_by_name(tmp_path: Path) -> None:
    held = tmp_path / "mlflow.db.lock"
    holder = subprocess.Popen(
        [sys.executable, "-c", "import fcntl,sys\nf=open(sys.argv[1],'w')\nfcntl.flock(f,fcntl.LOCK_EX)\n"
         "print('held',flush=True)\nsys.stdin.read()", str(held)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        with (
            pytest.raises(RegistryError, match=f"timed out waiting for the registration lock {held} of sqlite:"),
            registry._sqlite_lock(f"sqlite:///{tmp_path}/mlflow.db", time.monotonic() + 0.3),
        ):
            pass
    finally:
        holder.communicate(timeout=30)
    with registry._sqlite_lock(f"sqlite:///{tmp_path}/mlflow.db", time.monotonic()):  # free: taken at once
        pass


@pytest.mark.parametrize("target", ["dangling", "a-file"])
def test_a_link_planted_as_the_registration_lock_is_refused_not_followed(tmp_path: Path, target: str) -> None:
    """``mlflow.db.lock`` linked elsewhere was opened through the link: a dangling one created the file it named,
    a file's was opened for writing. Now REGISTRY_ERROR, nothing made or written."""
    elsewhere = tmp_path / "elsewhere"
    if target == "a-file":
        elsewhere.write_bytes(b"precious")
    (tmp_path / "mlflow.db.lock").symlink_to(elsewhere)
    with (
        pytest.raises(RegistryError, match=r"cannot take the registration lock .*: Too many levels of symbolic links"),
        registry._sqlite_lock(f"sqlite:///{tmp_path}/mlflow.db", time.monotonic() + 5),
    ):
        pass
    assert (elsewhere.read_bytes() == b"precious") if target == "a-file" else not elsewhere.exists()


def test_an_alias_never_moves_to_a_head_a_follower_refuses(small_ctx: RunContext, tmp_path: Path) -> None:
    """A store writer (no key) puts an unsigned head on a signed chain, naming the FULL_CONFIG_HASH of another
    registered version: a run's alias convergence pointed ``@head`` (a pyfunc MLflow serves) at that version.
    It reads the chain as a follower does, so the refused head moves no alias."""
    from test_chain_signing import KEY_A, intruder
    from test_chain_support import meta, payload, run_hash

    from ml8s.chain import ChainStore, adopt_policy
    from ml8s.registry.alias import converge_aliases
    from ml8s.registry.schema import TEMPLATE_ENV

    settings, store = small_ctx.settings, small_ctx.open_store()
    uri, name = settings.mlflow_tracking_uri, settings.mlflow_model_name
    assert uri.startswith("sqlite:///")
    database = Path(uri.removeprefix("sqlite:///"))
    database.parent.mkdir(parents=True, exist_ok=True)
    database.write_bytes(Path(os.environ[TEMPLATE_ENV]).read_bytes())
    chain = ChainStore(store, settings.chain_name, signer=KEY_A)
    chain.init()
    adopt_policy(chain, KEY_A, [KEY_A.public_key])
    ours = chain.commit(payload("ours"), meta("ours"))
    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    client.create_registered_model(name)
    good = client.create_model_version(
        name, str(tmp_path / "a"), tags={"full_config_hash": ours.header.full_config_hash}
    )
    chosen = client.create_model_version(name, str(tmp_path / "b"), tags={"full_config_hash": run_hash("chosen")})
    client.set_registered_model_alias(name, "head", good.version)
    intruder(chain, "chosen", signer=None, policy=1)
    assert converge_aliases(small_ctx, store) == []
    assert client.get_registered_model(name).aliases == {"head": good.version} != {"head": chosen.version}


def test_aliases_converge_when_a_version_is_committed_and_promoted_while_the_chain_is_read(
    small_ctx: RunContext, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two runs on one chain: this run's alias step read the head (v1), then the other committed v2 and promoted
    it before the promotion log was read. The promoted version lay above the head checked: 'chain has no
    version 2 (head v1)', a warning, and neither alias moved. The head is read again, so both reach v2."""
    from test_chain_support import meta, payload

    from ml8s.chain import ChainStore, PromotionLog, PromotionReader
    from ml8s.registry.alias import converge_aliases
    from ml8s.registry.schema import TEMPLATE_ENV

    settings, store = small_ctx.settings, small_ctx.open_store()
    uri, name = settings.mlflow_tracking_uri, settings.mlflow_model_name
    database = Path(uri.removeprefix("sqlite:///"))
    database.parent.mkdir(parents=True, exist_ok=True)
    database.write_bytes(Path(os.environ[TEMPLATE_ENV]).read_bytes())
    chain = ChainStore(store, settings.chain_name)
    chain.init()
    ours = chain.commit(payload("ours"), meta("ours"))
    PromotionLog(chain).decide("promote", ours, "first", None)
    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    client.create_registered_model(name)
    mine = client.create_model_version(
        name, str(tmp_path / "a"), tags={"full_config_hash": ours.header.full_config_hash}
    )
    theirs_hash = meta("theirs").full_config_hash
    theirs = client.create_model_version(name, str(tmp_path / "b"), tags={"full_config_hash": theirs_hash})
    gated = PromotionReader.gated

    def decided_meanwhile(reader: PromotionReader, *args: object, **kwargs: object) -> bool:
        if chain.head().counter == 1:  # the other run, between this one's head read and its log read
            PromotionLog(chain).decide("promote", chain.commit(payload("theirs"), meta("theirs")), "better", None)
        return gated(reader)

    monkeypatch.setattr(PromotionReader, "gated", decided_meanwhile)
    moved = converge_aliases(small_ctx, store)
    assert {(m.alias, m.version) for m in moved} == {("head", str(theirs.version)), ("promoted", str(theirs.version))}
    assert client.get_registered_model(name).aliases == {"head": theirs.version, "promoted": theirs.version}
    assert mine.version != theirs.version
