"""A payload file never takes the name of a file ``ml8s follow`` writes beside it (``ml8s_version.json``, a DELTA's
rebuilt ``model_native.safetensors``): a producer is refused before it commits one, and a version committed with
one anyway (another writer, an older ml8s) is refused by the follower, which keeps the version it holds."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
from s3_servers import S3Endpoint
from serving_support import chain_at, follow_polls, meta, weights_series

from ml8s.chain import ChainStore, ChainVersion, PayloadBuilder, PayloadKind, RetryPolicy, WeightsFields
from ml8s.cli.main import main
from ml8s.deltas import encode_delta, encode_full, weights_hash
from ml8s.errors import ConfigError
from ml8s.serving import DeltaProducer, FollowOptions, follow
from ml8s.weights import WEIGHTS_DELTA, WEIGHTS_FULL

FOREIGN = b'{"counter": 999, "mine": true}'


def _raw(chain: ChainStore, files: dict[str, bytes], fields: WeightsFields, tag: str) -> None:
    """Commit ``files`` as they are, past commit_weights' name check (a writer that does not use it)."""

    def build(parent: ChainVersion) -> tuple[dict[str, bytes], WeightsFields]:
        return files, fields

    builder: PayloadBuilder = build
    chain.commit_with_retry(builder, meta(tag), RetryPolicy())


@pytest.mark.parametrize("name", ["ml8s_version.json", "ml8s_version.json/inner.txt", WEIGHTS_FULL, WEIGHTS_DELTA])
def test_a_producer_is_refused_a_reserved_payload_name(tmp_path: Path, name: str) -> None:
    chain = chain_at(f"file://{tmp_path}/root")
    with pytest.raises(ConfigError, match=r"expected no file named \(or under\) .*ml8s_version.json"):
        DeltaProducer(chain, interval=4).publish_sync({"w": torch.ones(3)}, meta("x"), extra={name: b"x"})
    assert chain.head().counter == 0  # nothing committed


def test_follow_refuses_a_payload_named_like_its_own_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    root = f"file://{tmp_path}/root"
    for key, value in {"PIPELINE_ROOT_URI": root, "CHAIN_NAME": "served", "DELTA_BASE_INTERVAL": "4"}.items():
        monkeypatch.setenv(key, value)
    chain = chain_at(root)
    first, second = weights_series(21, torch.float32, 2)
    DeltaProducer(chain, interval=4).publish_sync(first, meta("good"))
    out = tmp_path / "serve"
    assert main(["follow", "--out", str(out), "--once"]) == 0
    held = json.loads((out / "current" / "ml8s_version.json").read_text())
    fields = WeightsFields(weights_hash=weights_hash(second), weights_full_counter=2)
    _raw(chain, {WEIGHTS_FULL: encode_full(second), "ml8s_version.json": FOREIGN}, fields, "clash")
    capsys.readouterr()
    assert main(["follow", "--out", str(out), "--once"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("ml8s: SERVING_ERROR: chain 'served' v2 (")
    assert "payload file(s) ['ml8s_version.json'] would be overwritten" in err[0]
    assert json.loads((out / "current" / "ml8s_version.json").read_text()) == held  # the good version is kept
    assert sorted(os.listdir(out / "versions")) == [os.path.basename(os.readlink(out / "current"))]


def test_a_forever_follower_keeps_its_version_past_a_delta_holding_foreign_full_weights(tmp_path: Path) -> None:
    """A DELTA whose payload also holds a ``model_native.safetensors``: that file is no verified weights, and the
    follower served it as the version's weights (the rebuilt ones were dropped)."""
    chain = chain_at(f"file://{tmp_path}/root")
    first, second = weights_series(22, torch.float32, 2)
    DeltaProducer(chain, interval=4).publish_sync(first, meta("good"))
    options = FollowOptions(out=str(tmp_path / "serve"), poll_interval_s=1)
    held = follow(chain, options.model_copy(update={"once": True}))
    assert held is not None and held.counter == 1
    parent = chain.head()
    fields = WeightsFields(
        payload_kind=PayloadKind.DELTA,
        weights_hash=weights_hash(second),
        weights_full_counter=1,
        delta_base_counter=parent.counter,
        delta_base_block_hash=parent.block_hash,
    )
    forged = encode_full({name: torch.zeros_like(t) for name, t in second.items()})
    _raw(chain, {WEIGHTS_DELTA: encode_delta(first, second), WEIGHTS_FULL: forged}, fields, "foreign")
    warned = follow_polls(chain, options)  # three polls of a forever follower
    assert len(warned) == 1 and warned[0].startswith("ml8s: chain 'served': keeping ")  # once, not every poll
    assert f"payload file(s) ['{WEIGHTS_FULL}'] would be overwritten" in warned[0]
    assert "waiting for a version to serve" not in warned[0]
    served = tmp_path / "serve" / "current"
    assert json.loads((served / "ml8s_version.json").read_text())["counter"] == 1
    assert (served / WEIGHTS_FULL).read_bytes() != forged


def test_a_payload_file_that_is_also_a_folder_is_refused_and_the_follower_keeps_its_version(
    moto_server: S3Endpoint, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """An object store holds ``cfg`` and ``cfg/a.json`` side by side, a directory cannot: the forever follower
    ended at the write (CONFIG_ERROR '--out ...: cannot write versions/...: File exists; expected a writable
    directory') instead of keeping its version and polling on."""
    for key, value in moto_server.env().items():
        monkeypatch.setenv(key, value)
    chain = chain_at(f"s3://{moto_server.make_bucket()}/pipeline")
    first, second = weights_series(23, torch.float32, 2)
    DeltaProducer(chain, interval=4).publish_sync(first, meta("good"))
    options = FollowOptions(out=str(tmp_path / "serve"), poll_interval_s=1)
    assert follow(chain, options.model_copy(update={"once": True})) is not None
    fields = WeightsFields(weights_hash=weights_hash(second), weights_full_counter=2)
    _raw(chain, {WEIGHTS_FULL: encode_full(second), "cfg": b"x", "cfg/a.json": b"{}"}, fields, "folder")
    assert [f.name for f in chain.head().header.files] == ["cfg", "cfg/a.json", WEIGHTS_FULL]
    warned: list[str] = []

    def sleep(_: float) -> None:
        if len(warned) == 1:
            raise KeyboardInterrupt  # ends the forever loop once it said why

    with pytest.raises(KeyboardInterrupt):
        follow(chain, options, warn=warned.append, sleep=sleep)
    assert warned[0].startswith("ml8s: chain 'served': keeping ") and "SERVING_ERROR" in warned[0]
    assert "payload file(s) ['cfg'] are also the folder(s) of other payload files" in warned[0]
    served = tmp_path / "serve" / "current"
    assert json.loads((served / "ml8s_version.json").read_text())["counter"] == 1
    assert not [n for n in os.listdir(tmp_path / "serve" / "versions") if n.startswith(".tmp-")]
