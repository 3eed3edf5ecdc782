"""Resolving WARM_START at bootstrap into a parent and the lineage's data generations (docs/continuous.md).

Everything here runs before the first write: a parent that is not on the chain, a version without training
state, a config that does not continue the lineage's model, or a DATA_ROOT that lost or changed a file the
parent trained on is a one-line named error, and nothing is written.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Mapping

from pydantic import BaseModel, ConfigDict

from ml8s.chain import ChainStore, ChainVersion, ReadTrust, committed
from ml8s.contract import ConfigSnapshot, FingerprintRecord, layout, parse
from ml8s.contract._parse import Invalid
from ml8s.contract.drift import DriftReport
from ml8s.contract.training_state import Generation, TrainingState
from ml8s.data.fingerprint import FileEntry, Fingerprint
from ml8s.data.settled import leave_out, partition, still_written
from ml8s.data.sources import restrict
from ml8s.errors import (
    GenerationMissingError,
    LineageDataError,
    LineageError,
    NothingNewError,
    RecordsExtraBytesError,
    RecordsTruncatedError,
    StaleParentError,
)
from ml8s.identity.hashing import canonical_bytes
from ml8s.identity.settings import PlatformSettings
from ml8s.identity.variables import CanonicalConfig
from ml8s.lineage.parent import ParentRef, find_parent, text_of
from ml8s.lineage.rerun import rerun_of_head
from ml8s.lineage.state import read_training_state
from ml8s.store import open_store

# What a warm start must share with its parent: the model (architecture, code) and what its features mean.
CONTINUED = (
    "exclude_columns",
    "hidden_layers",
    "hidden_units",
    "max_features",
    "model_code",
    "model_type",
    "standardize",
    "target_column",
    "train_device",
)
_NEEDED = (layout.PAYLOAD_TRAINING_STATE, layout.PAYLOAD_FEATURE_SCHEMA, layout.PAYLOAD_CONFIG_SNAPSHOT)


class LineagePlan(BaseModel):
    """A warm start: its parent, what WARM_START said, and the generations this run trains on (oldest first;
    ``new`` of them arrived since the parent)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    parent: ParentRef
    request: str
    lineage_id: str
    generations: tuple[Generation, ...]
    new: int
    stale_head: int | None = None  # the head's counter when the parent is not the head (checked by bootstrap)
    drift: DriftReport | None = None  # the new generations against the lineage's features (ml8s.lineage.drift)

    @property
    def new_generations(self) -> tuple[Generation, ...]:
        return self.generations[len(self.generations) - self.new :]


