"""Run by images/smoke.sh inside the fe image: the Flyte feature task on the demo data, as a cluster runs it.

Runs ``tasks.bootstrap.bootstrap_run`` (every input left unset, i.e. taken from the environment, as
``make run`` does) and then ``tasks.features.compute_features`` locally, and copies the task's
feature_matrix.parquet to the path given. The workflows module is not imported: it names the train
image's tasks, whose imports the fe image need not satisfy.

Usage (inside the image): python smoke_fe.py OUT_PARQUET
"""

from __future__ import annotations

import enum
import shutil
import sys
import typing
from pathlib import Path

from tasks.bootstrap import bootstrap_run
from tasks.features import compute_features


def unset(kind: object) -> object:
    """The value that means "take it from the environment" for an input of type ``kind``."""
    if isinstance(kind, type) and issubclass(kind, enum.Enum):
        return kind["ENV"]
    if type(None) in typing.get_args(kind):
        return None
    raise TypeError(f"no unset value for a bootstrap input of type {kind!r}")


def main(out: str) -> None:
    inputs = {name: unset(kind) for name, kind in bootstrap_run.python_interface.inputs.items()}
    _, spec = bootstrap_run(**inputs)
    features = compute_features(spec=spec)
    shutil.copyfile(Path(features.path) / "feature_matrix.parquet", out)
    print(f"smoke_fe: {out} from {features.path}")


if __name__ == "__main__":
    main(sys.argv[1])
