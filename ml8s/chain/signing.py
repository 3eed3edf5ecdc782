"""ed25519 keys that sign chain blocks and trust policies (``cryptography``).

Why ed25519 over the header bytes rather than the OpenSSF model-signing format: a block header already
binds the payload (its file list carries every file's sha256 and size, and the content hash over them),
so signing the header's deterministic bytes signs the model too, with one 64-byte signature per version,
no certificate chain or transparency log to reach (commits work offline), and verification that a
follower can afford on every poll. Keys come from platform settings, never from the chain:
``ML8S_SIGNING_KEY`` (the key itself: PEM, or raw base64 of the 32-byte seed; a Kubernetes secret
mounted as an environment variable) or ``ML8S_SIGNING_KEY_FILE`` (a path to the same).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Mapping

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from ml8s.errors import ConfigError
from ml8s.store.operator_files import read_operator_file

ENV_KEY = "ML8S_SIGNING_KEY"
ENV_KEY_FILE = "ML8S_SIGNING_KEY_FILE"
KEY_MAX_BYTES = 64 * 1024  # a PEM ed25519 key is about 120 bytes
_RAW = serialization.Encoding.Raw, serialization.PublicFormat.Raw


def key_id(public_raw: bytes) -> str:
    """A public key's id: sha256 hex of its raw 32 bytes."""
    return hashlib.sha256(public_raw).hexdigest()


class SigningKey:
    """A committer's private key; ``key_id`` and ``public_key`` (raw, base64) are what a trust policy lists."""

    def __init__(self, private: Ed25519PrivateKey) -> None:
        self._private = private
        raw = private.public_key().public_bytes(*_RAW)
        self.public_key = base64.b64encode(raw).decode("ascii")
        self.key_id = key_id(raw)

    @classmethod
    def generate(cls) -> SigningKey:
        return cls(Ed25519PrivateKey.generate())

    @classmethod
    def from_text(cls, text: bytes, *, where: str) -> SigningKey:
        """A PEM (PKCS#8) ed25519 private key, or the raw 32-byte seed in base64."""
        stripped = text.strip()
        try:
            if stripped.startswith(b"-----BEGIN"):
                loaded = serialization.load_pem_private_key(stripped, password=None)
                if not isinstance(loaded, Ed25519PrivateKey):
                    raise ConfigError(f"{where}: a {type(loaded).__name__}, expected an ed25519 private key")
                return cls(loaded)
            seed = base64.b64decode(stripped, validate=True)
            if len(seed) != 32:
                raise ConfigError(f"{where}: {len(seed)} bytes after base64, expected a 32-byte ed25519 seed")
            return cls(Ed25519PrivateKey.from_private_bytes(seed))
        except (ValueError, TypeError, binascii.Error) as exc:
            raise ConfigError(f"{where}: not an ed25519 private key (PEM or base64 seed): {exc}") from exc

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> SigningKey | None:
        """The key ``ML8S_SIGNING_KEY`` holds, else the one in the file ``ML8S_SIGNING_KEY_FILE`` names; None
        when neither is set."""
        if text := env.get(ENV_KEY, ""):
            # surrogateescape: a value's bytes that are not UTF-8 (lone surrogates here) failed to encode, an
            # INTERNAL_ERROR; as the bytes they were, they are no key, and the message never echoes a secret
            return cls.from_text(text.encode("utf-8", "surrogateescape"), where=ENV_KEY)
        if path := env.get(ENV_KEY_FILE, ""):
            data = read_operator_file(
                path, setting=ENV_KEY_FILE, expected="a readable key file", max_bytes=KEY_MAX_BYTES
            )
            return cls.from_text(data, where=f"{ENV_KEY_FILE}={path}")
        return None

    def private_pem(self) -> bytes:
        return self._private.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )

    def sign(self, data: bytes) -> str:
        """The ed25519 signature of ``data``, hex."""
        return self._private.sign(data).hex()


def signature_valid(public_key: str, signature: str, data: bytes) -> bool:
    """Whether ``signature`` (hex) is ``public_key``'s (base64 raw) over ``data``; malformed input is False."""
    try:
        Ed25519PublicKey.from_public_bytes(base64.b64decode(public_key, validate=True)).verify(
            bytes.fromhex(signature), data
        )
    except (InvalidSignature, ValueError, binascii.Error):
        return False
    return True
