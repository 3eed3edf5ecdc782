"""How a column whose only feature is its ``{column}__missing`` indicator is read: present or missing, as
training read the column's cells.

Such a column was numeric or boolean in training (a categorical column has no indicator), and the schema keeps
no kind for it. Training read a numeric column's stray text as missing; read as text, as before, it was
present, and the indicator was 0 where training had made it 1. When the schema records stray text of the
column (a ``NUMERIC_COLUMN_STRAY_TEXT`` warning) the column was numeric, and is read as one. Otherwise the
schema cannot say which: a number and a ``true``/``false`` (any case) are present, being values of one of the
two kinds, and other text is missing, as a numeric column's stray text is (a boolean column would refuse it,
but nothing tells that the column was one).
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from ml8s.data.columns import Column, present_text, text_column

_BOOLEANS = pa.array(["false", "true"], pa.string())


def presence_column(name: str, cells: pa.Array, *, numeric: bool) -> Column:
    """The text ``cells`` of an indicator-only column as a numeric column whose missing values are the cells
    training read as missing; ``numeric``: the column is known to have been numeric.

    Raises:
        DataError: a number that is not finite (training refuses it in either kind).
    """
    if not numeric:  # a boolean's spelling stands for a value: a number the numeric rule reads as present
        text = present_text(cells)
        spelled = pc.fill_null(pc.is_in(pc.utf8_lower(text), value_set=_BOOLEANS), False)
        cells = pc.if_else(spelled, pa.scalar("0", pa.string()), text)
    return text_column(name, "numeric", cells)
