"""FULL -> DELTA x 100 on a chain, rebuilt by a fresh consumer process: the weights hash equal at every hop."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from serving_support import chain_at, meta, run_worker, weights_series

from ml8s.chain import verify_chain
from ml8s.deltas import weights_hash
from ml8s.serving import DeltaProducer
from ml8s.weights import weights_problems

HOPS = 100


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
def test_hundred_hops_rebuilt_by_a_fresh_consumer(tmp_path: Path, dtype: torch.dtype) -> None:
    root = f"file://{tmp_path}/root"
    chain = chain_at(root)
    producer = DeltaProducer(chain, interval=HOPS + 1)  # one FULL anchor, then DELTAs only
    produced = []
    for hop, weights in enumerate(weights_series(31, dtype, HOPS + 1)):
        result = producer.publish_sync(weights, meta(f"hop-{hop}"))
        assert result.weights_hash == weights_hash(weights)
        assert result.payload_kind == ("full" if hop == 0 else "delta")
        produced.append([hop + 1, result.payload_kind, result.weights_hash])
    assert len({row[2] for row in produced}) == HOPS + 1, "every hop must change the weights"
    lines = [json.loads(line) for line in run_worker("rebuild", root, chain.name).splitlines()]
    assert lines[:-1] == produced
    assert lines[-1] == [HOPS + 1, "slow", produced[-1][2]]
    report = verify_chain(chain, weights=weights_problems)  # verify rebuilds every version too
    assert report.ok, report.findings


def test_the_interval_places_full_anchors(tmp_path: Path) -> None:
    chain = chain_at(f"file://{tmp_path}/root")
    producer = DeltaProducer(chain, interval=3)
    kinds = [
        producer.publish_sync(w, meta(f"i-{n}")).payload_kind for n, w in enumerate(weights_series(5, torch.float16, 8))
    ]
    assert kinds == ["full", "delta", "delta", "full", "delta", "delta", "full", "delta"]
    fulls = [v.header.weights_full_counter for v in chain.list()[1:]]
    assert fulls == [1, 1, 1, 4, 4, 4, 7, 7]
    assert verify_chain(chain, weights=weights_problems).ok
