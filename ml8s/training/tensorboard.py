"""Per-run TensorBoard events, written after training from the recorded curve.

The events file carries the wall-clock time each epoch ended (ml8s.training.epochs), so it is a log, not an
artifact: it sits under ``logs/``, is never checksummed nor hashed, and has a fixed file name (TensorBoard finds
any file whose name contains ``tfevents``). The chain uploads it to ``tensorboard/v{counter:010d}/`` only once the
version's commit has won.
"""

from __future__ import annotations

import glob
import os
import shutil
import time
from collections.abc import Mapping, Sequence

from ml8s.contract.epochs import EpochRecord
from ml8s.tempdirs import owned_tempdir

EVENTS_NAME = "events.out.tfevents.ml8s-train"


def write_training_events(path: str, epochs: Sequence[EpochRecord], metrics: Mapping[str, float]) -> None:
    """Per epoch ``train/loss`` and, where evaluated, ``heldout_epoch/log_loss`` and ``heldout_epoch/accuracy``,
    at the time each epoch ended (now, where training recorded none); the final held-out metrics
    (``heldout/*``) at the last epoch."""
    # Imported here, once training has let go of its held-out temporaries: TensorBoard (and boto3, which its
    # file layer loads) is 12 MiB that training's peak, its rows resident, need not carry.
    from torch.utils.tensorboard import SummaryWriter

    now = time.time()
    with owned_tempdir("ml8s-tb-") as tmp:
        writer = SummaryWriter(log_dir=tmp)
        for record in epochs:
            walltime = record.time_ms / 1000 if record.time_ms is not None else now
            writer.add_scalar("train/loss", record.train_loss, global_step=record.epoch, walltime=walltime)
            for name, value in (("log_loss", record.held_out_log_loss), ("accuracy", record.held_out_accuracy)):
                if value is not None:
                    writer.add_scalar(f"heldout_epoch/{name}", value, global_step=record.epoch, walltime=walltime)
        last = epochs[-1] if epochs else None
        step = last.epoch if last else 0
        end = last.time_ms / 1000 if last and last.time_ms is not None else now
        for name, value in sorted(metrics.items()):
            writer.add_scalar(f"heldout/{name}", value, global_step=step, walltime=end)
        writer.close()
        (events,) = glob.glob(os.path.join(tmp, "events.out.tfevents.*"))
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        shutil.move(events, path)
