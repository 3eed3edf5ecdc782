"""Training never loads torch.compile's stack, and its Adam is torch's, bit for bit.

torch's optimizer methods and ``torch.use_deterministic_algorithms`` import TorchDynamo and Inductor on first
use (1.4 CPU seconds and about 60 MiB in every training process); ml8s calls what they wrap instead
(ml8s/training/optim.py, ml8s/modeling/determinism.py). These tests fail if a torch upgrade, or a new code
path, brings the import back, or if the arithmetic moves.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import torch

from ml8s.training.optim import Adam, adam

REPO = Path(__file__).resolve().parent.parent

_WHOLE_RUN = """
import json, sys
from ml8s.pipeline.run import run_pipeline
env = {"DATA_ROOT": sys.argv[1], "TARGET_COLUMN": "churned", "PIPELINE_ROOT_URI": sys.argv[2], "EPOCHS": "2"}
manifest = json.loads(run_pipeline(env))
import torch
loaded = sorted(m for m in ("torch._dynamo", "torch._inductor") if m in sys.modules)
print(json.dumps([loaded, torch.are_deterministic_algorithms_enabled(), manifest["run_id"]]))
"""


def test_a_whole_run_loads_neither_dynamo_nor_inductor_and_stays_deterministic(
    small_data: Path, tmp_path: Path
) -> None:
    argv = [sys.executable, "-c", _WHOLE_RUN, str(small_data), str(tmp_path / "root")]
    done = subprocess.run(argv, capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 0, done.stderr[-3000:]
    loaded, deterministic, run_id = json.loads(done.stdout.strip().splitlines()[-1])
    assert loaded == [] and deterministic is True and len(run_id) == 12


_INDUCTOR = """
import json, sys, torch
if sys.argv[1] == "before":
    import torch._inductor.config
from ml8s.modeling.determinism import seed_everything
seed_everything(3, "cpu")
import torch._inductor.config as inductor  # a plug-in that compiles imports it after seeding, or before
print(json.dumps([torch.are_deterministic_algorithms_enabled(), inductor.deterministic]))
"""


def test_inductor_gets_the_deterministic_flag_whenever_it_is_imported() -> None:
    for when in ("before", "after"):
        done = subprocess.run([sys.executable, "-c", _INDUCTOR, when], capture_output=True, text=True, cwd=REPO)
        assert done.returncode == 0, done.stderr[-3000:]
        assert json.loads(done.stdout) == [True, True], when


def _trained(optimizer_class: type[torch.optim.Adam], **options: object) -> tuple[list[torch.Tensor], list[float]]:
    torch.manual_seed(11)
    model = torch.nn.Sequential(torch.nn.Linear(7, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
    optimizer = optimizer_class(model.parameters(), lr=0.05, **options)
    x, y = torch.randn(64, 7), torch.randint(0, 3, (64,))
    losses = []
    for step in range(25):

        def closure(to_none: bool = step % 2 == 0) -> float:
            optimizer.zero_grad(set_to_none=to_none)  # both ways of clearing gradients
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            return float(loss)

        losses.append(optimizer.step(closure))
    moments = [t for p in model.parameters() for t in optimizer.state[p].values()]
    return [p.detach().clone() for p in model.parameters()] + moments, losses


def test_the_adam_is_torchs_bit_for_bit() -> None:
    for options in ({}, {"weight_decay": 0.01, "amsgrad": True}):
        ours, our_losses = _trained(Adam, **options)
        theirs, their_losses = _trained(torch.optim.Adam, **options)
        assert our_losses == their_losses
        assert len(ours) == len(theirs) and all(torch.equal(a, b) for a, b in zip(ours, theirs, strict=True))


def test_the_adam_keeps_torchs_interface() -> None:
    first, second = torch.nn.Linear(2, 2), torch.nn.Linear(2, 1)
    optimizer = adam(first.parameters(), 0.1)
    assert isinstance(optimizer, torch.optim.Adam) and optimizer.defaults["capturable"] is False
    optimizer.add_param_group({"params": list(second.parameters()), "lr": 0.5})
    assert [group["lr"] for group in optimizer.param_groups] == [0.1, 0.5]
    second(first(torch.ones(3, 2))).sum().backward()
    assert optimizer.step() is None and torch.is_grad_enabled()  # grad mode is restored after the step
    assert all(optimizer.state[p]["step"].item() == 1.0 for p in (*first.parameters(), *second.parameters()))
    optimizer.zero_grad(set_to_none=False)
    assert all(p.grad is not None and not p.grad.any() for p in first.parameters())
