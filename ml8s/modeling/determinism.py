"""Every switch that makes torch training bit-reproducible (SPEC §4), in one place.

The values come from ``families.determinism_flags``, which is also what the run records and what the
verifier expects: what is set and what is recorded cannot drift apart.
"""

from __future__ import annotations

import os
import random
import sys

import numpy as np
import torch

from ml8s.errors import ConfigError
from ml8s.modeling.families import determinism_flags


def seed_everything(seed: int, device: str) -> torch.device:
    """Seed every RNG, force deterministic kernels and return the device to train on."""
    flags = determinism_flags(device)
    os.environ["CUBLAS_WORKSPACE_CONFIG"] = flags.cublas_workspace_config  # read by cuBLAS at CUDA init
    if device == "cuda" and not torch.cuda.is_available():
        raise ConfigError("TRAIN_DEVICE='cuda' but no CUDA device is available here; expected cpu or a GPU node")
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    use_deterministic_algorithms(flags.use_deterministic_algorithms)
    torch.backends.cudnn.deterministic = flags.cudnn_deterministic
    torch.backends.cudnn.benchmark = flags.cudnn_benchmark
    if flags.torch_num_threads is not None:
        torch.set_num_threads(flags.torch_num_threads)
    if device == "cuda":
        torch.cuda.manual_seed_all(seed)
        return torch.device("cuda")
    return torch.device("cpu")


def use_deterministic_algorithms(mode: bool) -> None:
    """What ``torch.use_deterministic_algorithms(mode)`` does, without importing torch.compile's stack.

    torch's function imports ``torch._inductor.config`` (and with it TorchDynamo: 1.1 CPU seconds and 60 MiB)
    only to set inductor's flag. Inductor reads that flag from ``TORCHINDUCTOR_DETERMINISTIC`` when it is
    first imported, so a plug-in that compiles later still gets deterministic kernels; if it is imported
    already, its flag is set as torch would.
    """
    os.environ["TORCHINDUCTOR_DETERMINISTIC"] = "1" if mode else "0"
    if "torch._inductor.config" in sys.modules:
        import torch._inductor.config as inductor_config

        inductor_config.deterministic = mode
    torch._C._set_deterministic_algorithms(mode, warn_only=False)
