"""The record layout: ``n_features`` little-endian float32 features, then the target class index as float32.

A record has no header and no padding, so a file of records is ``rows × record_size`` bytes and can be
memory-mapped as a ``(rows, n_features + 1)`` float32 array directly. The schema describing it is hashed
(sha256 of its canonical JSON: sorted keys, no whitespace) so that every generation of a history can name
the exact layout it was written with.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ml8s.errors import RecordsFormatError

RECORD_DTYPE = np.dtype("<f4")
"""Every value in a record file: little-endian IEEE-754 float32, whatever the host's byte order."""

_FLOAT_BYTES = 4


class RecordSchema(BaseModel):
    """What one fixed-size record holds, in order.

    Build one with :meth:`build`; ``n_features`` and ``record_size`` are derived and checked, so a schema
    read back from JSON that contradicts itself is refused.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    feature_names: tuple[str, ...] = Field(min_length=1)
    n_features: int = Field(ge=1)
    target_name: str = Field(min_length=1)
    class_names: tuple[str, ...] = Field(min_length=1)
    dtype: Literal["<f4"] = "<f4"
    record_size: int = Field(ge=2 * _FLOAT_BYTES)

    @classmethod
    def build(cls, feature_names: Sequence[str], target_name: str, class_names: Sequence[str]) -> RecordSchema:
        """The schema of records with these features (in order), target column and classes (index order).

        Raises:
            RecordsFormatError: no features or classes, or an empty or repeated name.
        """
        n_features = len(feature_names)
        try:
            return cls(
                feature_names=tuple(feature_names),
                n_features=n_features,
                target_name=target_name,
                class_names=tuple(class_names),
                record_size=_FLOAT_BYTES * (n_features + 1),
            )
        except ValidationError as exc:
            reason = " ".join(exc.errors()[0]["msg"].split())
            raise RecordsFormatError(f"record schema for target {target_name!r}: {reason}") from exc

    @model_validator(mode="after")
    def _consistent(self) -> RecordSchema:
        if self.n_features != len(self.feature_names):
            raise ValueError(f"n_features is {self.n_features} but {len(self.feature_names)} feature names are given")
        if self.record_size != _FLOAT_BYTES * (self.n_features + 1):
            raise ValueError(f"record_size is {self.record_size}; expected 4 × (n_features + 1)")
        names = (*self.feature_names, self.target_name)
        if any(not name for name in names) or len(set(names)) != len(names):
            raise ValueError("feature and target names must be non-empty and distinct")
        if any(not name for name in self.class_names) or len(set(self.class_names)) != len(self.class_names):
            raise ValueError("class names must be non-empty and distinct")
        return self

    @property
    def columns(self) -> int:
        """Float32 values per record: the features and the target."""
        return self.n_features + 1

    def canonical_json(self) -> str:
        """Sorted keys, no whitespace, UTF-8 kept: the bytes :attr:`schema_hash` is taken of."""
        return json.dumps(self.model_dump(mode="json"), sort_keys=True, separators=(",", ":"), ensure_ascii=False)

    @property
    def schema_hash(self) -> str:
        """sha256 (hex) of :meth:`canonical_json`."""
        return hashlib.sha256(self.canonical_json().encode("utf-8")).hexdigest()
