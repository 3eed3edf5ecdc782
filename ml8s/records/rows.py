"""Turning caller rows into record bytes: shape and target checks, little-endian float32, hashed while written."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator

import numpy as np
from numpy.typing import NDArray
from pydantic import BaseModel, ConfigDict

from ml8s.errors import RecordsFormatError
from ml8s.records.schema import RECORD_DTYPE, RecordSchema

Rows = NDArray[np.float32] | Iterable[NDArray[np.float32]]
"""One ``(n, n_features + 1)`` float32 array, or an iterator of such chunks (streamed, never held whole)."""


class SpooledRecords(BaseModel):
    """A local file of records ready to upload, with what was hashed while writing it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    path: str
    rows: int
    size: int
    sha256: str


def spool_rows(schema: RecordSchema, rows: Rows, path: str) -> SpooledRecords:
    """Write ``rows`` to ``path`` as raw records and return their count, byte size and sha256.

    Raises:
        RecordsFormatError: a chunk is not a 2-D float32 array of ``n_features + 1`` columns, a target is not
            a class index of ``schema``, or there are no rows at all (an empty generation could not be sampled).
    """
    digest = hashlib.sha256()
    count = size = 0
    with open(path, "wb") as handle:
        for number, chunk in enumerate(_chunks(rows)):
            records = _as_records(schema, chunk, number)
            data = records.tobytes()
            handle.write(data)
            digest.update(data)
            count += records.shape[0]
            size += len(data)
    if count == 0:
        raise RecordsFormatError("no rows to append: expected at least one record in the generation")
    return SpooledRecords(path=path, rows=count, size=size, sha256=digest.hexdigest())


def _chunks(rows: Rows) -> Iterator[NDArray[np.float32]]:
    if isinstance(rows, np.ndarray):
        yield rows
    else:
        yield from rows


def _as_records(schema: RecordSchema, chunk: object, number: int) -> NDArray[np.float32]:
    where = f"rows chunk {number}"
    if not isinstance(chunk, np.ndarray) or chunk.dtype.kind != "f" or chunk.dtype.itemsize != RECORD_DTYPE.itemsize:
        found = chunk.dtype if isinstance(chunk, np.ndarray) else type(chunk).__name__
        raise RecordsFormatError(f"{where} is {found}; expected a float32 numpy array")
    if chunk.ndim != 2 or chunk.shape[1] != schema.columns:
        raise RecordsFormatError(
            f"{where} has shape {chunk.shape}; expected (rows, {schema.columns}): {schema.n_features} features "
            f"then the target {schema.target_name!r}"
        )
    records: NDArray[np.float32] = np.ascontiguousarray(chunk, dtype=RECORD_DTYPE)
    target = records[:, schema.n_features]
    valid = np.isfinite(target) & (target >= 0) & (target < len(schema.class_names)) & (target == np.floor(target))
    if not bool(valid.all()):
        bad = int(np.flatnonzero(~valid)[0])
        raise RecordsFormatError(
            f"{where} row {bad}: target {schema.target_name!r} is {target[bad]!r}; expected a class index "
            f"0..{len(schema.class_names) - 1}"
        )
    return records
