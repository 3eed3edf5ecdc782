"""Capture and restore the full state of a training: optimizer tensors, every RNG, counters, the sampler.

Written by training as ``model/training_state.safetensors`` (``ml8s.contract.training_state`` describes it);
read back by a warm start, which continues exactly where its parent stopped: same Adam moments and step,
same random streams, same sampler position.
"""

from __future__ import annotations

import base64
import binascii
import random

import numpy as np
import safetensors
import safetensors.torch
import torch

from ml8s.contract.training_state import METADATA_KEY, RngStates, TrainingState
from ml8s.errors import LineageError
from ml8s.identity.hashing import canonical_bytes
from ml8s.lineage.state import read_training_state

_MOMENTS = ("exp_avg", "exp_avg_sq", "step")


def began_rng(seed: int) -> RngStates:
    """Every RNG as ``seed_everything(seed)`` leaves it: torch's CPU generator as it stands (just seeded), Python's
    and numpy's made from the seed (fresh generators), not read from the globals, which anything else in the
    process may move at any time (a retry's jitter in another thread draws from ``random``). :func:`capture_rng`
    keeps Python's and numpy's from here: training draws nothing from them."""
    _kind, keys, pos, has_gauss, cached = np.random.RandomState(seed).get_state(legacy=True)
    _version, internal, gauss = random.Random(seed).getstate()
    return RngStates(
        torch_cpu=_b64(torch.get_rng_state()),
        torch_cuda=[],
        numpy_keys=[int(k) for k in keys],
        numpy_pos=int(pos),
        numpy_has_gauss=int(has_gauss),
        numpy_cached_gaussian=float(cached),
        python=[int(v) for v in internal],
        python_gauss=gauss,
    )


def capture_rng(device: torch.device, began: RngStates) -> RngStates:
    """Every RNG training touches, as training ends: torch's as they stand now, Python's and numpy's as training
    began (``began``: :func:`began_rng` for a cold start, the restored parent's for a warm one), so that the same
    run gives the same bytes whatever else in the process draws from the globals meanwhile."""
    cuda = [_b64(s) for s in torch.cuda.get_rng_state_all()] if device.type == "cuda" else []
    return began.model_copy(update={"torch_cpu": _b64(torch.get_rng_state()), "torch_cuda": cuda})


def restore_rng(states: RngStates, device: torch.device) -> None:
    """Put every RNG back as ``capture_rng`` saw it (CUDA states only on a CUDA device)."""
    torch.set_rng_state(_tensor(states.torch_cpu))
    if device.type == "cuda" and states.torch_cuda:
        torch.cuda.set_rng_state_all([_tensor(s) for s in states.torch_cuda])
    keys = np.array(states.numpy_keys, dtype=np.uint32)
    np.random.set_state(("MT19937", keys, states.numpy_pos, states.numpy_has_gauss, states.numpy_cached_gaussian))
    random.setstate((3, tuple(states.python), states.python_gauss))


def state_bytes(model: torch.nn.Module, optimizer: torch.optim.Optimizer, state: TrainingState) -> bytes:
    """The safetensors file: Adam's tensors per named parameter, the state as the one metadata entry."""
    by_param = dict(zip((id(p) for p in model.parameters()), (n for n, _ in model.named_parameters()), strict=True))
    tensors: dict[str, torch.Tensor] = {}
    for group in optimizer.param_groups:
        for param in group["params"]:
            slots = optimizer.state.get(param, {})
            for slot in _MOMENTS:
                if slot in slots:
                    value = slots[slot]
                    tensor = value if isinstance(value, torch.Tensor) else torch.tensor(float(value))
                    tensors[f"adam.{slot}.{by_param[id(param)]}"] = tensor.detach().to("cpu").contiguous()
    metadata = {METADATA_KEY: canonical_bytes(state.model_dump(mode="json")).decode("utf-8")}
    return safetensors.torch.save(dict(sorted(tensors.items())), metadata=metadata)


def read_state(data: bytes, where: str) -> tuple[TrainingState, dict[str, torch.Tensor]]:
    """The state and the optimizer tensors of a ``training_state.safetensors``.

    Raises:
        LineageError: the bytes are not a training state this version can continue from.
    """
    state = read_training_state(data, where)
    try:
        tensors = safetensors.torch.load(data)
    except (safetensors.SafetensorError, ValueError) as exc:
        raise LineageError(f"{where}: the optimizer tensors are unreadable: {exc}") from exc
    return state, tensors


def load_optimizer(
    model: torch.nn.Module, optimizer: torch.optim.Optimizer, tensors: dict[str, torch.Tensor], where: str
) -> None:
    """Give every parameter the Adam state its parent's file holds (the parameters must be the same)."""
    for name, param in model.named_parameters():
        slots = {slot: tensors.get(f"adam.{slot}.{name}") for slot in _MOMENTS}
        if any(value is None for value in slots.values()):
            raise LineageError(f"{where} holds no Adam state for parameter {name!r}; expected the parent's optimizer")
        moments = {slot: value.to(param.device) for slot, value in slots.items() if value is not None}
        if moments["exp_avg"].shape != param.shape or moments["exp_avg_sq"].shape != param.shape:
            raise LineageError(
                f"{where}: the Adam state of {name!r} has shape {tuple(moments['exp_avg'].shape)}; expected "
                f"{tuple(param.shape)} (a warm start needs the parent's architecture)"
            )
        moments["step"] = moments["step"].to("cpu")  # Adam keeps its step on the CPU unless capturable
        optimizer.state[param] = moments


def _b64(tensor: torch.Tensor) -> str:
    return base64.b64encode(tensor.cpu().numpy().tobytes()).decode("ascii")


def _tensor(text: str) -> torch.Tensor:
    try:
        raw = base64.b64decode(text, validate=True)
    except binascii.Error as exc:
        raise LineageError(f"an RNG state in the training state is not base64: {exc}") from exc
    return torch.frombuffer(bytearray(raw), dtype=torch.uint8)
