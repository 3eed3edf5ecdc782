"""A NaN weight is refused however it would reach a follower: a producer's tensors committed as a FULL or as a
DELTA (whose payload holds only the changed values, so no file check reads its result) are refused before the
commit, as ``ml8s chain commit --payload`` refuses such a file; a version committed with one anyway (an older
ml8s, a writer by hand) is refused by the follower, which keeps the version it serves."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import safetensors.torch
import torch
from serving_support import chain_at, follow_polls, meta, weights_series
from test_verify import clean_env, ml8s

from ml8s.audit.chain_check import weights_check
from ml8s.chain import (
    WEIGHTS_FULL,
    ChainStore,
    ChainVersion,
    PayloadBuilder,
    PayloadKind,
    RetryPolicy,
    WeightsFields,
    verify_chain,
)
from ml8s.deltas import apply_delta_in_place, encode_delta, weights_hash
from ml8s.errors import ConfigError, DeltaNanError, ServingError
from ml8s.serving import ClientConfig, DeltaConsumer, DeltaProducer, FollowOptions, InferenceClient, follow
from ml8s.weights import WEIGHTS_DELTA, WeightsMode


def _with_nan(weights: dict[str, torch.Tensor], name: str, element: int) -> dict[str, torch.Tensor]:
    out = {key: tensor.clone() for key, tensor in weights.items()}
    out[name].view(-1)[element] = float("nan")
    return out


@pytest.mark.parametrize("mode", [WeightsMode.DELTA, WeightsMode.AUTO, WeightsMode.FULL])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_producer_is_refused_nan_weights_as_a_delta_or_a_full(
    tmp_path: Path, mode: WeightsMode, dtype: torch.dtype
) -> None:
    chain = chain_at(f"file://{tmp_path}/root")
    first, second = weights_series(31, dtype, 2)
    producer = DeltaProducer(chain, interval=4)
    producer.publish_sync(first, meta("good"))
    poisoned = _with_nan(second, "block.0.weight", 17)
    with pytest.raises(ConfigError, match=r"tensor 'block.0.weight' holds NaN \(element 17\); expected no NaN weight"):
        producer.publish_sync(poisoned, meta("nan"), mode)
    assert chain.head().counter == 1  # nothing committed


def _commit_nan_delta(chain: ChainStore, first: dict[str, torch.Tensor]) -> None:
    """On the head (``first``'s weights), a DELTA whose result holds a NaN, committed past commit_weights' check
    (an older ml8s, a writer by hand): its hashes are right, so every hop verifies."""
    poisoned = _with_nan(weights_series(32, torch.float32, 2)[1], "embed.weight", 5)
    parent = chain.head()
    fields = WeightsFields(
        payload_kind=PayloadKind.DELTA,
        weights_hash=weights_hash(poisoned),
        weights_full_counter=parent.header.weights_full_counter,
        delta_base_counter=parent.counter,
        delta_base_block_hash=parent.block_hash,
    )

    def build(_: ChainVersion) -> tuple[dict[str, bytes], WeightsFields]:
        return {WEIGHTS_DELTA: encode_delta(first, poisoned)}, fields

    builder: PayloadBuilder = build
    chain.commit_with_retry(builder, meta("nan"), RetryPolicy())


def test_a_forever_follower_keeps_its_version_past_a_delta_whose_result_holds_nan(tmp_path: Path) -> None:
    chain = chain_at(f"file://{tmp_path}/root")
    first = weights_series(32, torch.float32, 1)[0]
    DeltaProducer(chain, interval=4).publish_sync(first, meta("good"))
    options = FollowOptions(out=str(tmp_path / "serve"), poll_interval_s=1)
    held = follow(chain, options.model_copy(update={"once": True}))
    assert held is not None and held.counter == 1
    _commit_nan_delta(chain, first)
    warned = follow_polls(chain, options)  # three polls of a forever follower
    assert len(warned) == 1 and warned[0].startswith("ml8s: chain 'served': keeping "), warned
    assert "SERVING_ERROR" in warned[0] and " v2 (" in warned[0]
    assert "tensor 'embed.weight' holds NaN (element 5)" in warned[0]
    served = tmp_path / "serve" / "current"
    assert json.loads((served / "ml8s_version.json").read_text())["counter"] == 1
    with pytest.raises(ServingError, match=r"tensor 'embed.weight' holds NaN"):
        follow(chain, options.model_copy(update={"once": True}))  # --once: the refusal is the exit


def test_a_client_keeps_serving_past_a_delta_whose_result_holds_nan(tmp_path: Path) -> None:
    """By the fast path (the DELTA applied to a copy of the served weights) and by a cold start (the slow path)."""
    chain = chain_at(f"file://{tmp_path}/root")
    first = weights_series(32, torch.float32, 1)[0]
    DeltaProducer(chain, interval=4).publish_sync(first, meta("good"))
    client = InferenceClient(chain, ClientConfig())
    assert client.refresh() and client.version is not None and client.version.counter == 1
    _commit_nan_delta(chain, first)
    with pytest.raises(ServingError, match=r"v2 \(.*tensor 'embed.weight' holds NaN \(element 5\)"):
        client.refresh()
    assert client.version.counter == 1
    assert client.served is not None and weights_hash(client.served.weights.tensors) == weights_hash(first)
    with pytest.raises(ServingError, match=r"holds NaN"):
        InferenceClient(chain, ClientConfig()).refresh()


def test_a_consumer_applying_a_delta_that_writes_nan_in_place_is_refused_and_changes_nothing(tmp_path: Path) -> None:
    """In place, a NaN found after the writes could not be taken back: the DELTA's new values are checked first."""
    chain = chain_at(f"file://{tmp_path}/root")
    first = weights_series(32, torch.float32, 1)[0]
    DeltaProducer(chain, interval=4).publish_sync(first, meta("good"))
    _commit_nan_delta(chain, first)
    consumer = DeltaConsumer(chain)
    tensors = {name: tensor.clone() for name, tensor in first.items()}
    with pytest.raises(
        DeltaNanError, match=r"writes NaN into tensor 'embed.weight' \(element 5\).*nothing was changed"
    ):
        consumer.apply_delta_in_place_sync(tensors, 2, 1)
    assert weights_hash(tensors) == weights_hash(first)  # bit for bit as they were
    with pytest.raises(ServingError, match=r"holds NaN"):
        consumer.get_checkpoint_sync(2)


def test_chain_verify_names_the_version_tensor_and_element_of_a_nan_weight(tmp_path: Path) -> None:
    """A follower refused such a version, but ``ml8s chain verify`` (the auditor's tool) passed the chain: it now
    reports ``weights_nan`` at that version, from the weights it rebuilds anyway; a -inf (a mask) passes."""
    chain = chain_at(f"file://{tmp_path}/root")
    first = weights_series(32, torch.float32, 1)[0]
    first["embed.weight"].view(-1)[3] = float("-inf")
    DeltaProducer(chain, interval=4).publish_sync(first, meta("good"))
    command = ("chain", "verify", "--root", str(tmp_path / "root"), "--chain", "served")
    clean = ml8s(clean_env(), *command)
    assert clean.returncode == 0 and clean.stdout.startswith("PASS chain 'served'"), clean.stdout + clean.stderr
    _commit_nan_delta(chain, first)
    done = ml8s(clean_env(), *command)
    assert done.returncode == 1, done.stdout + done.stderr
    reason = "tensor 'embed.weight' holds NaN (element 5) in the rebuilt weights; expected no NaN weight"
    assert done.stdout.startswith(
        f"FAIL chain 'served' at version 2 ({chain.get(2).version_dir}): weights_nan: {reason}"
    )
    assert [line.split(":")[0].strip() for line in done.stderr.splitlines()] == ["weights_nan"]  # v1's -inf passes


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_refuse_nan_reads_each_dtype_s_nan_bits_and_lets_infinities_pass(dtype: torch.dtype) -> None:
    base = {"w": torch.zeros(8, dtype=dtype)}
    masked = {"w": torch.tensor([0, float("-inf"), float("inf"), 1, 0, 0, 0, -2], dtype=dtype)}
    tensors = {"w": base["w"].clone()}
    apply_delta_in_place(tensors, encode_delta(base, masked), refuse_nan=True)  # -inf by design (a mask): passes
    assert torch.equal(tensors["w"], masked["w"])
    poisoned = {"w": masked["w"].clone()}
    poisoned["w"][6] = float("nan")
    poisoned["w"][3] = -float("nan")  # a NaN with its sign bit set is still one
    tensors = {"w": masked["w"].clone()}
    with pytest.raises(DeltaNanError, match=r"tensor 'w' \(element 3\)"):
        apply_delta_in_place(tensors, encode_delta(masked, poisoned), refuse_nan=True)
    assert torch.equal(tensors["w"], masked["w"])


def _commit_unhashed_full(chain: ChainStore, data: bytes, tag: str) -> None:
    """A FULL as an older ml8s committed it: its weights file, no weights hash in the block."""

    def build(_: ChainVersion) -> tuple[dict[str, bytes], WeightsFields]:
        return {WEIGHTS_FULL: data}, WeightsFields(payload_kind=PayloadKind.FULL)

    builder: PayloadBuilder = build
    chain.commit_with_retry(builder, meta(tag), RetryPolicy())


def test_a_full_recorded_without_a_weights_hash_is_checked_for_nan_and_an_unreadable_one_said_unchecked(
    tmp_path: Path,
) -> None:
    """verify rebuilt only versions recording a weights hash: an older ml8s's FULL (none recorded) holding a NaN
    passed ``ml8s chain verify`` and ``ml8s verify`` silently, though a follower will not serve it. Its tensors are
    read anyway (the block's sha256 proves the bytes); what cannot be read is said, under ``unchecked``."""
    chain = chain_at(f"file://{tmp_path}/root")
    good = weights_series(33, torch.float32, 1)[0]
    _commit_unhashed_full(chain, safetensors.torch.save(good), "good")
    _commit_unhashed_full(chain, safetensors.torch.save(_with_nan(good, "embed.weight", 7)), "nan")
    _commit_unhashed_full(chain, b"not safetensors at all", "opaque")
    assert [v.header.weights_hash for v in chain.list()] == ["", "", "", ""]
    report = verify_chain(chain, weights=weights_check)
    assert [(f.check, f.counter) for f in report.findings] == [("weights_nan", 2)], report.findings
    assert "tensor 'embed.weight' holds NaN (element 7)" in report.findings[0].reason
    (unreadable,) = [line for line in report.unchecked if "weights_nan not checked" in line]
    assert unreadable.startswith("v3: weights_nan not checked: ") and "is not valid safetensors" in unreadable
    command = ("chain", "verify", "--root", str(tmp_path / "root"), "--chain", "served")
    done = ml8s(clean_env(), *command)
    assert done.returncode == 1 and done.stdout.startswith("FAIL chain 'served' at version 2 "), done.stdout
