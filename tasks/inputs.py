"""The training workflow's typed inputs: one per user-level variable, plus two platform settings.

Every input can be left unset, and an unset input takes the environment, then the variable's default
(SPEC §4: the canonical config is the same whether a value comes from an input or the environment).
Numbers, booleans and text are ``Optional[T] = None``: None is unset. Choices (MODEL_FORMAT, TRAIN_DEVICE)
are an enum of the allowed values plus ``env``, its default, so ``--help`` lists them.

A typed value becomes the text a user would have put in the environment (:func:`input_text`), and from
there bootstrap resolves and validates it exactly like an environment value, naming the input it came from.
A float input whose value is a whole number is written as the integer (``--learning_rate 1`` is
``LEARNING_RATE=1``, the spelling of SAMPLER_ALPHA's default ``1``): the normalization of SPEC §2 keeps
integers and floats apart, and a float input cannot tell ``1`` from ``1.0``; the integer is the spelling
every documented value and default uses.

``pyflyte run`` of flytekit 1.16 reads optional inputs loosely (``--epochs ten`` reaches the task, and a
boolean in ``--inputs-file`` is dropped or breaks the command line): ``tasks.pyflyte_cli`` fixes both.
"""

from __future__ import annotations

import enum

UNSET = "env"
"""The value of a choice input that is not given: take the environment variable, else its default."""


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


def input_text(value: InputValue | None) -> str:
    """The environment-style text of one input; ``""`` when it is unset (None, an ``env`` member, or ``""``).

    Example:
        >>> [input_text(v) for v in (None, 3, 0.25, 1.0, False, ModelFormat.ONNX, ModelFormat.ENV, "s3://b/p")]
        ['', '3', '0.25', '1', 'false', 'onnx', '', 's3://b/p']
    """
    if value is None:
        return ""
    if isinstance(value, enum.Enum):
        text = str(value.value)
        return "" if text == UNSET else text
    if isinstance(value, bool):  # before int: bool is an int
        return "true" if value else "false"
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() and abs(value) < 2**53 else repr(value)
    return str(value)
