"""``chain_proof.json`` of an audit bundle: every block header from genesis through the run's block on
to the head at bundle time, and its offline check (hashes recomputed, links followed, the run's
block naming exactly the bundled weights and manifest).

The proof runs to the head, so two bundles of a run are byte-identical as long as the chain has not
moved; a bundle made later proves more, never less.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict, ValidationError

from ml8s.audit.chain_check import chain_name
from ml8s.audit.state import RunState
from ml8s.chain import (
    Anchor,
    Block,
    ChainStore,
    Follower,
    ReadTrust,
    block_hash_of,
    committed,
    content_hash,
    proof_anchor_problems,
    read_anchor,
    sha256_hex,
)
from ml8s.contract import Invalid, Manifest, layout, parse
from ml8s.contract.layout import PAYLOAD_MANIFEST, PAYLOAD_WEIGHTS
from ml8s.errors import ChainError, ConfigError
from ml8s.identity.settings import PlatformSettings

CHAIN_PROOF = "chain_proof.json"
ANCHOR = "anchor.json"  # the chain anchor a bundle was checked against, when there was one


class ChainProof(BaseModel):
    """The headers, genesis first, and where the run's block is among them."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    chain_name: str
    run_counter: int
    head_counter: int
    blocks: tuple[Block, ...]


def build_proof(state: RunState, full_config_hash: str) -> ChainProof:
    """The proof for a run, read from its chain through the one checked path (a Follower: signatures, the
    pinned root, CHAIN_REQUIRE_SIGNED, the run index and trail), so that what is bundled is what was
    checked; ChainError when the run is not in the chain."""
    chain = ChainStore(state.store, chain_name(state.env))
    # Not against the anchor: the chain check compared the chain with it already, and the anchor is bundled
    # beside the proof so that an offline check names a rollback from the proof itself.
    follower = Follower(chain, trust=ReadTrust.from_settings(PlatformSettings.load(state.env)))
    follower.poll()
    version = committed(chain, full_config_hash)
    if version is None or follower.current is None:
        raise ChainError(f"run {state.run_id} is not in chain {chain.name!r}: no chain proof can be bundled")
    blocks = tuple(reversed([v.block for v in chain.walk(follower.current)]))
    if version.counter >= len(blocks) or blocks[version.counter].block_hash != version.block_hash:
        raise ChainError(f"run {state.run_id}'s v{version.counter} is not on the chain the checked head heads")
    return ChainProof(
        chain_name=chain.name, run_counter=version.counter, head_counter=blocks[-1].header.counter, blocks=blocks
    )


def proof_bytes(proof: ChainProof) -> bytes:
    return (json.dumps(proof.model_dump(mode="json"), indent=2, sort_keys=True) + "\n").encode("utf-8")


def _as_chained(manifest: bytes) -> bytes:
    """The bundled manifest as the chain holds it (without a FORCE_RERUN audit); unreadable, as it is."""
    try:
        return parse(layout.MANIFEST, manifest, Manifest).chain_payload()
    except Invalid:
        return manifest  # the manifest check reports why; here it simply matches no block


