"""Each S3 request has a total deadline (ML8S_S3_REQUEST_DEADLINE, plus 1 s per MiB moved). An endpoint that
sent its headers or body a byte every few seconds never tripped the 30 s read timeout: ``ml8s run``, ``follow``
or ``predict --chain`` hung for hours with no message. Hand-written loopback servers trickle their answers."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator

import pytest
from loopback_http import QuietHandler, loopback_server
from test_s3_hostile import CREDENTIALS

from ml8s.errors import ConfigError, StoreUnavailableError
from ml8s.identity.lookalike import lookalikes
from ml8s.store import S3Store

BYTE_EVERY_S = 0.2  # far under the 30 s read timeout: each wait for the next byte is short
MiB = 1024 * 1024


@contextlib.contextmanager
def trickling(phase: str, body: bytes = b"", rate: int = 0) -> Iterator[tuple[str, list[str]]]:
    """A server on 127.0.0.1 that trickles every answer: its headers (``phase="headers"``) or its body (``"body"``)
    a byte every BYTE_EVERY_S seconds, until the test ends; or (``"steady"``) sends ``body`` at ``rate`` bytes/s."""
    seen: list[str] = []
    stop = threading.Event()

    class Handler(QuietHandler):
        def answer(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            seen.append(f"{self.command} {self.path}")
            if phase == "steady":
                self._headers(len(body))
                for start in range(0, len(body), 64 * 1024):
                    self.wfile.write(body[start : start + 64 * 1024])
                    time.sleep(64 * 1024 / rate)
                return
            if phase == "body":
                self._headers(100_000)
            else:
                self.wfile.write(b"HTTP/1.1 200 OK\r\nx-amz-pad: ")
            with contextlib.suppress(OSError):  # the client gave up and closed
                while not stop.wait(BYTE_EVERY_S):
                    self.wfile.write(b"x")
                    self.wfile.flush()
            # the answer is never finished: closing the connection ends an abandoned request at once, where a kept-alive
            # one would wait for botocore's 30 s read timeout
            self.close_connection = True

        def _headers(self, length: int) -> None:
            self.send_response(200)
            self.send_header("Content-Length", str(length))
            self.send_header("ETag", '"e"')
            self.end_headers()

        do_GET = do_PUT = do_HEAD = answer

    with loopback_server(Handler) as url:
        try:
            yield url, seen
        finally:
            stop.set()  # the trickling handlers end before the server does


@pytest.fixture(autouse=True)
def _abandoned_requests_end() -> Iterator[None]:
    """Each test ends once the requests it abandoned have: a request thread left running would go on retrying
    (botocore draws its back-off from Python's global random) during the next test of this worker, whose training
    records that generator's state in training_state.safetensors."""
    yield
    waited = time.monotonic() + 60
    while any(t.name == "ml8s-s3-request" for t in threading.enumerate()):
        assert time.monotonic() < waited, "an abandoned S3 request did not end within 60 s of its test"
        time.sleep(0.05)


def _store(url: str, **env: str) -> S3Store:
    settings = {**CREDENTIALS, "AWS_MAX_ATTEMPTS": "2", "ML8S_S3_REQUEST_DEADLINE": "1", **env}
    return S3Store("s3://bkt/p", env={**settings, "AWS_ENDPOINT_URL": url})


ACTIONS: dict[str, Callable[[S3Store], object]] = {
    "GET": lambda store: store.get("runs/k"),
    "HEAD": lambda store: store.exists("runs/k"),
    "LIST": lambda store: store.list("runs/k"),
    "PUT": lambda store: store.put_atomic("runs/k", b"data", tmp_key=".tmp/k"),
}


@pytest.mark.parametrize(
    ("op", "phase"), [("GET", "headers"), ("GET", "body"), ("HEAD", "headers"), ("LIST", "headers"), ("PUT", "headers")]
)
def test_a_trickled_answer_fails_at_the_deadline_after_the_retries(
    op: str, phase: str, caplog: pytest.LogCaptureFixture
) -> None:
    with trickling(phase) as (url, seen), caplog.at_level(logging.WARNING, logger="ml8s.store.s3"):
        store = _store(url)
        with pytest.raises(StoreUnavailableError) as info:
            ACTIONS[op](store)
    message = str(info.value)
    assert message.startswith(f"STORE_UNAVAILABLE: {op} s3://bkt/p/"), message
    assert f"S3 endpoint {url} sent no complete answer within the request deadline of 1 s" in message
    assert "ML8S_S3_REQUEST_DEADLINE" in message and "in 2 attempt(s)" in message
    # AWS_MAX_ATTEMPTS: tried again once, then given up (an abandoned attempt may reach a loaded server late)
    waited = time.monotonic() + 60
    while len(seen) < 2 and time.monotonic() < waited:
        time.sleep(0.05)
    assert len(seen) == 2, seen
    said = [r.getMessage() for r in caplog.records]
    assert any("attempt 1 of 2 failed (no complete answer within 1 s); trying again" in line for line in said), said


@pytest.mark.parametrize("op", ["GET", "HEAD"])
def test_botocores_retries_and_the_late_ones_share_aws_max_attempts(op: str) -> None:
    """botocore retried a failed try (a 503, a 30 s read timeout) inside each try the deadline gave, and a late try
    was tried again with a fresh count of its own: a hung endpoint got AWS_MAX_ATTEMPTS x AWS_MAX_ATTEMPTS tries,
    up to AWS_MAX_ATTEMPTS x the deadline (20 x 300 s where the tries allowed 20 x 35 s), and an abandoned try
    went on trying after the command had failed. Here the first try is a 503 and the next hangs: 2 tries in all."""
    seen: list[str] = []
    stop = threading.Event()

    class Handler(QuietHandler):
        def answer(self) -> None:
            seen.append(f"{self.command} {self.path}")
            if len(seen) == 1:
                self.send_response(503)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            stop.wait(60)  # accepted, never answered (until the test ends: then closed, a retryable failure)
            self.close_connection = True

        do_GET = do_HEAD = answer

    with loopback_server(Handler) as url:
        try:
            with pytest.raises(StoreUnavailableError, match=r"within the request deadline of 1 s .* in 2 attempt"):
                ACTIONS[op](_store(url))
        finally:
            stop.set()
        waited = time.monotonic() + 60  # a hang guard: the abandoned try ends once its connection is closed
        while any(t.name == "ml8s-s3-request" for t in threading.enumerate()) and time.monotonic() < waited:
            time.sleep(0.05)
    assert len(seen) == 2, seen


def test_a_large_honest_download_is_not_cut_by_the_deadline() -> None:
    """12 MiB at 4 MiB/s takes 3 s, past a 2 s deadline: the allowance grows by 1 s per MiB received (the margin,
    2 s and more, leaves room for a loaded machine's pauses)."""
    body = bytes(range(256)) * (12 * MiB // 256)
    with trickling("steady", body, rate=4 * MiB) as (url, seen):
        assert _store(url, ML8S_S3_REQUEST_DEADLINE="2").get("runs/big") == body
    assert len(seen) == 1


def test_a_password_in_the_endpoint_stays_out_of_the_deadline_error() -> None:
    with trickling("headers") as (url, _):
        store = _store(url.replace("http://", "http://user:s3cret@"), AWS_MAX_ATTEMPTS="1")
        with pytest.raises(StoreUnavailableError) as info:
            store.get("k")
    assert "s3cret" not in str(info.value) and "sent no complete answer" in str(info.value)


@pytest.mark.parametrize("value", ["0", "86401", "abc", "1.5", "\uff13", "-1", "9" * 40])
def test_the_request_deadline_is_a_whole_number_of_seconds_from_1_to_86400(value: str) -> None:
    env = {**CREDENTIALS, "AWS_ENDPOINT_URL": "http://127.0.0.1:9", "ML8S_S3_REQUEST_DEADLINE": value}
    with pytest.raises(ConfigError, match=r"^CONFIG_ERROR: ML8S_S3_REQUEST_DEADLINE=.* expected a whole number"):
        S3Store("s3://bkt/p", env=env)


def test_the_setting_is_known_so_ml8s_run_warns_about_its_misspellings_only() -> None:
    assert lookalikes(["ML8S_S3_REQUEST_DEADLINE"]) == []
    assert lookalikes(["ML8S_S3_REQUEST_DEADLIN"]) == [("ML8S_S3_REQUEST_DEADLIN", "ML8S_S3_REQUEST_DEADLINE")]
