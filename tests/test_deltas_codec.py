"""DELTA codec: round trips, raw-bit changes, layout changes, wrong bases and all-or-nothing in-place apply."""

from __future__ import annotations

import math
from unittest import mock

import pytest
import torch
from deltas_support import make_weights, perturb

from ml8s.deltas import (
    DeltaOptions,
    apply_delta,
    apply_delta_in_place,
    encode_delta,
    encode_full,
    read_delta_header,
    weights_hash,
)
from ml8s.deltas.indices import index_width
from ml8s.errors import DeltaBaseMismatchError, DeltaDtypeError, DeltaFormatError, DeltaShapeError

INT_VIEW = {torch.float32: torch.int32, torch.float16: torch.int16, torch.bfloat16: torch.int16}
DTYPES = [torch.float32, torch.bfloat16, torch.float16]


def bits_equal(left: dict[str, torch.Tensor], right: dict[str, torch.Tensor]) -> bool:
    """Same names and the same raw bits everywhere (torch.equal would call NaN != NaN and -0.0 == 0.0)."""
    return left.keys() == right.keys() and all(
        left[n].dtype == right[n].dtype
        and torch.equal(left[n].view(INT_VIEW[left[n].dtype]), right[n].view(INT_VIEW[right[n].dtype]))
        for n in left
    )


def copy(weights: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {name: tensor.clone() for name, tensor in weights.items()}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("fraction", [0.001, 0.01, 0.3, 1.0])
def test_round_trip(dtype: torch.dtype, fraction: float) -> None:
    base = make_weights(1, dtype)
    new = perturb(base, fraction, seed=2)
    delta = encode_delta(base, new)
    rebuilt = apply_delta(base, delta)
    assert bits_equal(rebuilt, new)
    assert bits_equal(base, make_weights(1, dtype)), "apply_delta must not modify its base"
    header = read_delta_header(delta)
    assert (header.base_hash, header.result_hash) == (weights_hash(base), weights_hash(new))
    changed = {n: int((base[n].view(INT_VIEW[dtype]) != new[n].view(INT_VIEW[dtype])).sum()) for n in base}
    assert {info.name: info.count for info in header.tensors} == changed
    target = copy(base)
    assert apply_delta_in_place(target, delta) == header
    assert bits_equal(target, new)


def test_signed_zero_and_nan_payload_changes_are_carried() -> None:
    base = {"w": torch.tensor([0.0, float("nan"), 1.0, -0.0], dtype=torch.float32)}
    new = copy(base)
    new["w"][0] = -0.0  # equal as floats, different bits
    new["w"].view(torch.int32)[1] = 0x7FC00001  # another NaN payload
    new["w"].view(torch.int32)[3] = 0  # -0.0 -> +0.0
    header = read_delta_header(delta := encode_delta(base, new))
    assert header.tensors[0].count == 3
    rebuilt = apply_delta(base, delta)
    assert rebuilt["w"].view(torch.int32).tolist() == new["w"].view(torch.int32).tolist()
    bf_base = {"w": torch.tensor([0.0, float("nan")], dtype=torch.bfloat16)}
    bf_new = copy(bf_base)
    bf_new["w"].view(torch.int16)[0] = -0x8000  # -0.0 in bfloat16
    bf_new["w"].view(torch.int16)[1] = 0x7FC1
    assert bits_equal(apply_delta(bf_base, encode_delta(bf_base, bf_new)), bf_new)


def test_empty_delta_changes_nothing_and_is_small() -> None:
    base = make_weights(3, torch.float32)
    delta = encode_delta(base, copy(base))
    header = read_delta_header(delta)
    assert header.base_hash == header.result_hash and all(info.count == 0 for info in header.tensors)
    assert all(info.index_width == 1 for info in header.tensors)
    assert len(delta) < 400
    assert bits_equal(apply_delta(base, delta), base)


def test_empty_weights() -> None:
    delta = encode_delta({}, {})
    assert apply_delta({}, delta) == {}
    assert read_delta_header(delta).tensors == ()


def test_index_width_is_the_narrowest_per_tensor() -> None:
    base = {name: torch.zeros(200_000) for name in ("narrow", "wide", "wider")}
    new = copy(base)
    new["narrow"][[5, 260]] = 1.0  # gaps 5 and 254: one byte
    new["wide"][[0, 300]] = 1.0  # gap 299: two bytes
    new["wider"][[0, 70_000]] = 1.0  # gap 69_999: four bytes
    widths = {info.name: info.index_width for info in read_delta_header(encode_delta(base, new)).tensors}
    assert widths == {"narrow": 1, "wide": 2, "wider": 4}
    assert [index_width(gap) for gap in (0, 255, 256, 65_535, 65_536, 2**32 - 1, 2**32)] == [1, 1, 2, 2, 4, 4, 8]
    assert bits_equal(apply_delta(base, encode_delta(base, new)), new)


def test_options_change_the_level_not_the_result() -> None:
    base = make_weights(4, torch.bfloat16)
    new = perturb(base, 0.05, seed=5)
    default = encode_delta(base, new)
    assert encode_delta(base, new, options=DeltaOptions(threads=3)) == default  # threads never change bytes
    strong = encode_delta(base, new, options=DeltaOptions(level=19))
    assert bits_equal(apply_delta(base, strong), new)
    with pytest.raises(ValueError):
        DeltaOptions(level=0)


def test_known_base_hash_skips_nothing_that_matters() -> None:
    base = make_weights(6, torch.float32)
    new = perturb(base, 0.01, seed=7)
    base_hash = weights_hash(base)
    delta = encode_delta(base, new, base_hash=base_hash)
    assert delta == encode_delta(base, new)
    assert bits_equal(apply_delta(base, delta, base_hash=base_hash), new)
    with pytest.raises(DeltaBaseMismatchError):  # a claimed hash that is not the DELTA's base
        apply_delta(base, delta, base_hash=weights_hash(new))
    with pytest.raises(DeltaFormatError, match="64 lowercase hex"):
        encode_delta(base, new, base_hash="abc")


def test_wrong_base_is_refused_before_anything_changes() -> None:
    base = make_weights(8, torch.float32)
    new = perturb(base, 0.01, seed=9)
    delta = encode_delta(base, new)
    other = perturb(base, 0.01, seed=10)
    target = copy(other)
    with pytest.raises(DeltaBaseMismatchError, match="nothing was changed"):
        apply_delta_in_place(target, delta)
    assert bits_equal(target, other)
    # A caller that vouches for the wrong weights: the result hash catches it and the originals come back.
    with pytest.raises(DeltaBaseMismatchError):
        apply_delta_in_place(target, delta, base_hash=weights_hash(base))
    assert bits_equal(target, other)
    with pytest.raises(DeltaBaseMismatchError, match="lack tensors"):
        apply_delta({k: v for k, v in base.items() if k != "scale"}, delta)
    with pytest.raises(DeltaBaseMismatchError, match="float16"):
        apply_delta(base | {"scale": base["scale"].half()}, delta)
    with pytest.raises(DeltaBaseMismatchError, match="base has"):
        apply_delta(base | {"block.0.bias": torch.zeros(49)}, delta)


@pytest.mark.parametrize(
    "change",
    ["added", "removed", "shape", "dtype"],
)
def test_layout_changes_need_a_full_payload(change: str) -> None:
    base = make_weights(11, torch.float32)
    new = copy(base)
    if change == "added":
        new["extra"] = torch.zeros(3)
    elif change == "removed":
        del new["scale"]
    elif change == "shape":
        new["block.0.bias"] = torch.zeros(49)
    else:
        new["block.0.bias"] = new["block.0.bias"].to(torch.bfloat16)
    with pytest.raises(DeltaShapeError, match="send a FULL payload"):
        encode_delta(base, new)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.uint8, torch.bool, torch.float64])
