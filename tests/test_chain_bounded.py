"""Bounded waits (issue 12 defect 6): a commit that cannot reach the store says so within seconds, naming
the endpoint, and gives up after RetryPolicy.deadline_s with CommitDeadlineError; locally and on radosgw."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from s3_servers import RadosGW
from test_chain_support import CHAIN, StoreSpec, meta, open_spec, payload, rgw_spec_fixture  # noqa: F401

from ml8s.chain import ChainStore, RetryPolicy
from ml8s.errors import CommitDeadlineError, StoreUnavailableError
from ml8s.store import LocalStore, Versioned

QUICK = RetryPolicy(max_attempts=1000, base_delay_s=0.05, max_delay_s=0.2, deadline_s=1.5, report_after_s=0.2)


class DownStore(LocalStore):
    """Every head read fails as an unreachable store would."""

    def get_versioned(self, key: str, *, max_bytes: int | None = None) -> Versioned:
        raise StoreUnavailableError(f"connection refused reading {self.uri(key)}")


class HungStore(LocalStore):
    """The first head read hangs for a while (an endpoint that accepts and does not answer), then recovers."""

    hung = False

    def get_versioned(self, key: str, *, max_bytes: int | None = None) -> Versioned:
        if not self.hung:
            self.hung = True
            time.sleep(1.0)
        return super().get_versioned(key, max_bytes=max_bytes)


def test_unreachable_store_reports_and_gives_up(tmp_path: Path) -> None:
    ChainStore(LocalStore(str(tmp_path)), CHAIN).init()
    lines: list[str] = []
    start = time.monotonic()
    with pytest.raises(CommitDeadlineError, match="gave up after 2 s"):
        ChainStore(DownStore(str(tmp_path)), CHAIN).commit_with_retry(
            payload("p"), meta("p"), QUICK.model_copy(update={"deadline_s": 2.0}), notify=lines.append
        )
    assert time.monotonic() - start < 10
    assert lines and all(str(tmp_path) in line and "connection refused" in line for line in lines)


def test_hung_attempt_is_reported_while_it_waits(tmp_path: Path) -> None:
    ChainStore(LocalStore(str(tmp_path)), CHAIN).init()
    lines: list[str] = []
    version = ChainStore(HungStore(str(tmp_path)), CHAIN).commit_with_retry(
        payload("p"), meta("p"), QUICK, notify=lines.append
    )
    assert version.counter == 1
    assert lines and "has not answered" in lines[0] and str(tmp_path) in lines[0]


def test_radosgw_down(rgw_spec: StoreSpec, radosgw_server: RadosGW) -> None:
    chain = ChainStore(open_spec(rgw_spec), CHAIN)
    chain.init()
    lines: list[str] = []
    radosgw_server.stop()
    try:
        start = time.monotonic()
        with pytest.raises(CommitDeadlineError):
            chain.commit_with_retry(
                payload("p"), meta("p"), QUICK.model_copy(update={"deadline_s": 3.0}), notify=lines.append
            )
        assert time.monotonic() - start < 60
    finally:
        radosgw_server.start()
    assert lines and all(radosgw_server.url in line for line in lines), lines
    assert chain.commit_with_retry(payload("p"), meta("p"), QUICK).counter == 1
