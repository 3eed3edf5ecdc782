"""``ml8s verify RUN_ID``: every check of a run in its store, and MLflow's agreement with it (SPEC §6).

The checks are a tuple of named :class:`~ml8s.audit.report.Check` entries, the model chain's last.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ml8s.audit import mlflow_refs
from ml8s.audit.chain_check import check_chain
from ml8s.audit.offline import is_run_id
from ml8s.audit.report import Check, CheckResult, Report, make_report, run_checks, verdict
from ml8s.audit.run_checks import (
    check_artifacts,
    check_config_snapshot,
    check_data_fingerprint,
    check_data_recheck,
    check_manifest,
    check_marker,
    check_training_metadata,
    check_unexpected_files,
    use,
)
from ml8s.audit.shard_check import check_shards
from ml8s.audit.state import RunState
from ml8s.chain import Anchor, ChainStore, ReadTrust
from ml8s.contract import layout
from ml8s.errors import ConfigError, Ml8sError, RegistryError
from ml8s.identity.settings import PlatformSettings
from ml8s.identity.uri import public_tracking_uri
from ml8s.text import quoted


def check_mlflow(state: RunState) -> CheckResult:
    """The registered version named by manifest.json exists and carries this run's contract tags."""
    snapshot = use(state.snapshot, "config_snapshot")
    manifest = use(state.manifest, "manifest")
    ref = mlflow_refs.manifest_ref(manifest)
    here = state.as_recorded(manifest.artifact_root)
    choice = mlflow_refs.choose_tracking_uri(ref, state.env, state.root_uri, state.tracking_uri)
    shown = public_tracking_uri(choice.uri)
    try:
        view = mlflow_refs.read_view(choice.uri, ref, snapshot.full_config_hash)
    except RegistryError as exc:
        recorded = f"; manifest.json records {ref.tracking_uri}" if choice.uri != ref.tracking_uri else ""
        message = str(exc).removeprefix(f"{exc.code}: ")
        if other := layout.other_root(manifest.artifact_root, here, state.run_id):
            # a root moved with its local registry: the manifest still names the registry where it was recorded
            recorded += (
                f"; recorded at another root: manifest.json was written at {other}, and "
                "--mlflow-tracking-uri names the registry where it is now"
            )
        raise type(exc)(f"{message} (tracking URI from {choice.source}{recorded})") from exc
    ok = (
        f"model {view.model_name!r} version {view.model_version} and MLflow run {view.run_id} carry run_id, "
        f"full_config_hash, data_fingerprint and artifact_uri of this run ({shown}, from {choice.source})"
    )
    notes = [f"tracking URI {shown} from {choice.source}"]
    if choice.ignored:
        notes.append(f"MLFLOW_TRACKING_URI={choice.ignored} ignored: manifest.json records the registry")
    if choice.uri != ref.tracking_uri and ref.tracking_uri:
        notes.append(f"manifest.json records tracking_uri {ref.tracking_uri}")
    if other := mlflow_refs.registered_from_other_root(view, snapshot, here):
        notes.append(
            f"registered from this RUN_ID's folder under another pipeline root sharing this MLflow: {other} "
            "(one version per full_config_hash)"
        )
    notes.extend(_stale_aliases(state, choice.uri, view.model_name))
    return verdict("mlflow", mlflow_refs.view_problems(view, ref, snapshot, here), ok, notes)


def _stale_aliases(state: RunState, uri: str, model_name: str) -> list[str]:
    """Notes, never problems: the aliases follow the chain, not this run, and lag it after any failed alias step."""
    from ml8s.registry.alias import stale_aliases

    try:
        settings = PlatformSettings.load(state.env)
        chain = ChainStore(state.store, settings.chain_name)
        stale = stale_aliases(uri, model_name, chain, ReadTrust.from_settings(settings))
    except Ml8sError as exc:  # the chain check reports a chain that does not check; the registry was just read
        return [f"aliases not compared with the chain: {exc}"]
    return [
        f"stale MLflow {move} (a late alias write, or a failed alias step; the next run moves it)" for move in stale
    ]


# The store checks (also recorded in an audit bundle's verification.json), then the registry.
STORE_CHECKS: tuple[Check[RunState], ...] = (
    Check("marker", check_marker),
    Check("config_snapshot", check_config_snapshot),
    Check("data_fingerprint", check_data_fingerprint),
    Check("training_metadata", check_training_metadata),
    Check("manifest", check_manifest),
    Check("artifacts", check_artifacts),
    Check("unexpected_files", check_unexpected_files),
    Check("shards", check_shards),
)
RUN_CHECKS: tuple[Check[RunState], ...] = (*STORE_CHECKS, Check("mlflow", check_mlflow), Check("chain", check_chain))
DATA_RECHECK = Check("data_recheck", check_data_recheck)


def verify_state(
    state: RunState, *, recheck_data: bool = False, checks: Sequence[Check[RunState]] = RUN_CHECKS
) -> Report:
    """Run the checks (the chain's against ``state.anchor`` when set). A store that cannot be listed raises
    its error: no verdict can be given."""
    state.listing()
    chosen = (*checks, DATA_RECHECK) if recheck_data else tuple(checks)
    return make_report("verify", state.run_id, state.artifact_root, run_checks(chosen, state))


def verify_run(
    root_uri: str,
    run_id: str,
    env: Mapping[str, str],
    *,
    recheck_data: bool = False,
    checks: Sequence[Check[RunState]] = RUN_CHECKS,
    tracking_uri: str = "",
    anchor: Anchor | None = None,
) -> Report:
    """Verify run ``run_id`` under the pipeline root ``root_uri`` (local path, ``file://`` or ``s3://``).

    Args:
        env: where CHAIN_NAME, CHAIN_REQUIRE_SIGNED, and MLFLOW_TRACKING_URI for a manifest that records no
            tracking URI, are read (the store takes its S3 settings from ``os.environ``).
        recheck_data: also fingerprint DATA_ROOT again and report drift.
        checks: the checks to run, in order (default: every check of the run contract).
        tracking_uri: the MLflow to ask instead of the one manifest.json records (a registry that moved).
        anchor: a signed head checkpoint the chain check verifies the chain against (docs/chain.md).

    Example:
        >>> report = verify_run("./pipeline_root", "9c377961bf1a", os.environ)  # doctest: +SKIP
        >>> report.status, report.failed()  # doctest: +SKIP
        (<Status.PASS: 'PASS'>, ())

    Raises:
        StoreError: the store cannot be listed (unreachable, no permission): nothing could be checked.
        ConfigError: ``run_id`` is no RUN_ID (12 lowercase hex digits).
    """
    if not is_run_id(run_id):  # the Flyte workflow's run_id is any text: "" checked every run as this one's files
        raise ConfigError(f"run_id={quoted(run_id)} is not a RUN_ID; expected 12 lowercase hex digits")
    state = RunState(root_uri, run_id, env, tracking_uri=tracking_uri)
    state.anchor = anchor
    return verify_state(state, recheck_data=recheck_data, checks=checks)
