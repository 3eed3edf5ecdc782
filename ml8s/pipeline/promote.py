"""Step 9, promotion: decide whether the version just committed becomes what followers serve.

The rule (docs/chain.md, "Promotion"): the candidate and the served version predict the same evaluation
rows, each from raw rows with its own feature schema, in two parts: the held-out split of the generations
the candidate trained on for the first time (the new data), and the held-out split of the lineage's
generation 0 (a fixed holdout every version of the lineage is measured on; alone when no new row is held out).
The candidate is promoted when, on each part, its accuracy minus the served version's is at least
PROMOTE_MIN_DELTA, or falls short by no more than chance (McNemar's z <= REGRESSION_Z on the rows where
exactly one of the two is right): a candidate that learned the new data but forgot the old (or learned
corrupted labels) is not served, and a row or two of a small split does not reject one. Otherwise the decision
is ``reject`` and followers keep the served version (``ml8s chain promote N`` overrides it). Nothing served
yet: the candidate is promoted. A cold start starts a new lineage (deliberately: a changed schema,
docs/continuous.md) whose held-out split is not the served lineage's: it is promoted, and the decision says
how to serve the previous version again.

Idempotent: a candidate decided once (a re-run, the gate's early exit) is not decided again.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ml8s.chain import ChainStore, ChainVersion, PromotionAction, PromotionLog, SignedDecision, load_root
from ml8s.context.run import RunContext
from ml8s.contract import layout
from ml8s.errors import InferenceError, PredictionInputError
from ml8s.pipeline.chain_commit import ChainCommit, require_signing_key
from ml8s.store import Store

if TYPE_CHECKING:  # onnxruntime and the data path load only where a candidate is evaluated
    import pyarrow as pa

    from ml8s.contract.training_state import Generation
    from ml8s.inference import Predictor
    from ml8s.inference.cells import ReadCells

_FILES = (layout.PAYLOAD_FEATURE_SCHEMA, layout.PAYLOAD_TRAINING_METADATA)
# A part's regression must also exceed chance: McNemar's z, (worse - better) / sqrt(worse + better), above
# this (about 2.3% one-sided): a few rows of a small held-out split never reject a candidate alone.
REGRESSION_Z = 2.0


def promote(ctx: RunContext, store: Store, commit: ChainCommit) -> SignedDecision:
    """The promotion decision on the run's chain version (made now, or found made before).

    MLflow's alias ``promoted`` is not moved here: every caller ends with :func:`ml8s.registry.alias.converge_aliases`,
    which moves it after the decision within ALIAS_DEADLINE_SECONDS (a move here waited on a hung MLflow unbounded).
    """
    # the pinned root, as the commit reads it: without it a rewritten trust/ passes as trust on first use, and a
    # store writer's decisions (a served version of their choice, a forged "already decided") with it
    signer, root = require_signing_key(ctx.settings, os.environ), load_root(ctx.settings.chain_trust_root)
    chain = ChainStore(store, ctx.settings.chain_name, signer=signer, trust_root=root)
    log = PromotionLog(chain)
    decisions = log.decisions()
    candidate = chain.get(commit.counter)
    done = next((d for d in decisions if d.decision.block_hash == candidate.block_hash), None)
    if done is not None:
        return done
    served = log.served() if decisions else _served_before(chain, candidate)
    action: PromotionAction = "promote"
    if served is None:
        rule = "nothing was served: the first candidate is promoted"
    elif served.counter > candidate.counter:
        # decided late (its run stopped between commit and promotion, and was run again after a later version
        # was decided): the rule would weigh an older model against a newer one and could serve it instead
        action, rule = (
            "reject",
            (
                f"v{served.counter}, committed after it, is served: a late decision never serves an older version "
                f"(ml8s chain promote {candidate.counter} does)"
            ),
        )
    else:
        action, rule = _compare(ctx, chain, candidate, served)
    if action == "reject" and not decisions:
        log.keep_head_served(served, signer)
    decided = log.decide(action, candidate, rule, signer)
    word = "promoted" if action == "promote" else "not promoted (followers keep the served version)"
    ctx.log("promote", f"chain {chain.name!r} v{candidate.counter} {word}: {rule}")
    return decided


def _served_before(chain: ChainStore, candidate: ChainVersion) -> ChainVersion | None:
    """Without a promotion log, followers served the head: the candidate's parent (None: genesis)."""
    return chain.get(candidate.counter - 1) if candidate.counter > 1 else None