def resolve_warm_start(
    config: CanonicalConfig,
    settings: PlatformSettings,
    fingerprint: Fingerprint,
    *,
    retrain: bool = False,
    young: Mapping[str, float] | None = None,
) -> tuple[CanonicalConfig, LineagePlan | None, Fingerprint]:
    """The canonical config with ``warm_start`` resolved to the parent's content hash, the plan, and the
    fingerprint of the data the run takes: without the ``young`` partitions (still being written,
    :mod:`ml8s.data.settled`) but those an earlier generation holds, which are no new data.

    ``head`` on a chain with no model yet is a cold start (the first run of a continuous launch plan); on a
    head that trained on all of DATA_ROOT it is the head's own run, else LINEAGE_NOTHING_NEW unless
    ``retrain`` (a run that lost its parent to that head trains from it: :mod:`ml8s.lineage.rerun`).

    Raises:
        ConfigError: WARM_START is malformed. WarmStartNotFoundError: it names nothing on the chain.
        LineageError: the parent has no training state, or the config does not continue its model.
        LineageDataError: DATA_ROOT lost or changed a file the parent trained on.
    """
    young = young or {}
    request = config.get("warm_start")
    if request is None:
        return config, None, leave_out(fingerprint, young, settings.data_quiet_seconds)
    chain = ChainStore(open_store(settings.parent_root_uri), settings.chain_name)
    parent, checked_head = find_parent(chain, request, ReadTrust.from_settings(settings))
    if parent is None:
        return {**config, "warm_start": None}, None, leave_out(fingerprint, young, settings.data_quiet_seconds)
    listed = {f.name for f in parent.header.files}
    missing = [name for name in _NEEDED if name not in listed]
    where = f"chain {chain.name!r} v{parent.counter}"
    if missing:
        raise LineageError(
            f"WARM_START={text_of(request)!r} names {where}, whose payload has no {', '.join(missing)}: it was "
            "committed before versions carried their training state; expected a version to continue from "
            "(or WARM_START='')"
        )
    state = read_training_state(chain.fetch_payload(parent, layout.PAYLOAD_TRAINING_STATE), f"{where} training state")
    stale = None
    if settings.parent_root_uri == settings.pipeline_root_uri and checked_head is not None:
        stale = checked_head.counter if checked_head.block_hash != parent.block_hash else None
    _check_continues(config, chain, parent, where)
    if any(not g.files for g in state.generations):
        state = _with_cold_files(state, chain, parent, where)
    generations, new = _generations(state, list(fingerprint.entries), where, young)
    fingerprint = restrict(fingerprint, [token.rsplit(":", 2)[0] for g in generations for token in g.files])
    if new == 0 and text_of(request) == "head":  # the head trained on all of it: its run again, or nothing
        try:
            rerun = rerun_of_head(config, settings, fingerprint, chain, parent, state, _resolved, retrain)
        except NothingNewError as exc:  # a partition that arrived, left out, is why nothing is new: say so
            raise still_written(exc, young, fingerprint, settings.data_quiet_seconds) from exc
        if rerun is not None:
            return (*rerun, fingerprint)
    # Here, not at the top: a run's context (RunSpec.lineage) imports this module, and a cold start or a gate
    # hit needs none of the data, inference and record readers (pyarrow among them).
    from ml8s.inference import RawTransform
    from ml8s.lineage.drift import drift_report
    from ml8s.lineage.history import check_new_columns, with_rebuild_hint
    from ml8s.records import RecordStore

    schema_bytes = chain.fetch_payload(parent, layout.PAYLOAD_FEATURE_SCHEMA)
    transform = RawTransform.from_schema(schema_bytes, f"{where} feature schema")
    check_new_columns(generations[len(generations) - new :], fingerprint, transform)
    drift = drift_report(generations[len(generations) - new :], fingerprint, transform) if new else None
    plan = LineagePlan(
        parent=ParentRef(
            root_uri=settings.parent_root_uri,
            chain_name=chain.name,
            counter=parent.counter,
            block_hash=parent.block_hash,
            content_hash=parent.content_hash,
        ),
        request=text_of(request),
        lineage_id=state.lineage_id or parent.header.full_config_hash,  # a cold parent's lineage is its own
        generations=tuple(generations),
        new=new,
        stale_head=stale,
        drift=drift,
    )
    seed, test_size = config.get("random_seed"), config.get("test_size")
    if isinstance(seed, int) and isinstance(test_size, int | float):
        history = RecordStore(open_store(plan.parent.root_uri), history_prefix(plan, schema_bytes, seed, test_size))
        if history.index() is not None:
            try:  # sizes and manifests: a truncated or deleted record file fails before any write
                history.open(verify_hash=False)
            except (RecordsTruncatedError, RecordsExtraBytesError, GenerationMissingError) as exc:
                raise with_rebuild_hint(history, exc) from exc
    return {**config, "warm_start": parent.content_hash}, plan, fingerprint


def _resolved(
    config: CanonicalConfig, settings: PlatformSettings, fingerprint: Fingerprint
) -> tuple[CanonicalConfig, LineagePlan | None]:
    config, plan, _ = resolve_warm_start(config, settings, fingerprint)
    return config, plan


