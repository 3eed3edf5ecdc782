"""MLflow work bounded by ALIAS_DEADLINE_SECONDS: a run's alias step, and ``ml8s chain promote``'s alias move, whose
decision is made before it. MLflow's client has no bound to hand it, so the work runs on a thread waited that long.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from ml8s.errors import Ml8sError, RegistryError


def within_deadline(seconds: int, work: Callable[[float], None], *, waited: str = "") -> None:
    """``work(deadline)`` on a thread of its own, waited for ``seconds`` at most; ``waited``: what a caller knows it
    waits on, said when the deadline passes.

    The early exit of a run whose work is done must return promptly, and MLflow's client waits minutes on a hung
    server (MLFLOW_HTTP_REQUEST_TIMEOUT per request, then retries) with no bound to hand it: so the work runs on a
    daemon thread, left to end with its connection, and is told the deadline, past which it writes nothing.

    Raises:
        RegistryError: ``work`` was not done within ``seconds``; or what ``work`` raised.
    """
    deadline = time.monotonic() + seconds
    outcome: list[Exception | None] = []

    def run() -> None:
        try:
            work(deadline)
            outcome.append(None)
        except Exception as exc:  # handed to the caller's thread, which warns of it or raises it
            outcome.append(exc)

    thread = threading.Thread(target=run, name="ml8s-aliases", daemon=True)
    thread.start()
    thread.join(max(deadline - time.monotonic(), 0.0))
    late = f"not done within ALIAS_DEADLINE_SECONDS={seconds} s"
    if not outcome:
        waited = waited or (
            "by then the registry had not answered, or MLflow was still retrying the errors it answered, or the lock "
            "beside a sqlite:/// registry was still held"
        )
        raise RegistryError(f"{late} ({waited}); expected the registry to answer within it")
    failed = outcome[0]
    if isinstance(failed, Ml8sError) and time.monotonic() >= deadline:  # cut short by the deadline: say so
        raise RegistryError(f"{late}: {failed.message}") from failed
    if failed is not None:
        raise failed
