"""Whether an MLflow server answers at all, asked in seconds, before MLflow's own client is let loose on it.

MLflow's client waits up to MLFLOW_HTTP_REQUEST_TIMEOUT (120 s) for each request and retries it up to seven
times: against an absent or hung server a command would sit silently for many minutes. Every ml8s path
that talks to an ``http(s)://`` tracking server asks here first (a run before it trains, ``verify``,
``runs list``, promotion, anchors); other tracking URIs (a database, a local file) are not asked.
"""

from __future__ import annotations

import http.client
import math
import os
import ssl
import threading
import time
import urllib.error
import urllib.request
from urllib.parse import urlsplit, urlunsplit

from ml8s.errors import RegistryError
from ml8s.identity.uri import public_tracking_uri

MLFLOW_PROBE_TIMEOUT_S = 15.0
_REFUSED_RETRY_S = 0.25


def require_answer(uri: str, within: float | None = None) -> None:
    """Raise :class:`RegistryError` when the MLflow server at ``uri`` gives no answer within :func:`probe_bound`,
    or ``within`` seconds where that is shorter (what is left of a caller's own deadline).

    Not ``http(s)://``: nothing is asked.
    """
    bound = probe_bound() if within is None else max(min(probe_bound(), within), 0.0)
    if (why := mlflow_unanswered(uri, bound)) is not None:
        raise RegistryError(f"MLflow at {public_tracking_uri(uri)}: {why}; expected a reachable MLflow server")


_ANSWERED: set[str] = set()


def mlflow_unanswered(uri: str, bound: float) -> str | None:
    """Why the MLflow server at an ``http(s)://`` ``uri`` gave no answer within ``bound`` seconds; None if it did.

    One ``GET <uri>/health``, without credentials; any HTTP status is an answer (a proxy may want a login). A
    refused connection (a server starting or restarting) is asked again until the bound. The certificate is
    not checked (nothing secret is sent; MLflow checks it, with its own settings, when it talks to the server).
    Another scheme is not asked: None. A server that answered is not asked again by this process (a run's
    preflight, then its registration); a silence is not remembered.
    """
    if not is_tracking_server(uri) or uri in _ANSWERED:
        return None
    try:
        parts = urlsplit(uri)
    except ValueError as exc:  # 'https://[::1' (a manifest's, or a flag's): no request can be made of it
        return f"{public_tracking_uri(uri)} is no URL ({exc})"
    url = urlunsplit((parts.scheme, parts.netloc.rpartition("@")[2], parts.path.rstrip("/") + "/health", "", ""))
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    deadline = time.monotonic() + bound
    while True:
        failed = _get_within(url, context, deadline)
        if failed is None:
            _ANSWERED.add(uri)
            return None
        why = failed.reason if isinstance(failed, urllib.error.URLError) else failed
        if isinstance(why, ConnectionRefusedError) and time.monotonic() + _REFUSED_RETRY_S < deadline:
            time.sleep(_REFUSED_RETRY_S)
            continue
        return f"no answer to GET {url} within {bound:g} s ({type(why).__name__}: {why})"


def _get_within(url: str, context: ssl.SSLContext, deadline: float) -> Exception | None:
    """``GET url`` until ``deadline``: None if the server answered (any status), else why not.

    The socket timeout bounds each wait for the next bytes, not the answer: a server sending its headers a byte
    at a time held the probe (then the command) for hours, whatever the bound. So the request runs on a thread
    of its own (a daemon, left to end with its connection) and is waited for until the deadline only.
    """
    outcome: list[Exception | None] = []

    def get() -> None:
        try:
            with urllib.request.urlopen(url, timeout=max(deadline - time.monotonic(), 0.01), context=context) as got:
                got.read(1)
            outcome.append(None)
        except urllib.error.HTTPError:
            outcome.append(None)  # the server answered
        except Exception as exc:  # handed to the caller's thread, which says or raises it
            outcome.append(exc)

    thread = threading.Thread(target=get, name="ml8s-mlflow-probe", daemon=True)
    thread.start()
    thread.join(max(deadline - time.monotonic(), 0.0))
    if not outcome:
        return TimeoutError("no complete answer")
    failed = outcome[0]
    if failed is not None and not isinstance(failed, (urllib.error.URLError, OSError, http.client.HTTPException)):
        raise failed  # a bug of ours, as before: not an unanswered server
    return failed


def is_tracking_server(uri: str) -> bool:
    """Whether ``uri`` names an MLflow server (``http(s)://``): the only tracking URIs that are asked."""
    return uri.partition(":")[0].lower() in ("http", "https")  # not urlsplit: it raises on 'https://[::1'


def probe_bound() -> float:
    """MLflow's MLFLOW_HTTP_REQUEST_TIMEOUT where the user set it (their bound on one request), else 15 s."""
    # MLflow's own variable, read from the process environment as MLflow reads it: the user's bound on a request
    text = os.environ.get("MLFLOW_HTTP_REQUEST_TIMEOUT", "")
    try:
        value = float(text)
    except ValueError:
        return MLFLOW_PROBE_TIMEOUT_S
    return value if 0 < value < math.inf else MLFLOW_PROBE_TIMEOUT_S
