"""Run identity (SPEC §2): canonical config + data fingerprint -> FULL_CONFIG_HASH -> RUN_ID."""

from __future__ import annotations

import hashlib
import json

import pydantic
from pydantic import BaseModel, ConfigDict

from ml8s.identity.variables import CANONICALIZATION_VERSION, CanonicalConfig, JsonValue, canonical_json


class RunIdentity(BaseModel):
    """Everything that names a run (``ml8s.contract.ConfigSnapshot.of`` records it in ``config_snapshot.json``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    canonical_config: dict[str, JsonValue]
    canonical_json: str
    data_fingerprint: str
    hashed_fingerprint: str
    full_config_hash: str
    run_id: str
    canonicalization_version: str = CANONICALIZATION_VERSION


def full_config_hash(canonical: str, data_fingerprint: str) -> str:
    """``sha256(CANONICAL_JSON + "\\n" + DATA_FINGERPRINT)``, lowercase hex."""
    return hashlib.sha256((canonical + "\n" + data_fingerprint).encode("utf-8")).hexdigest()


def compute_identity(config: CanonicalConfig, data_fingerprint: str, *, strict: bool = True) -> RunIdentity:
    """Identity of a run. Non-strict identity hashes an empty fingerprint (config alone)."""
    text = canonical_json(config)
    hashed = data_fingerprint if strict else ""
    full = full_config_hash(text, hashed)
    return RunIdentity(
        canonical_config=config,
        canonical_json=text,
        data_fingerprint=data_fingerprint,
        hashed_fingerprint=hashed,
        full_config_hash=full,
        run_id=full[:12],
    )


def canonical_bytes(obj: object) -> bytes:
    """Deterministic JSON bytes for artifacts: sorted keys, 2-space indent, trailing newline."""
    return (json.dumps(obj, sort_keys=True, indent=2, ensure_ascii=False, allow_nan=False) + "\n").encode("utf-8")


def json_loads(data: bytes | str) -> object:
    """``json.loads``, where JSON nested deeper than Python's parser can follow (``[[[[…`` in a damaged or planted
    file) is a ValueError like any other malformed JSON, not a RecursionError that no caller expects."""
    try:
        value: object = json.loads(data)
    except RecursionError as exc:
        raise ValueError(f"JSON nested too deeply to parse ({exc})") from None
    return value


def json_object(data: bytes | str) -> dict[str, pydantic.JsonValue]:
    """:func:`json_loads` of a record that must be a JSON object; ValueError when it is other JSON (``[]``, ``1``)."""
    value = json_loads(data)
    if not isinstance(value, dict):
        raise ValueError(f"expected a JSON object, found a JSON {type(value).__name__}")
    return {str(key): item for key, item in value.items()}
