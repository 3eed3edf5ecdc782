"""What ``ml8s predict`` writes: predictions as CSV, JSON or Parquet, probabilities rounded, an id passed through,
and the categories a model never saw and the stray text of numeric columns, counted (a warning each, or a refusal
with ``--strict``)."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Mapping, Sequence
from typing import Literal

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pydantic import BaseModel, ConfigDict

from ml8s.data.columns import Column, stray_cells
from ml8s.data.missing import DataWarning, stray_text_warning
from ml8s.inference.cells import Cells
from ml8s.inference.predictor import PREDICTED, PROBABILITY_PREFIX, Predictions
from ml8s.inference.transform import RawTransform

OutputFormat = Literal["csv", "json", "parquet"]
EXAMPLES = 3


class Unseen(BaseModel):
    """The values of one categorical column that no kept category names, in ``rows``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    column: str
    count: int
    examples: tuple[str, ...]
    known: tuple[str, ...]

    def message(self) -> str:
        """``column 'plan': 3 row(s) hold a category the model never saw ('gold', 'Basic'; …)``, with case hints."""
        hints = []
        for value in self.examples:
            same = [k for k in self.known if k.lower() == value.lower()]
            hints.append(f"{value!r} (did you mean {same[0]!r}?)" if same else repr(value))
        return (
            f"column {self.column!r}: {self.count} row(s) hold a category the model never saw "
            f"({', '.join(hints)}); they are predicted as an unknown category"
        )


def unseen_categories(transform: RawTransform, typed: Mapping[str, Column]) -> list[Unseen]:
    """Per categorical input column (sorted), the present values outside its kept categories, counted in the
    columns as the transform typed them (:meth:`RawTransform.typed_cells`): the values the model sees."""
    found: list[Unseen] = []
    for column in sorted(transform.inputs, key=lambda c: c.name):
        if column.kind != "categorical" or not column.categories or column.name not in typed:
            continue
        known = set(column.categories)
        outside = {v: n for v, n in typed[column.name].counts().items() if v is not None and v not in known}
        if outside:
            examples = tuple(sorted(outside)[:EXAMPLES])
            count = sum(outside.values())
            found.append(Unseen(column=column.name, count=count, examples=examples, known=column.categories))
    return found


def stray_numbers(transform: RawTransform, cells: Cells, typed: Mapping[str, Column]) -> list[DataWarning]:
    """Per numeric input column (sorted; an indicator-only one too), its cells of text that is no number, which
    the transform read as missing (:meth:`RawTransform.typed_cells` of ``cells``: training's rule for a numeric
    column's stray text), with the first few distinct ones in code point order."""
    found: list[DataWarning] = []
    for column in sorted(transform.inputs, key=lambda c: c.name):
        values = typed.get(column.name)
        if column.kind not in ("numeric", "any") or values is None or not values.missing().any():
            continue
        stray = stray_cells(cells[column.name], values)
        if len(stray):
            distinct = pc.unique(stray)
            first = pc.take(distinct, pc.array_sort_indices(distinct)[:EXAMPLES])
            numbers = len(values.values) - int(values.missing().sum())
            texts = [str(text) for text in first.to_pylist()]
            found.append(stray_text_warning(column.name, texts, numbers, cells=len(stray)))
    return found


def render(
    predictions: Predictions,
    fmt: OutputFormat,
    *,
    precision: int | None,
    id_column: str | None = None,
    ids: Sequence[object] = (),
) -> bytes:
    """The predictions in ``fmt``: an id column first when given, ``predicted_class``, one probability per class.

    ``precision`` rounds probabilities to that many decimals (None: every digit, which reads back exactly).
    """
    exact = predictions.probabilities.T.tolist()  # a list per class
    names = [f"{PROBABILITY_PREFIX}{c}" for c in predictions.classes]
    id_cells = [None if v is None else str(v) for v in ids]
    # each probability rounded once, for the formats that carry numbers (CSV text is rounded as it is formatted)
    columns = [] if fmt == "csv" else [c if precision is None else [round(p, precision) for p in c] for c in exact]
    if fmt == "parquet":
        arrays: dict[str, pa.Array] = {}
        if id_column is not None:
            arrays[id_column] = pa.array(id_cells, type=pa.string())
        arrays[PREDICTED] = pa.array(list(predictions.labels), type=pa.string())
        for name, column in zip(names, columns, strict=True):
            arrays[name] = pa.array(column, type=pa.float64())
        sink = io.BytesIO()
        pq.write_table(pa.table(arrays), sink)
        return sink.getvalue()
    if fmt == "json":
        records = []
        for n, (label, *row) in enumerate(zip(predictions.labels, *columns, strict=True)):
            record: dict[str, object] = {id_column: id_cells[n]} if id_column is not None else {}
            record[PREDICTED] = label
            record.update(zip(names, row, strict=True))
            records.append(record)
        return (json.dumps(records, ensure_ascii=False, indent=None) + "\n").encode("utf-8")
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow([*([id_column] if id_column is not None else []), PREDICTED, *names])
    # "%.Nf" is correctly rounded, as round() is: the digits of round(p, N) formatted to N places, without
    # making the rounded float first (2M rows: 0.7 s a class instead of 2.2 s)
    texts = [list(map(repr if precision is None else f"%.{precision}f".__mod__, column)) for column in exact]
    leading = [[cell or "" for cell in id_cells]] if id_column is not None else []
    writer.writerows(zip(*leading, predictions.labels, *texts, strict=True))
    return out.getvalue().encode("utf-8")