def proof_problems(
    data: bytes,
    full_config_hash: str,
    manifest: bytes,
    payload_sha256: Mapping[str, str | None],
    *,
    run_id: str,
    artifact_root: str,
    notes: list[str] | None = None,
) -> list[str]:
    """Everything wrong with a proof, offline. ``payload_sha256``: payload name -> the sha256 of the run file the
    bundle offers for it (bundled, else listed in artifacts.sha256; None when neither), for every payload file
    but the manifest, which is compared as the chain holds it. ``run_id`` and ``artifact_root``: what the bundle
    says the run is and where it lives, which the run's block header must record, or (the root copied or moved
    since the commit, the chain with it) this RUN_ID's folder under another root: then a line for ``notes``."""
    try:
        proof = ChainProof.model_validate_json(data)
    except ValidationError as exc:
        return [f"{CHAIN_PROOF} is not a valid chain proof: {exc.errors()[0]['msg']}"]
    problems: list[str] = []
    previous: Block | None = None
    for block in proof.blocks:
        h = block.header
        if block_hash_of(h) != block.block_hash:
            problems.append(f"v{h.counter}: the header does not hash to its block hash {block.block_hash[:12]}")
        if content_hash((f.name, f.sha256, f.size) for f in h.files) != h.content_hash:
            problems.append(f"v{h.counter}: the file list does not hash to its content hash")
        if previous is None:
            if h.counter != 0 or h.parent_block_hash:
                problems.append(f"the proof starts at v{h.counter}, not at genesis (counter 0, no parent)")
        elif h.counter != previous.header.counter + 1 or h.parent_block_hash != previous.block_hash:
            problems.append(f"v{h.counter} does not link to v{previous.header.counter} (counter or parent hash)")
        previous = block
    runs = [b for b in proof.blocks if b.header.full_config_hash == full_config_hash]
    if len(runs) != 1 or runs[0].header.counter != proof.run_counter:
        problems.append(f"the proof holds {len(runs)} block(s) of this run; expected exactly one, v{proof.run_counter}")
        return problems
    header = runs[0].header
    # The chain holds the manifest without its artifact_root (Manifest.chain_payload): only the header records
    # where the run was committed. Where it lives now no bundle can prove offline (a copy of the root, cp -a or a
    # bucket sync, lives elsewhere with every byte intact), so, as `ml8s verify`'s chain check, a block committed
    # from this RUN_ID's folder under another root is named in a note (a relabelled bundle cannot hide where its
    # run was committed), and any other root is a FAIL.
    if header.run_id != run_id:
        problems.append(
            f"the run's block v{header.counter} records run_id {header.run_id!r}; the bundle says {run_id!r}"
        )
    if other := _copied_from(header.artifact_root, artifact_root, run_id):
        if notes is not None:
            notes.append(
                f"recorded at another root: the run's block v{header.counter} was committed from "
                f"{header.artifact_root}; the bundle says the run is at {artifact_root} (the pipeline root was "
                f"copied or moved from {other})"
            )
    elif header.artifact_root != artifact_root:
        problems.append(
            f"the run's block v{header.counter} records artifact_root {header.artifact_root!r}; "
            f"the bundle says {artifact_root!r}"
        )
    files = {f.name: f.sha256 for f in header.files}
    if files.get(PAYLOAD_MANIFEST) != sha256_hex(_as_chained(manifest)):
        problems.append(f"the run's block records another {PAYLOAD_MANIFEST} than the bundled {layout.MANIFEST}")
    if files.get(PAYLOAD_WEIGHTS) != payload_sha256.get(PAYLOAD_WEIGHTS):
        problems.append(f"the run's block records another {PAYLOAD_WEIGHTS} than the bundled weights")
    # Every other file the block holds too: training_metadata.json's sha256 is recorded in no run file, only in
    # the block, so an edit of it (the bundle's own lists recomputed) passed offline though the live check FAILs it.
    for name, sha in sorted(payload_sha256.items()):
        if name not in (PAYLOAD_WEIGHTS, PAYLOAD_MANIFEST) and name in files and files[name] != sha:
            problems.append(f"the run's block records another {name} than the bundle's (sha256 {_shown_sha(sha)})")
    if proof.blocks and proof.blocks[-1].header.counter != proof.head_counter:
        problems.append(f"the proof ends at v{proof.blocks[-1].header.counter}, not at its head v{proof.head_counter}")
    return problems


def _copied_from(recorded: str, artifact_root: str, run_id: str) -> str:
    """The root ``recorded`` (the block's) is RUN_ID's folder under, when ``artifact_root`` (the bundle's) is
    RUN_ID's folder under another one; else ""."""
    here = artifact_root.endswith(f"/{layout.run_prefix(run_id)}")
    return layout.other_root(recorded, artifact_root, run_id) if here else ""


def _shown_sha(sha: str | None) -> str:
    return sha or "unknown: neither bundled nor listed"


def anchor_bytes(anchor: Anchor) -> bytes:
    return (json.dumps(anchor.model_dump(mode="json"), indent=2, sort_keys=True) + "\n").encode("utf-8")


def anchor_problems(anchor: bytes | None, proof: bytes) -> list[str]:
    """The bundled anchor (if any) against the bundled proof, offline, each problem named as verify names
    it: ``anchor_rollback`` (the proof's head is below the anchored counter: the chain was rolled back
    after the anchor was published), ``anchor_fork``, ``anchor_chain``, ``anchor_signature``."""
    if anchor is None:
        return []
    try:
        parsed = read_anchor(anchor, where=ANCHOR)
        chain = ChainProof.model_validate_json(proof)
    except ConfigError as exc:
        return [f"anchor_invalid: {exc.message}"]
    except ValidationError:
        return []  # an unreadable proof is proof_problems' finding
    found = proof_anchor_problems(parsed, chain.chain_name, chain.blocks)
    return [f"{check}: {reason} (anchor key {parsed.public_key})" for check, reason, _ in found]
