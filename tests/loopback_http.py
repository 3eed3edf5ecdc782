"""Hand-written HTTP servers on 127.0.0.1 for the tests that need an endpoint answering in a particular way
(an S3 endpoint that trickles or answers oddly, an MLflow server that answers any status)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class QuietHandler(BaseHTTPRequestHandler):
    """A request handler that logs nothing and speaks HTTP/1.1 (which answers a PUT's "Expect: 100-continue" at
    once; with 1.0 botocore waits a second for it)."""

    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:
        pass


@contextlib.contextmanager
def loopback_server(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """Serve ``handler`` on a free port of 127.0.0.1 until the block ends: its URL (``http://127.0.0.1:PORT``)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
