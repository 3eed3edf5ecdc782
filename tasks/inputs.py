"""The training workflow's typed inputs: one per user-level variable, plus two platform settings.

Every input can be left unset, and an unset input takes the environment, then the variable's default
(SPEC §4: the canonical config is the same whether a value comes from an input or the environment).
How "unset" is spelled depends on the type:

- text inputs (paths, column names, comma lists, LEARNING_RATE) default to ``""``, which the one
  priority rule of ``ml8s.identity.priority`` already reads as "not given";
- numbers and booleans are ``T | FromEnv`` defaulting to ``FromEnv.ENV`` (shown as ``env``); choices
  are an enum of the allowed values plus ``env``, its default. Not ``Optional[T] = None``: flytekit
  1.16's ``pyflyte run`` gives an optional input a union with an unchecked string, so ``--epochs ten``
  would pass the command line and fail later in flytekit's own conversion, with a traceback.
  ``int | FromEnv`` is checked by click up front: a one-line error naming ``--epochs``.

LEARNING_RATE stays text on purpose: a float input cannot tell ``1`` from ``1.0``, which the
normalization of SPEC §2 keeps apart (an integer and a float), so a typed float would give
``--learning_rate 1`` another RUN_ID than ``LEARNING_RATE=1``. TEST_SIZE can be a float: every valid value
lies strictly between 0 and 1, and Python's shortest round-trip text of such a float normalizes to the
same JSON number as any spelling of it in the environment.

A typed value becomes the text a user would have put in the environment (:func:`input_text`), and from
there bootstrap resolves and validates it exactly like an environment value, naming the input it came from.
"""

from __future__ import annotations

import enum

UNSET = "env"
"""The value of an input that is not given: take the environment variable, else its default."""


class FromEnv(enum.StrEnum):
    """The unset value of a number or boolean input."""

    ENV = UNSET


class ModelFormat(enum.StrEnum):
    """MODEL_FORMAT, or ``env``."""

    ONNX = "onnx"
    SAFETENSORS = "safetensors"
    ENV = UNSET


class TrainDevice(enum.StrEnum):
    """TRAIN_DEVICE, or ``env``."""

    CPU = "cpu"
    CUDA = "cuda"
    ENV = UNSET


InputValue = str | int | float | bool | enum.Enum

FLYTE_WORLD_SIZES = (1, 2, 4, 8)
"""The TRAIN_WORLD_SIZE values the workflow trains: one registered PyTorch task per size above 1 and device
(``tasks.train``: a task's ``nproc_per_node`` is fixed when it is declared). ``ml8s run`` takes 1..64."""


def check_flyte_world_size(world_size: int) -> None:
    """ValueError naming TRAIN_WORLD_SIZE unless the workflow has a training task for ``world_size`` ranks."""
    if world_size not in FLYTE_WORLD_SIZES:
        raise ValueError(
            f"TRAIN_WORLD_SIZE={world_size} has no training task in the Flyte workflow; expected one of "
            f"{', '.join(map(str, FLYTE_WORLD_SIZES))} (ml8s run trains any size from 1 to 64)"
        )


def input_text(value: InputValue) -> str:
    """The environment-style text of one input; ``""`` when it is unset (an ``env`` member, or ``""``).

    Example:
        >>> [input_text(v) for v in (FromEnv.ENV, 3, 0.25, False, ModelFormat.ONNX, ModelFormat.ENV, "s3://b/p")]
        ['', '3', '0.25', 'false', 'onnx', '', 's3://b/p']
    """
    if isinstance(value, enum.Enum):
        text = str(value.value)
        return "" if text == UNSET else text
    if isinstance(value, bool):  # before int: bool is an int
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    return str(value)