def _compare(
    ctx: RunContext, chain: ChainStore, candidate: ChainVersion, served: ChainVersion
) -> tuple[PromotionAction, str]:
    plan = ctx.spec.lineage
    delta = ctx.settings.promote_min_delta
    if plan is None:  # a new lineage, deliberately started (a changed schema): its rows are not the served one's
        return "promote", (
            f"a cold start starts a new lineage: it replaces v{served.counter} (its held-out rows are not the "
            f"served lineage's; ml8s chain promote {served.counter} serves v{served.counter} again)"
        )
    parts = {"new data": plan.new_generations, "fixed holdout": plan.generations[:1]}
    # a run with no new generation (it lost its parent to a head that trained on all of DATA_ROOT and retrained
    # from it, or a pinned WARM_START at the head) has no new data to measure: not a part with no rows
    parts = {name: generations for name, generations in parts.items() if generations}
    try:
        ours, theirs = _model(chain, candidate), _model(chain, served)
        scores = {}
        unmeasured = []
        for name, generations in parts.items():
            cells, labels = _evaluation_cells(ctx, generations, ours, theirs)
            if not cells.rows and name == "new data":  # one-row generations hold out none: the holdout decides
                unmeasured.append(
                    f"{name} (generation(s) {', '.join(str(g.index) for g in generations)}): no "
                    "held-out row (a generation of one row holds none out), not measured"
                )
                continue
            scores[name] = _Score.of(ours, theirs, cells, labels)
    except (InferenceError, PredictionInputError) as exc:
        return "reject", f"v{served.counter} and the candidate cannot be compared on the same rows: {exc.message}"
    verdict: PromotionAction = "reject" if any(s.regressed(delta) for s in scores.values()) else "promote"
    shown = "; ".join(
        [
            *unmeasured,
            *(
                f"{name} (generation(s) {', '.join(str(g.index) for g in parts[name])}, {s.rows} held-out rows): {s}"
                for name, s in scores.items()
            ),
        ]
    )
    return verdict, f"against served v{served.counter}: {shown}; PROMOTE_MIN_DELTA={delta:g}, z > {REGRESSION_Z:g}"


class _Score:
    """Both models on one part's rows: their accuracies and the rows where exactly one of them is right."""

    def __init__(self, rows: int, mine: int, other: int, worse: int, better: int) -> None:
        self.rows, self.mine, self.other, self.worse, self.better = rows, mine, other, worse, better

    @classmethod
    def of(cls, ours: Predictor, theirs: Predictor, rows: ReadCells, labels: list[str]) -> _Score:
        if not rows.rows:
            raise InferenceError("no held-out rows to evaluate on (TEST_SIZE holds none out)")
        typed = ours.transform.typed_cells(rows.cells, rows.failed)
        a = [p == y for p, y in zip(ours.predict_typed(typed, rows.rows).labels, labels, strict=True)]
        if theirs.transform.inputs != ours.transform.inputs:  # another lineage's columns: typed its own way
            typed = theirs.transform.typed_cells(rows.cells, rows.failed)
        b = [p == y for p, y in zip(theirs.predict_typed(typed, rows.rows).labels, labels, strict=True)]
        worse = sum(1 for x, y in zip(a, b, strict=True) if y and not x)
        better = sum(1 for x, y in zip(a, b, strict=True) if x and not y)
        return cls(rows.rows, sum(a), sum(b), worse, better)

    @property
    def difference(self) -> float:
        return (self.mine - self.other) / self.rows

    def regressed(self, delta: float) -> bool:
        """Below PROMOTE_MIN_DELTA, and by more than chance: McNemar's z on the rows the two disagree on."""
        if self.difference >= delta:
            return False
        disagree = self.worse + self.better
        return disagree > 0 and (self.worse - self.better) / math.sqrt(disagree) > REGRESSION_Z

    def __str__(self) -> str:
        return (
            f"accuracy {self.mine / self.rows:.4f} vs {self.other / self.rows:.4f} ({self.difference:+.4f}; "
            f"{self.worse} row(s) only the served version gets right, {self.better} only the candidate)"
        )


def _model(chain: ChainStore, version: ChainVersion) -> Predictor:
    from ml8s.inference import ModelFiles, Predictor

    names = {f.name for f in version.header.files}
    graph = next((n for n in sorted(names) if n.startswith("model.") and n != layout.PAYLOAD_WEIGHTS), None)
    if graph is None or any(name not in names for name in _FILES):
        raise InferenceError(f"v{version.counter} holds no exported model with its feature schema and metadata")
    return Predictor(
        ModelFiles(
            source=f"{chain.uri()} v{version.counter}",
            feature_schema=chain.fetch_payload(version, layout.PAYLOAD_FEATURE_SCHEMA),
            training_metadata=chain.fetch_payload(version, layout.PAYLOAD_TRAINING_METADATA),
            model=chain.fetch_payload(version, graph),
        )
    )


def _evaluation_cells(
    ctx: RunContext, generations: Sequence[Generation], ours: Predictor, theirs: Predictor
) -> tuple[ReadCells, list[str]]:
    """The held-out rows of ``generations`` (labelled by the candidate's classes) as the text columns either model
    reads: column by column, no dict per row, each model's errors those of the rows themselves."""
    from ml8s.inference.cells import read_cells
    from ml8s.lineage.history import held_out_tables

    tables: list[pa.Table] = []
    labels: list[str] = []
    params = ctx.params
    for generation in generations:
        more, classes = held_out_tables(
            generation, ctx.spec.fingerprint, ours.transform, params.random_seed, params.test_size
        )
        tables += more
        labels += classes
    names = sorted({column.name for model in (ours, theirs) for column in model.transform.inputs})
    return read_cells(tables, names), labels
