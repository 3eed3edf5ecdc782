"""Reading a version's training state without torch (bootstrap and verification stay torch-free)."""

from __future__ import annotations

from pydantic import ValidationError

from ml8s.contract.training_state import METADATA_KEY, TrainingState
from ml8s.errors import LineageError
from ml8s.identity.hashing import json_loads
from ml8s.text import first_problem


def read_training_state(data: bytes, where: str) -> TrainingState:
    """The :class:`TrainingState` a ``training_state.safetensors`` holds in its header's metadata.

    Raises:
        LineageError: the bytes are no safetensors header with a valid ``ml8s.training_state`` entry.
    """
    try:
        metadata = _metadata(data)
        text = metadata[METADATA_KEY]
        return TrainingState.model_validate_json(text)
    except KeyError:
        raise LineageError(f"{where} has no {METADATA_KEY} metadata entry; expected a training state") from None
    except ValidationError as exc:
        raise LineageError(f"{where} holds no valid training state: {first_problem(exc)}") from exc
    except ValueError as exc:
        raise LineageError(f"{where} is not a safetensors training state: {exc}") from exc


def _metadata(data: bytes) -> dict[str, str]:
    if len(data) < 8:
        raise ValueError(f"{len(data)} bytes, shorter than a safetensors header length")
    size = int.from_bytes(data[:8], "little")
    if size > len(data) - 8:
        raise ValueError(f"a header of {size} bytes in a file of {len(data)}")
    try:
        header = json_loads(data[8 : 8 + size])
    except ValueError as exc:
        raise ValueError(f"the header is not JSON ({exc})") from exc
    meta = header.get("__metadata__") if isinstance(header, dict) else None
    if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
        raise ValueError("the header has no __metadata__ of strings")
    return {str(k): v for k, v in meta.items()}
