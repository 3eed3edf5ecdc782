"""A version committed and promoted between a reader's head read and its promotion read: the decision names a
version above the head the reader checked. ``InferenceClient.refresh``, ``ml8s follow`` and ``ml8s predict
--chain`` said "has no version N" once; they now read the head again (every check of a poll on it) and serve the
decision's version, and still refuse one that the fresh head's checks refuse. The interleaving is forced by a hook
on the promotion read, never by a race."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from serving_support import meta, weights_series
from test_chain_signing import intruder
from test_promotion import KEY, _chain, _cli_chain, _served

from ml8s.chain import ChainStore, ChainVersion, PromotionLog, PromotionReader
from ml8s.cli.main import main
from ml8s.errors import UntrustedVersionError
from ml8s.serving import ClientConfig, InferenceClient
from ml8s.weights import commit_weights


def _between_reads(monkeypatch: pytest.MonkeyPatch, act: Callable[[], None]) -> list[int]:
    """Run ``act`` once, at the first promotion read (after the reader's poll read and checked the head)."""
    real, calls = PromotionReader.served, []

    def late(self: PromotionReader) -> ChainVersion | None:
        calls.append(1)
        if len(calls) == 1:
            act()
        return real(self)

    monkeypatch.setattr(PromotionReader, "served", late)
    return calls


def _commit_and_promote(chain: ChainStore, tag: str) -> Callable[[], None]:
    def act() -> None:
        weights = weights_series(23, torch.float32, 1)[0]
        version = commit_weights(chain, weights, meta(tag), interval=4)
        PromotionLog(chain).decide("promote", version, "manual", chain.signer)

    return act


def test_a_client_serves_a_version_committed_and_promoted_after_its_poll(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    chain = _chain(tmp_path / "root", "race", signed=True)
    PromotionLog(chain).decide("promote", chain.get(2), "manual", KEY)
    client = InferenceClient(ChainStore(chain.store, "race"), ClientConfig(state_path=str(tmp_path / "state.json")))
    assert client.refresh() and _served(client) == 2
    calls = _between_reads(monkeypatch, _commit_and_promote(chain, "late"))
    assert client.refresh() and _served(client) == 5 and calls  # was VersionNotFoundError "has no version 5"
    assert client.follower.current is not None and client.follower.current.counter == 5  # the head read again
    assert not client.refresh()  # nothing moved since: nothing swapped


def test_a_version_forged_and_promoted_after_the_poll_is_still_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fresh head is checked as every poll checks it: an unsigned version on a signed chain, promoted by a
    key holder tricked into it, is refused (its signature), never served through the second read."""
    chain = _chain(tmp_path / "root", "forged", signed=True)
    PromotionLog(chain).decide("promote", chain.get(2), "manual", KEY)
    client = InferenceClient(ChainStore(chain.store, "forged"), ClientConfig())
    client.refresh()

    def forge() -> None:
        PromotionLog(chain).decide("promote", intruder(chain, "forged", signer=None, policy=0), "manual", KEY)

    _between_reads(monkeypatch, forge)
    with pytest.raises(UntrustedVersionError):
        client.refresh()
    assert _served(client) == 2


def test_predict_chain_reads_a_version_committed_and_promoted_after_its_poll(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The payloads here hold no exported model, so predict stops at the version it read: v5 must be that one."""
    chain = _cli_chain(tmp_path / "root", monkeypatch)
    PromotionLog(chain).decide("promote", chain.get(2), "manual", None)
    rows = tmp_path / "rows.csv"
    rows.write_text("a,b\n1,2\n")
    _between_reads(monkeypatch, _commit_and_promote(chain, "late"))
    capsys.readouterr()
    assert main(["predict", "--chain", "cli", "--input", str(rows)]) == 1
    err = capsys.readouterr().err
    assert "'cli' v5 holds no" in err and "has no version" not in err, err
    assert len(err.splitlines()) == 1 and "Traceback" not in err
