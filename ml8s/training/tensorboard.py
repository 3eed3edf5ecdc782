"""Per-run TensorBoard events, written after training from the recorded curve.

The events file carries wall-clock times, so it is a log, not an artifact: it sits under ``logs/``,
is never checksummed nor hashed, and has a fixed file name (TensorBoard finds any file whose name
contains ``tfevents``). The chain uploads it to ``tensorboard/v{counter:010d}/`` only once the
version's commit has won.
"""

from __future__ import annotations

import glob
import os
import shutil
from collections.abc import Mapping, Sequence

from torch.utils.tensorboard import SummaryWriter

from ml8s.tempdirs import owned_tempdir

EVENTS_NAME = "events.out.tfevents.ml8s-train"


def write_training_events(path: str, epoch_losses: Sequence[float], metrics: Mapping[str, float]) -> None:
    """One scalar per epoch (``train/loss``) and the held-out metrics (``heldout/*``) at the last epoch."""
    with owned_tempdir("ml8s-tb-") as tmp:
        writer = SummaryWriter(log_dir=tmp)
        for epoch, loss in enumerate(epoch_losses, start=1):
            writer.add_scalar("train/loss", loss, global_step=epoch, walltime=float(epoch))
        last = len(epoch_losses)
        for name, value in sorted(metrics.items()):
            writer.add_scalar(f"heldout/{name}", value, global_step=last, walltime=float(last))
        writer.close()
        (events,) = glob.glob(os.path.join(tmp, "events.out.tfevents.*"))
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        shutil.move(events, path)