def check_not_stale(plan: LineagePlan | None, full_config_hash: str) -> None:
    """A warm start from a parent that is not the head may only be a run the chain already holds (a re-run).

    Raises:
        StaleParentError: the run would append a model trained from a version below the head.
    """
    if plan is None or plan.stale_head is None:
        return
    chain = ChainStore(open_store(plan.parent.root_uri), plan.parent.chain_name)
    if committed(chain, full_config_hash) is None:
        raise StaleParentError(
            f"WARM_START={plan.request!r} names chain {plan.parent.chain_name!r} v{plan.parent.counter}, but the head "
            f"is v{plan.stale_head}: a version's parent is always the version it trained from, and the chain grows "
            "only at its head; expected WARM_START=head or the head's number"
        )


def check_drift_policy(plan: LineagePlan | None, policy: str, full_config_hash: str) -> None:
    """DRIFT_POLICY=fail refuses a warm start whose new generations drifted, unless the chain already holds this
    run: DRIFT_POLICY is a platform setting, so a run committed under ``warn`` is the same run, and its re-run
    returns its manifest as any completed run's does.

    Raises:
        LineageDriftError: naming every finding and how to adopt a changed schema.
    """
    if plan is None or plan.drift is None or not plan.drift.drifted or policy != "fail":
        return
    from ml8s.lineage.drift import check_drift  # numpy: only for a drifted warm start

    chain = ChainStore(open_store(plan.parent.root_uri), plan.parent.chain_name)
    if committed(chain, full_config_hash) is None:
        check_drift(plan.drift, policy, f"chain {plan.parent.chain_name!r} v{plan.parent.counter}")


def check_commit_root(plan: LineagePlan | None, pipeline_root_uri: str, full_config_hash: str) -> None:
    """A parent read from another root (WARM_START_ROOT_URI) must head the chain at PIPELINE_ROOT_URI, which the
    run commits to: that chain takes a version only on top of the block it trained from. Checked before anything
    is written; else the run trained and registered its model, then the commit was refused as a stale parent.

    Raises:
        StaleParentError: that chain has no version, or another head, and does not hold this run already.
    """
    if plan is None or plan.parent.root_uri == pipeline_root_uri:
        return
    chain = ChainStore(open_store(pipeline_root_uri), plan.parent.chain_name)
    pointer = chain.read_head()
    if pointer is not None and pointer[0].block_hash == plan.parent.block_hash:
        return
    if pointer is not None and committed(chain, full_config_hash) is not None:
        return
    there = (
        "has no version" if pointer is None else f"is headed by v{pointer[0].counter} ({pointer[0].block_hash[:12]})"
    )
    raise StaleParentError(
        f"WARM_START={plan.request!r} names chain {plan.parent.chain_name!r} v{plan.parent.counter} "
        f"({plan.parent.block_hash[:12]}) at WARM_START_ROOT_URI {plan.parent.root_uri}, but the chain this run "
        f"commits to, at PIPELINE_ROOT_URI {pipeline_root_uri}, {there}: a version's parent is the head of the "
        "chain it is appended to; expected WARM_START_ROOT_URI unset (the parent read from the chain the run "
        "commits to) or naming a root whose chain has the same head"
    )


def history_prefix(plan: LineagePlan, schema_bytes: bytes, random_seed: int, test_size: float) -> str:
    """Where the lineage's record history lives under the pipeline root: one history per lineage and per
    split (RANDOM_SEED and TEST_SIZE choose each generation's held-out rows, which are not recorded)."""
    split = {"feature_schema": hashlib.sha256(schema_bytes).hexdigest(), "random_seed": random_seed}
    key = hashlib.sha256(canonical_bytes({**split, "test_size": test_size})).hexdigest()[:16]
    return f"ml8s_lineages/{plan.lineage_id}/history-{key}"


