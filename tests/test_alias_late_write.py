"""A run's alias step reads the chain, then writes MLflow's aliases. Another run that commits and promotes in
between moves the aliases itself at its end; this run's write, made after that (it waited on the registry's lock,
or on a slow server, past the other's whole alias step), pointed them back at the older versions. Each write now
asks the chain first (its head, and whether a decision was appended), and leaves the aliases to the run that moved
it. The interleaving is forced by a hook between the read and the write, never by a race."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest
from mlflow import MlflowClient
from test_chain_support import meta, payload

import ml8s.registry.alias as alias
from ml8s.chain import ChainStore, ChainVersion, PromotionLog
from ml8s.context.run import RunContext
from ml8s.registry.alias import AliasMove, converge_aliases
from ml8s.registry.schema import TEMPLATE_ENV


def _registry(ctx: RunContext, tmp_path: Path) -> tuple[ChainStore, MlflowClient, dict[str, int]]:
    """A chain whose v1 ("ours") is promoted, and a registry holding ours and theirs, no alias yet."""
    settings = ctx.settings
    uri, name = settings.mlflow_tracking_uri, settings.mlflow_model_name
    database = Path(uri.removeprefix("sqlite:///"))
    database.parent.mkdir(parents=True, exist_ok=True)
    database.write_bytes(Path(os.environ[TEMPLATE_ENV]).read_bytes())
    chain = ChainStore(ctx.open_store(), settings.chain_name)
    chain.init()
    PromotionLog(chain).decide("promote", chain.commit(payload("ours"), meta("ours")), "first", None)
    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    client.create_registered_model(name)
    versions: dict[str, int] = {}
    for tag in ("ours", "theirs"):
        made = client.create_model_version(
            name, str(tmp_path / tag), tags={"full_config_hash": meta(tag).full_config_hash}
        )
        versions[tag] = made.version
    return chain, client, versions


@pytest.mark.parametrize("other", ["commits and promotes", "commits a candidate", "rejects a candidate"])
def test_a_write_after_another_run_moved_the_chain_and_its_aliases_is_not_made(
    small_ctx: RunContext,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    other: str,
) -> None:
    chain, client, versions = _registry(small_ctx, tmp_path)
    name = small_ctx.settings.mlflow_model_name
    served = "theirs" if other == "commits and promotes" else "ours"
    real = alias._stale

    def meanwhile(ctx: RunContext, uri: str, targets: dict[str, ChainVersion], deadline: float) -> list[AliasMove]:
        moves = real(ctx, uri, targets, deadline)
        assert moves  # this run read the chain (v1) and found both aliases to move to "ours"
        # the other run, before this run's write: its commit and decision, then its own alias step
        theirs = chain.commit(payload("theirs"), meta("theirs"))
        if other == "commits and promotes":
            PromotionLog(chain).decide("promote", theirs, "better", None)
        elif other == "rejects a candidate":
            PromotionLog(chain).decide("reject", theirs, "worse", None)
        client.set_registered_model_alias(name, "head", versions["theirs"])
        client.set_registered_model_alias(name, "promoted", versions[served])
        return moves

    monkeypatch.setattr(alias, "_stale", meanwhile)
    with caplog.at_level(logging.INFO, logger="ml8s"):
        assert converge_aliases(small_ctx, chain.store) == []  # claimed nothing: nothing written
    assert client.get_registered_model(name).aliases == {"head": versions["theirs"], "promoted": versions[served]}
    (said,) = [r.getMessage() for r in caplog.records if getattr(r, "step", "") == "aliases"]
    assert "left to the run or command that moved the chain (its head is v2 now)" in said, said
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING and r.name.startswith("ml8s")]


def test_a_decision_alone_since_the_read_also_stops_the_write(
    small_ctx: RunContext, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The head unchanged: an operator's `chain promote` of an older version (a roll back) between the read and
    the write; this run's write would have put ``promoted`` back on the version rolled back from."""
    chain, client, versions = _registry(small_ctx, tmp_path)
    name = small_ctx.settings.mlflow_model_name
    theirs = chain.commit(payload("theirs"), meta("theirs"))
    PromotionLog(chain).decide("promote", theirs, "better", None)
    ours = chain.get(1)
    real = alias._stale

    def rolled_back(ctx: RunContext, uri: str, targets: dict[str, ChainVersion], deadline: float) -> list[AliasMove]:
        moves = real(ctx, uri, targets, deadline)
        PromotionLog(chain).decide("promote", ours, "manual: roll back", None)
        client.set_registered_model_alias(name, "promoted", versions["ours"])
        return moves

    monkeypatch.setattr(alias, "_stale", rolled_back)
    with caplog.at_level(logging.INFO, logger="ml8s"):
        assert converge_aliases(small_ctx, chain.store) == []
    assert client.get_registered_model(name).aliases == {"promoted": versions["ours"]}
    (said,) = [r.getMessage() for r in caplog.records if getattr(r, "step", "") == "aliases"]
    assert "(promotion decision 3 was made)" in said, said


def test_the_aliases_move_when_the_chain_stayed_as_read(small_ctx: RunContext, tmp_path: Path) -> None:
    chain, client, versions = _registry(small_ctx, tmp_path)
    moved = converge_aliases(small_ctx, chain.store)
    ours = str(versions["ours"])
    assert {(m.alias, m.version) for m in moved} == {("head", ours), ("promoted", ours)}
    name = small_ctx.settings.mlflow_model_name
    assert client.get_registered_model(name).aliases == {"head": versions["ours"], "promoted": versions["ours"]}
