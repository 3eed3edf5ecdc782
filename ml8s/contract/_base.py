"""The base of every model of a file a run writes: strict, frozen, one serialization.

Strict typing holds on both sides: the step that writes a file cannot coerce a value into another
JSON type by accident (an int recorded where a float was meant changes the bytes), and the verifier
that reads it FAILs a field whose JSON type changed.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from ml8s.identity.hashing import canonical_bytes


class ContractModel(BaseModel):
    """A record inside a contract file: every field typed strictly, unknown fields refused."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class ContractFile(ContractModel):
    """A whole file of the run contract."""

    def to_bytes(self) -> bytes:
        """The file's bytes: canonical JSON (sorted keys, 2-space indent, trailing newline)."""
        return canonical_bytes(self.model_dump(mode="json"))
