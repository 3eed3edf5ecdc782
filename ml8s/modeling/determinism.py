"""Every switch that makes torch training bit-reproducible (SPEC §4), in one place."""

from __future__ import annotations

import os
import random

import numpy as np
import torch

from ml8s.errors import ConfigError

CUBLAS_WORKSPACE_CONFIG = ":4096:8"


def seed_everything(seed: int, device: str) -> torch.device:
    """Seed every RNG, force deterministic kernels and return the device to train on.

    CPU training runs on one thread: float reductions split across threads may sum in another
    order on a machine with another core count, and the bytes must not depend on the machine.
    """
    os.environ["CUBLAS_WORKSPACE_CONFIG"] = CUBLAS_WORKSPACE_CONFIG  # read by cuBLAS at CUDA init
    if device == "cuda" and not torch.cuda.is_available():
        raise ConfigError("TRAIN_DEVICE='cuda' but no CUDA device is available here; expected cpu or a GPU node")
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    if device == "cuda":
        torch.cuda.manual_seed_all(seed)
        return torch.device("cuda")
    torch.set_num_threads(1)
    return torch.device("cpu")


def flags(device: str) -> dict[str, object]:
    """What training_metadata.json records about the determinism settings."""
    return {
        "cublas_workspace_config": CUBLAS_WORKSPACE_CONFIG,
        "cudnn_benchmark": False,
        "cudnn_deterministic": True,
        "device": device,
        "torch_num_threads": 1 if device == "cpu" else None,
        "use_deterministic_algorithms": True,
    }