def test_non_float_tensors_are_refused(dtype: torch.dtype) -> None:
    base = make_weights(12, torch.float32) | {"counter": torch.zeros(3, dtype=dtype)}
    with pytest.raises(DeltaDtypeError, match="counter"):
        encode_delta(base, copy(base))
    with pytest.raises(DeltaDtypeError):
        weights_hash(base)
    delta = encode_delta(make_weights(12, torch.float32), make_weights(13, torch.float32))
    with pytest.raises(DeltaDtypeError):
        apply_delta(base, delta)


def test_sparse_tensors_are_refused_by_name() -> None:
    """A sparse tensor passed the dtype and device checks, then failed reading its bits (RuntimeError, or
    NotImplementedError from encode_full): not the named error the API promises."""
    dense = {"w": torch.zeros(4)}
    sparse = {"w": torch.zeros(4).to_sparse()}
    delta = encode_delta(dense, {"w": torch.ones(4)})
    calls = [lambda: weights_hash(sparse), lambda: encode_full(sparse), lambda: encode_delta(sparse, dense)]
    calls += [lambda: encode_delta(dense, sparse), lambda: apply_delta(sparse, delta)]
    for call in calls:
        with pytest.raises(DeltaDtypeError, match=r"'w' is a torch.sparse_coo tensor; .* carry dense tensors"):
            call()


def test_in_place_needs_contiguous_targets() -> None:
    base = {"w": torch.zeros(4, 6)}
    new = {"w": torch.ones(4, 6)}
    delta = encode_delta(base, new)
    target = {"w": torch.zeros(6, 4).t()}
    with pytest.raises(DeltaDtypeError, match="contiguous"):
        apply_delta_in_place(target, delta)
    assert bits_equal(apply_delta(target, delta), new)  # the copying variant takes any layout


def test_parameters_and_tied_weights_update_in_place() -> None:
    layer = torch.nn.Linear(8, 8)
    state = {"a": layer.weight, "b": layer.weight, "bias": layer.bias}  # two names, one storage
    base = {name: tensor.detach().clone() for name, tensor in state.items()}
    new = copy(base)
    new["a"][0, :3] = 1.0
    new["b"][0, :3] = 1.0
    apply_delta_in_place(state, encode_delta(base, new))
    assert layer.weight.requires_grad and bits_equal({k: v.detach() for k, v in state.items()}, new)
    assert math.isclose(float(layer.weight.detach()[0, 0]), 1.0)


def test_interrupted_apply_restores_the_target() -> None:
    base = make_weights(14, torch.bfloat16)
    new = perturb(base, 0.2, seed=15)
    delta = encode_delta(base, new)
    target = copy(base)
    with (
        mock.patch("ml8s.deltas.apply.weights_hash", side_effect=KeyboardInterrupt),
        pytest.raises(KeyboardInterrupt),
    ):
        apply_delta_in_place(target, delta, base_hash=weights_hash(base))  # interrupted after the writes
    assert bits_equal(target, base)
