"""Whole-column array operations made a slice of :data:`CODE_SLICE` rows at a time.

numpy indexes and counts with intp (int64) copies of an index array and makes a mask or a gathered copy of every
row it is given: at 20M rows each is 20-160 MiB of fresh memory, which the kernel faults in and zeroes every
time. A slice's temporaries are small enough to reuse heap pages instead (ml8s.memory); the results are the
whole-array operations' (tests/test_scale_memory.py).
"""

from __future__ import annotations

from typing import TypeVar

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]  # a numeric or boolean column's values (NaN = missing)
CodeArray = npt.NDArray[np.int32]  # a categorical column's codes (-1 = missing)

# Rows a pass over a column's codes takes at a time: numpy indexes and counts with intp (int64) copies of an index
# array, 160 MiB for a whole 20M-row column where a slice's copy is 1 MiB. Under glibc's mmap threshold
# (ml8s.memory) a slice's temporaries reuse heap pages; at 8 MiB each was a fresh mapping the kernel faulted in
# and zeroed, slice after slice (about 1 CPU s of the 20M-row load).
CODE_SLICE = 1 << 17


def code_counts(codes: CodeArray | FloatArray, categories: int) -> npt.NDArray[np.int64]:
    """How many rows hold each code, missing (``-1``) first: ``np.bincount(codes + 1)`` over ``categories + 1``
    slots."""
    return slot_counts(codes, categories + 1, offset=1)


def slot_counts(values: npt.NDArray[np.integer] | FloatArray, slots: int, *, offset: int = 0) -> npt.NDArray[np.int64]:
    """``np.bincount(values + offset, minlength=slots)``, counted a slice of :data:`CODE_SLICE` rows at a time."""
    counts = np.zeros(slots, dtype=np.int64)
    for start in range(0, len(values), CODE_SLICE):
        counts += np.bincount(np.asarray(values[start : start + CODE_SLICE], dtype=np.intp) + offset, minlength=slots)
    return counts


def mapped_codes(
    lut: npt.NDArray[np.int32], codes: CodeArray | FloatArray, *, out: npt.NDArray[np.int32] | None = None
) -> npt.NDArray[np.int32]:
    """``lut[codes]`` (a code of -1 takes ``lut``'s last entry), made a slice of :data:`CODE_SLICE` rows at a time,
    into ``out`` when given."""
    if out is None:
        out = np.empty(len(codes), dtype=np.int32)
    for start in range(0, len(codes), CODE_SLICE):
        out[start : start + CODE_SLICE] = lut[np.asarray(codes[start : start + CODE_SLICE], dtype=np.intp)]
    return out


_Kept = TypeVar("_Kept", bound=np.generic)


def masked_into(values: npt.NDArray[_Kept], mask: npt.NDArray[np.bool_], out: npt.NDArray[_Kept]) -> npt.NDArray[_Kept]:
    """``values[mask]`` made in the first rows of ``out`` (returned: that part), a slice of :data:`CODE_SLICE` rows
    at a time. ``np.compress(mask, values, out=out)`` would make an intp index of every row kept and a copy of
    ``out`` (at 20M rows, 256 MiB more per column); a slice's ``values[mask]`` is a small temporary that reuses
    heap pages."""
    made = 0
    for start in range(0, len(values), CODE_SLICE):
        taken = values[start : start + CODE_SLICE][mask[start : start + CODE_SLICE]]
        out[made : made + len(taken)] = taken
        made += len(taken)
    return out[:made]


def taken_into(
    values: npt.NDArray[np.integer], rows: npt.NDArray[np.integer], out: npt.NDArray[_Kept]
) -> npt.NDArray[_Kept]:
    """``values[rows]`` cast into ``out`` (as long as ``rows``), a slice of :data:`CODE_SLICE` rows at a time: no
    gathered copy of every row in ``values``' own type first."""
    for start in range(0, len(rows), CODE_SLICE):
        out[start : start + CODE_SLICE] = values[rows[start : start + CODE_SLICE]]
    return out


def first_infinite(values: FloatArray | CodeArray) -> int | None:
    """The index of the first infinite value, or None, looked for a slice of :data:`CODE_SLICE` rows at a time (no
    mask of every row)."""
    for start in range(0, len(values), CODE_SLICE):
        found = np.flatnonzero(np.isinf(values[start : start + CODE_SLICE]))
        if len(found):
            return start + int(found[0])
    return None


class Picked:
    """The rows ``mask`` keeps, as each slice's row indices (intp), made once for many :func:`picked_into` calls:
    numpy's boolean take of a slice costs about three times a take by index (at 20M rows, 0.16 s against 0.05 s
    for a float64 column; 0.07 against 0.02 for a boolean one), for 8 bytes a kept row held."""

    def __init__(self, mask: npt.NDArray[np.bool_]) -> None:
        self.mask, self.slice_rows = mask, CODE_SLICE
        self.slices = [np.flatnonzero(mask[start : start + CODE_SLICE]) for start in range(0, len(mask), CODE_SLICE)]
        self.count = sum(len(rows) for rows in self.slices)


def picked_into(values: npt.NDArray[_Kept], rows: Picked, out: npt.NDArray[_Kept]) -> npt.NDArray[_Kept]:
    """``values[rows.mask]`` made in the first rows of ``out`` (returned: that part), a slice at a time by index."""
    made = 0
    for index, chosen in enumerate(rows.slices):
        start = index * rows.slice_rows
        # mode "wrap": the indices are in range; the default ("raise") would take into a copy of ``out``
        np.take(values[start : start + rows.slice_rows], chosen, out=out[made : made + len(chosen)], mode="wrap")
        made += len(chosen)
    return out[:made]
