"""A ``WARM_START=head`` run on data the head already trained on: the head's own run again, never a duplicate.

After a run committed its version (and maybe was killed before it could report success), the same command
finds its own version at the head, and no new generation in DATA_ROOT. Training from the head would add
a version on "0 new" generations. Instead the run resolves the parent the head trained from (its training
state names it), which gives the head's own identity when the config is unchanged: the gate then returns
the head's manifest. A config that differs from the head's (another EPOCHS, say) with nothing new to train
on is refused with LINEAGE_NOTHING_NEW before anything is written, except for a run that lost its parent
to that head in a race (STALE_PARENT_POLICY=retrain): it trains from the winner, as docs/continuous.md says.

RANDOM_SEED and TEST_SIZE choose which rows of each generation are held out: a warm start keeps its parent's
(:func:`check_same_split`), since another split would hold out rows the parent trained on. Each split has its
own record history; the record sha256s a parent recorded belong to the parent's split (:func:`parent_split`),
and a run on another split (a version committed before that rule, re-run or reproduced) re-encodes every
generation and records its own.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from ml8s.chain import ChainStore, ChainVersion, committed
from ml8s.contract import ConfigSnapshot, layout, parse
from ml8s.contract._parse import Invalid
from ml8s.contract.training_state import TrainingState
from ml8s.data.fingerprint import Fingerprint
from ml8s.errors import LineageError, NothingNewError
from ml8s.identity.hashing import compute_identity
from ml8s.identity.settings import PlatformSettings
from ml8s.identity.variables import CanonicalConfig, without_unused_keys
from ml8s.lineage.parent import ParentRef
from ml8s.lineage.state import read_training_state
from ml8s.store import open_store

P = TypeVar("P")


def rerun_of_head(
    config: CanonicalConfig,
    settings: PlatformSettings,
    fingerprint: Fingerprint,
    chain: ChainStore,
    head: ChainVersion,
    state: TrainingState,
    resolve: Callable[[CanonicalConfig, PlatformSettings, Fingerprint], tuple[CanonicalConfig, P | None]],
    retrain: bool,
) -> tuple[CanonicalConfig, P | None] | None:
    """The config and plan of this configuration's run among the versions that trained on every generation
    (module docstring), resolved by ``resolve``; None when there is none and ``retrain`` (it lost its parent
    to ``head``: it trains from it). ``state`` is the head's training state.

    Raises:
        NothingNewError: no such run, no generation is new, and not ``retrain``.
    """
    generations = len(state.generations)
    versions = [v for v in chain.walk() if v.counter > 0]
    by_content = {v.content_hash: v for v in versions}
    # the head, and the versions below it that trained on the same generations (racers that retrained from
    # a winner): one of them may be this configuration's run, from the parent it trained from
    for version in sorted(versions, key=lambda v: -v.counter):
        if version.counter != head.counter:
            if layout.PAYLOAD_TRAINING_STATE not in {f.name for f in version.header.files}:
                break
            where = f"chain {chain.name!r} v{version.counter} training state"
            state = read_training_state(chain.fetch_payload(version, layout.PAYLOAD_TRAINING_STATE), where)
        if len(state.generations) != generations:
            break
        if state.parent_content_hash is None:  # a cold start: its run had no parent, nor SAMPLER_ALPHA (2.2.0)
            resolved, plan = without_unused_keys({**config, "warm_start": None}), None
        elif (parent := by_content.get(state.parent_content_hash)) is not None:
            resolved, plan = resolve({**config, "warm_start": parent.counter}, settings, fingerprint)
        else:
            continue
        identity = compute_identity(resolved, fingerprint.fingerprint, strict=settings.strict_data_identity)
        if committed(chain, identity.full_config_hash) is not None:
            return resolved, plan
    if retrain:
        return None
    raise NothingNewError(
        f"WARM_START=head: chain {chain.name!r} v{head.counter} (run {head.header.run_id}) already trained on "
        f"every generation in DATA_ROOT, and this configuration is not that run's; expected a new generation "
        "(a new top-level file or folder) to train on, or the head's configuration to get its manifest back"
    )


def parent_split(chain: ChainStore, parent: ChainVersion) -> tuple[object, object]:
    """The parent's RANDOM_SEED and TEST_SIZE, from its config snapshot."""
    try:
        snapshot = parse(
            layout.CONFIG_SNAPSHOT, chain.fetch_payload(parent, layout.PAYLOAD_CONFIG_SNAPSHOT), ConfigSnapshot
        )
    except Invalid as exc:
        raise LineageError(f"chain {chain.name!r} v{parent.counter}: its config snapshot is unreadable: {exc}") from exc
    return snapshot.canonical_config.get("random_seed"), snapshot.canonical_config.get("test_size")


def check_same_split(parent_ref: ParentRef | None, random_seed: int, test_size: float, full_config_hash: str) -> None:
    """A warm start keeps its parent's RANDOM_SEED and TEST_SIZE, unless the chain already holds this run (a
    re-run, or ``chain reproduce`` of a version committed before this rule). They choose each generation's
    held-out rows: another split holds out rows the parent trained on, and the weights continued from it, so
    the run's held-out metrics and the promotion rule (which compares it with the served version on them) would
    measure both models on rows they learned.

    Raises:
        LineageError: naming both splits and the way out (a cold start: a new lineage with the new split).
    """
    if parent_ref is None:
        return
    chain = ChainStore(open_store(parent_ref.root_uri), parent_ref.chain_name)
    parent = chain.get(parent_ref.counter)  # the block bootstrap resolved and checked a moment ago
    theirs = parent_split(chain, parent)
    if theirs == (random_seed, test_size) or committed(chain, full_config_hash) is not None:
        return
    seed, size = theirs
    raise LineageError(
        f"a warm start keeps its parent's split; RANDOM_SEED={random_seed} and TEST_SIZE={test_size:g} differ from "
        f"chain {chain.name!r} v{parent.counter}'s RANDOM_SEED={seed} and TEST_SIZE={size}: they choose each "
        "generation's held-out rows, and another split holds out rows the parent trained on (its held-out metrics "
        "and the promotion rule would measure on rows both models learned); expected the parent's values, or a "
        "cold start (WARM_START='') to start a new lineage with the new split"
    )
