"""Step 8 as a task: commit the completed run to its model chain (on both branches of the gate), and
show the run's overview in a Flyte Deck."""

from __future__ import annotations

import sys

from flytekit import Deck, task

from ml8s import log
from ml8s.context.run import RunContext
from ml8s.pipeline.gate import GateDecision
from tasks.result import TrainingResult, training_result


# Never cached: it swaps the chain head (a side effect), and on a re-run it must still check that the
# run is in the chain, healing a crash between success.marker and the commit.
# deck_fields=(): only our "run" Deck. flytekit's default Decks add the source code and the Python
# dependencies (every installed distribution, rendered on each run: ~1 s), which a gate hit pays too.
@task(cache=False, enable_deck=True, deck_fields=())
def commit_to_chain(run: RunContext, decision: GateDecision, manifest: str) -> TrainingResult:
    """Commit the run's weights and manifest as the next chain version (idempotent per run).

    The Deck "run" renders ``ml8s.pipeline.run_overview``: identity, whether the gate hit (and a forced
    re-run's audit), held-out metrics, the feature schema in brief, the chain position and MLflow.

    Returns:
        The workflow's typed result (``tasks.result``): run id, model version, metrics, the model and manifest files.
    """
    log.configure()
    from ml8s.pipeline.chain_commit import chain_commit
    from ml8s.pipeline.promote import promote
    from ml8s.pipeline.run_overview import collect_overview, render_overview_html
    from ml8s.pipeline.summary import summary_line

    store = run.open_store()
    commit = chain_commit(run, store)
    promote(run, store, commit)  # a candidate is served only once promoted (docs/chain.md, promotion)
    # MLflow's aliases follow the chain, also on a gate hit: a run killed after its commit or decision, before
    # the aliases moved, is healed by its re-run
    from ml8s.registry.alias import converge_aliases

    converge_aliases(run, store)
    Deck("run", render_overview_html(collect_overview(run, store, decision, commit)))
    print(summary_line(manifest), file=sys.stderr)  # the run's last line: what it scored, which version, where
    return training_result(run, store, manifest, commit)
