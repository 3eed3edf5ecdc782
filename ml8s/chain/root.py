"""The pinned trust root: the keys (and how many of them) a verifier trusts before it reads the store.

Everything in the store can be written by whoever can write the store, the chain's trust policies
included, so trust cannot start there: a self-signed first policy is trust on first use, and an
attacker who writes ``trust/`` before the operator (or rewrites it later) decides which keys sign.
As TUF pins a root in the client, every verifier (``chain verify``, followers, ``predict --chain``,
the audit, warm starts) is given a root from outside the store: ``CHAIN_TRUST_ROOT``, a path to a
JSON file (or the JSON itself), written once by ``ml8s chain root`` from public keys held offline::

    {"keys": [{"key_id": "<sha256 hex of the raw key>", "public_key": "<base64 raw ed25519>"}, ...],
     "threshold": 2}

The store's policies are accepted only when policy 1 is signed by ``threshold`` of these keys (and by
a threshold of its own), and each later policy by a threshold of the previous policy's keys, or of the
root's (a re-issue after a compromise), and of its own (trust.py). The root's id, the sha256 of its
canonical JSON, is bound into every policy, block header and anchor signed under it.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Iterable
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError, model_validator

from ml8s.chain.signing import key_id, signature_valid
from ml8s.errors import ConfigError
from ml8s.identity.hashing import canonical_bytes
from ml8s.store.operator_files import read_operator_file

_FROZEN = ConfigDict(extra="forbid", frozen=True)
Hex64 = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]
ENV_TRUST_ROOT = "CHAIN_TRUST_ROOT"
MAX_ROOT_BYTES = 1024 * 1024  # a root lists keys: anything larger is not one (and never read whole)


class TrustedKey(BaseModel):
    model_config = _FROZEN

    key_id: Hex64
    public_key: str  # base64 of the raw 32-byte ed25519 public key


class KeySignature(BaseModel):
    """One key's ed25519 signature (hex) over a policy's canonical bytes."""

    model_config = _FROZEN

    key_id: Hex64
    signature: Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{128}$")]


class TrustRoot(BaseModel):
    """Keys trusted before anything is read, and how many must sign a policy (module docstring)."""

    model_config = _FROZEN

    keys: tuple[TrustedKey, ...] = Field(min_length=1)
    threshold: int = Field(ge=1)

    @model_validator(mode="after")
    def _consistent(self) -> TrustRoot:
        ids = [k.key_id for k in self.keys]
        if ids != sorted(set(ids)):
            raise ValueError("keys must be sorted by key_id and unique")
        if self.threshold > len(self.keys):
            raise ValueError(f"threshold {self.threshold} exceeds the {len(self.keys)} key(s)")
        for key in self.keys:
            if trusted_key(key.public_key).key_id != key.key_id:
                raise ValueError(f"key_id {key.key_id} is not the sha256 of its public key")
        return self

    @property
    def root_id(self) -> str:
        """sha256 hex of the root's canonical JSON: what policies, headers and anchors bind."""
        return hashlib.sha256(canonical_bytes(self.model_dump(mode="json"))).hexdigest()


def trusted_key(public_key: str) -> TrustedKey:
    """A key entry from a base64 raw ed25519 public key; ConfigError when it is not one."""
    try:
        raw = base64.b64decode(public_key, validate=True)
    except ValueError as exc:  # binascii.Error, or a character outside ASCII ('ÿ', a lone surrogate)
        raise ConfigError(f"public key {public_key!r}: not base64") from exc
    if len(raw) != 32:
        raise ConfigError(f"public key {public_key!r}: {len(raw)} bytes, expected 32 (raw ed25519)")
    return TrustedKey(key_id=key_id(raw), public_key=public_key)


def make_root(public_keys: Iterable[str], threshold: int) -> TrustRoot:
    keys = tuple(sorted({trusted_key(k) for k in public_keys}, key=lambda k: k.key_id))
    try:
        return TrustRoot(keys=keys, threshold=threshold)
    except ValidationError as exc:
        raise ConfigError(f"trust root: {exc.errors()[0]['msg']}") from exc


def signers(keys: Iterable[TrustedKey], signatures: Iterable[KeySignature], data: bytes) -> set[str]:
    """The ids of ``keys`` with a valid signature over ``data`` among ``signatures`` (each key counted once)."""
    by_id = {k.key_id: k for k in keys}
    return {
        s.key_id
        for s in signatures
        if (key := by_id.get(s.key_id)) is not None and signature_valid(key.public_key, s.signature, data)
    }


def load_root(setting: str, *, where: str = ENV_TRUST_ROOT) -> TrustRoot | None:
    """The root ``setting`` gives: JSON (starting with ``{``) or a path to a JSON file; None when empty."""
    text = setting.strip()
    if not text:
        return None
    if text.startswith("{"):
        data = text.encode("utf-8")
    else:
        data = read_operator_file(text, setting=where, expected="a trust root file", max_bytes=MAX_ROOT_BYTES)
        where = f"{where}={text}"
    try:
        return TrustRoot.model_validate_json(data)
    except ValidationError as exc:
        raise ConfigError(f"{where} is no trust root (keys and threshold): {exc.errors()[0]['msg']}") from exc


def root_json(root: TrustRoot) -> bytes:
    """A root file's bytes (what ``ml8s chain root`` writes)."""
    return canonical_bytes(root.model_dump(mode="json")) + b"\n"