def _check_continues(config: CanonicalConfig, chain: ChainStore, parent: ChainVersion, where: str) -> None:
    try:
        snapshot = parse(
            layout.CONFIG_SNAPSHOT, chain.fetch_payload(parent, layout.PAYLOAD_CONFIG_SNAPSHOT), ConfigSnapshot
        )
    except Invalid as exc:
        raise LineageError(f"{where}: its config snapshot is unreadable: {exc}") from exc
    theirs = snapshot.canonical_config
    differ = [key for key in CONTINUED if config.get(key) != theirs.get(key)]
    if differ:
        shown = ", ".join(
            f"{k.upper()}={text_of(config.get(k))!r} (parent: {text_of(theirs.get(k))!r})" for k in differ
        )
        raise LineageError(
            f"a warm start continues its parent's model and features; {shown} differ from {where}: expected the "
            "parent's values, or a cold start (WARM_START='')"
        )


def _with_cold_files(state: TrainingState, chain: ChainStore, parent: ChainVersion, where: str) -> TrainingState:
    """A cold start's generation 0 lists no files: they are its data fingerprint's (beside it in the payload)."""
    if layout.PAYLOAD_DATA_FINGERPRINT not in {f.name for f in parent.header.files}:
        raise LineageError(f"{where} holds no {layout.PAYLOAD_DATA_FINGERPRINT}: its generation 0 is unknown")
    try:
        record = parse(
            layout.DATA_FINGERPRINT, chain.fetch_payload(parent, layout.PAYLOAD_DATA_FINGERPRINT), FingerprintRecord
        )
    except Invalid as exc:
        raise LineageError(f"{where}: its data fingerprint is unreadable: {exc}") from exc
    tokens = sorted(entry.token for entry in record.files)
    filled = [g if g.files else g.model_copy(update={"files": tokens}) for g in state.generations]
    return state.model_copy(update={"generations": filled})


def _generations(
    state: TrainingState, entries: list[FileEntry], where: str, young: Collection[str]
) -> tuple[list[Generation], int]:
    """The parent's generations (their files still here, unchanged) plus one per new partition of DATA_ROOT that
    is not ``young`` (still being written: a later run takes it)."""
    now = {e.relative_path: e.token for e in entries}
    seen: set[str] = set()
    for generation in state.generations:
        for token in generation.files:
            path = token.rsplit(":", 2)[0]
            if now.get(path) != token:
                change = "is gone" if path not in now else "changed"
                raise LineageDataError(
                    f"DATA_ROOT: {path} {change}, but {where} trained on it (generation {generation.index}); "
                    "expected every file of earlier generations unchanged: new data goes into new files (one still "
                    "being written when that version took it needs its old bytes back, or a cold start; "
                    "DATA_QUIET_SECONDS keeps runs off a partition until it settles)"
                )
            seen.add(path)
    old_partitions = {partition(p) for p in seen} - {""}
    fresh: dict[str, list[str]] = {}
    for path in sorted(set(now) - seen):
        top = partition(path)
        if top in old_partitions:
            raise LineageDataError(
                f"DATA_ROOT: {path} is new inside {top!r}, a partition an earlier generation holds; "
                "expected each new generation in a new top-level file or folder"
            )
        if top not in young:
            fresh.setdefault(top, []).append(now[path])
    generations = list(state.generations)
    for top in sorted(fresh):
        generations.append(Generation(index=len(generations), partition=top, files=sorted(fresh[top])))
    return generations, len(fresh)


def plan_summary(plan: LineagePlan | None) -> Mapping[str, str]:
    """Log-friendly facts of a plan (empty for a cold start)."""
    if plan is None:
        return {}
    return {
        "parent": f"{plan.parent.chain_name} v{plan.parent.counter} ({plan.parent.block_hash[:12]})",
        "generations": f"{len(plan.generations)} ({plan.new} new)",
        "drift": "; ".join(plan.drift.lines()) if plan.drift is not None and plan.drift.drifted else "none found",
    }
