"""The ``chain`` check of ``ml8s verify``: the run's block exists, holds this run's model, and the
chain verifies from genesis to the head."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

from ml8s.audit.offline import model_format
from ml8s.audit.report import CheckResult, verdict
from ml8s.audit.run_checks import maybe, use
from ml8s.audit.state import RunState
from ml8s.chain import (
    WEIGHTS_FULL,
    ChainStore,
    ChainVersion,
    ChainVersions,
    PayloadKind,
    ReadTrust,
    committed,
    verify_chain,
)
from ml8s.contract import layout
from ml8s.contract.layout import PAYLOAD_MANIFEST, PAYLOAD_WEIGHTS
from ml8s.identity.settings import PlatformSettings
from ml8s.identity.versions import world_size_of


def chain_name(env: Mapping[str, str]) -> str:
    """The chain the pipeline commits to in this environment (CHAIN_NAME, else MLFLOW_MODEL_NAME, else the default)."""
    return PlatformSettings.load(env).chain_name


def check_chain(state: RunState) -> CheckResult:
    snapshot = use(state.snapshot, "config_snapshot")
    chain = ChainStore(state.store, chain_name(state.env))
    version = committed(chain, snapshot.full_config_hash)
    if version is None:
        return verdict("chain", [f"run {state.run_id} is not in chain {chain.name!r} (no run index entry)"], "")
    problems: list[str] = []
    notes: list[str] = []
    header = version.header
    for field, want in (("run_id", state.run_id), ("full_config_hash", snapshot.full_config_hash)):
        if getattr(header, field) != want:
            problems.append(f"block v{version.counter} records {field} {getattr(header, field)!r}; expected {want!r}")
    # A block is immutable and records where its run was committed: after the root was copied or moved (the chain
    # with it), it names this RUN_ID's folder under the old root. Its payloads, compared below byte for byte with
    # this run's files, say whether it holds this run's model; where it was made is a note.
    here = state.as_recorded(header.artifact_root)
    if other := layout.other_root(header.artifact_root, here, state.run_id):
        notes.append(
            f"recorded at another root: block v{version.counter} was committed from {header.artifact_root} "
            f"(the pipeline root was copied or moved from {other})"
        )
    elif header.artifact_root != here:
        problems.append(f"block v{version.counter} records artifact_root {header.artifact_root!r}; expected {here!r}")
    listed = {f.name for f in header.files}
    for name in sorted({PAYLOAD_WEIGHTS, PAYLOAD_MANIFEST} - listed):
        problems.append(f"block v{version.counter} holds no payload {name}; expected the run's weights and manifest")
    for name, rel in layout.chain_payload_files(
        model_format(snapshot), snapshot.canonicalization_version, world_size_of(snapshot.canonical_config)
    ):
        if name not in listed:
            continue  # a version committed before the export and schema joined the payload
        stored = hashlib.sha256(chain.fetch_payload(version, name)).hexdigest()  # checked against the block
        if rel not in state.listing():
            problems.append(f"the run's {rel} is missing, so block v{version.counter}'s {name} matches nothing")
        elif stored != _as_chained(state, rel):
            problems.append(f"block v{version.counter} payload {name} has sha256 {stored}; the run's {rel} differs")
    trust = ReadTrust.from_settings(PlatformSettings.load(state.env))
    report = verify_chain(
        chain, anchor=state.anchor, require_signed=trust.require_signed, weights=weights_check, root=trust.root
    )
    for finding in report.findings:
        line = f"{finding.check}: v{finding.counter} {finding.reason}"
        if finding.check == "weights_nan" and finding.counter != version.counter:
            # another version's weights, committed past the check (an older ml8s, by hand): the chain's record is
            # intact and followers refuse that version; this run's verdict is about this run's version
            notes.append(f"{line} (not this run's version v{version.counter}; followers refuse it)")
        else:
            problems.append(line)
    # what the weights rebuild could not read (verify_chain's unchecked): said, so no silence passes for a check
    notes += [f"not checked: {line}" for line in report.unchecked if "weights_nan not checked" in line]
    ok = (
        f"block v{version.counter} ({version.semver}, {version.block_hash[:12]}) of chain {chain.name!r} holds this "
        f"run's {', '.join(sorted(listed))}; the chain verifies from genesis to head v{report.head_counter}"
        + (f", against the anchor at v{state.anchor.checkpoint.counter}" if state.anchor else "")
    )
    return verdict("chain", problems, ok, notes)


def _as_chained(state: RunState, rel: str) -> str:
    """sha256 of a run file as its chain block holds it: the manifest without a FORCE_RERUN audit
    (``Manifest.chain_payload``; docs/chain.md, forced re-runs), any other file as it is."""
    manifest = maybe(state.manifest) if rel == layout.MANIFEST else None
    return hashlib.sha256(manifest.chain_payload()).hexdigest() if manifest is not None else state.digest(rel)[0]


def weights_check(chain: ChainVersions, walked: list[ChainVersion]) -> list[tuple[str, str, ChainVersion]]:
    """``verify_chain``'s weights rebuild (``ml8s.weights``, which imports torch), for chains whose versions
    record a weights hash or hold FULL weights (an older ml8s's FULL has no hash, yet a NaN in it is one a
    follower refuses); a chain of genesis and pipeline versions without weights needs no torch to verify."""
    if not any(v.header.weights_hash or _holds_full_weights(v) for v in walked):
        return []
    from ml8s.weights import weights_problems

    return weights_problems(chain, walked)


def _holds_full_weights(version: ChainVersion) -> bool:
    return version.header.payload_kind is PayloadKind.FULL and WEIGHTS_FULL in {f.name for f in version.header.files}
