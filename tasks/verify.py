"""The verification of a run as a task: the report as JSON, and as an HTML table in a Flyte Deck."""

from __future__ import annotations

import os

from flytekit import Deck, task

from ml8s import log


# In the training image (MLflow is there); never cached: the answer is the state of the store and MLflow.
# deck_fields=(): only the "verification" Deck, not flytekit's defaults (source, the listing of every
# installed distribution, timeline, inputs, outputs), which cost a second and show nothing of the run.
@task(container_image="{{.image.train}}", cache=False, enable_deck=True, deck_fields=())
def verify_run_task(run_id: str, pipeline_root_uri: str, recheck_data: bool) -> str:
    """Verify one run; the report (JSON) is the output and the Deck "verification" renders it.

    Returns:
        The report as JSON: ``status`` is PASS or FAIL, ``checks`` names each check with its reason.
    """
    log.configure()
    from ml8s.audit import render_html, verify_run
    from ml8s.identity.settings import PlatformSettings

    root = PlatformSettings.load(os.environ, {"pipeline_root_uri": pipeline_root_uri}).pipeline_root_uri
    report = verify_run(root, run_id, os.environ, recheck_data=recheck_data)
    Deck("verification", render_html(report))
    return report.model_dump_json(indent=2)
