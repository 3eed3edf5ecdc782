"""A run's raw-row transform, read from ``features/feature_schema.json``.

The schema lists every feature column with its rule (:mod:`ml8s.inference.rules`) and the target's classes in
their encoded order. From it, :class:`RawTransform` knows which input columns a raw row needs, of which kind,
and turns rows into the model's float32 feature matrix with the rules training used.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Literal

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import BaseModel, ConfigDict, ValidationError

from ml8s.contract.feature_schema import DataWarningRecord, MissingValues
from ml8s.data.dataset import Column, text_column
from ml8s.data.missing import STRAY_TEXT_CODE
from ml8s.errors import DataError, InferenceError, PredictionInputError
from ml8s.inference.cells import Cells, Rows, row_cells, value_cells
from ml8s.inference.presence import presence_column
from ml8s.inference.rules import BUCKETS, MAX_CATEGORIES, MISSING, OTHER, FeatureRule, encode_each

SCHEMA_VERSIONS = (1, 2)  # 2: ``categories`` recorded (MAX_FEATURES hid some kept categories)
InputKind = Literal["numeric", "boolean", "categorical", "any"]
Float32Array = npt.NDArray[np.float32]


class InputColumn(BaseModel):
    """A raw column the features are made from.

    ``kind`` ``any``: only its ``{column}__missing`` indicator was kept, so only whether a value is present
    matters (:mod:`ml8s.inference.presence`; ``numeric``: the schema records stray text of it, so it was a
    numeric column). ``categories``: the kept categories the one-hot features name. ``complete`` is False when
    MAX_FEATURES kept ``__other__`` but left out some kept categories: a value outside ``categories`` may then
    be either, and is refused rather than guessed.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    kind: InputKind
    categories: tuple[str, ...] = ()
    complete: bool = True
    numeric: bool = False


class _Target(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    column: str
    classes: tuple[str, ...]
    encoded_as: str


class _Schema(BaseModel):
    """``features/feature_schema.json`` as written by feature engineering."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_version: int
    features: tuple[FeatureRule, ...]
    target: _Target
    split: dict[str, str | int]
    dropped_columns: dict[str, str]
    rows: dict[str, int]
    rows_per_file: dict[str, int]
    missing_values: MissingValues | None = None  # absent before canonicalization 1.1.0
    warnings: tuple[DataWarningRecord, ...] = ()
    categories: dict[str, tuple[str, ...]] = {}  # schema version 2 only


class RawTransform(BaseModel):
    """Raw rows to feature matrix: the input columns, the rules in matrix column order, the class order."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    target_column: str
    classes: tuple[str, ...]
    rules: tuple[FeatureRule, ...]
    inputs: tuple[InputColumn, ...]

    @property
    def feature_names(self) -> tuple[str, ...]:
        return tuple(rule.name for rule in self.rules)

    @classmethod
    def from_schema(cls, data: bytes, where: str) -> RawTransform:
        """Parse and check a feature schema; ``where`` names it in errors.

        Raises:
            InferenceError: the bytes are not a feature schema this version can apply.
        """
        try:
            schema = _Schema.model_validate_json(data)
        except ValidationError as exc:
            first = exc.errors()[0]
            raise InferenceError(
                f"{where} is not a feature schema: {'.'.join(str(p) for p in first['loc'])}: {first['msg']}"
            ) from exc
        if schema.schema_version not in SCHEMA_VERSIONS or (schema.schema_version == 1) != (not schema.categories):
            raise InferenceError(
                f"{where} has schema_version {schema.schema_version} ({'with' if schema.categories else 'without'} "
                f"categories); expected version 1 without them or version 2 with them"
            )
        _check_rules(schema.features, where)
        classes = schema.target.classes
        if len(classes) < 2 or len(set(classes)) != len(classes):
            raise InferenceError(f"{where} lists classes {list(classes)}; expected 2 or more distinct classes")
        return cls(
            target_column=schema.target.column, classes=classes, rules=schema.features, inputs=_inputs(schema, where)
        )

    def encode(self, rows: Rows) -> Float32Array:
        """The float32 feature matrix of ``rows`` (each a mapping of column name to cell).

        A cell is text (as in a CSV file), a number, a boolean, or None/NaN/blank for a missing value.
        Columns the features do not use (the target, identifiers, excluded columns) are ignored.

        Raises:
            PredictionInputError: a needed column is absent from a row, a cell is not of its column's kind, or a
                feature's value is too large for float32.
        """
        return self.encode_typed(self.typed_columns(rows), len(rows))

    def encode_values(self, values: Mapping[str, Sequence[object]], rows: int) -> Float32Array:
        """:meth:`encode` of ``rows`` rows given by column (a DataFrame's columns: name -> cells in row order),
        with the same cells, results and errors as the rows themselves, without a mapping per row.

        Raises:
            PredictionInputError: as :meth:`encode`.
        """
        typed = {
            column.name: self.typed_column(column, value_cells(values, column.name, rows)) for column in self.inputs
        }
        return self.encode_typed(typed, rows)

    def encode_cells(
        self, cells: Cells, rows: int, failed: Mapping[str, PredictionInputError] | None = None
    ) -> Float32Array:
        """The float32 feature matrix of ``rows`` rows given as text columns (:data:`Cells`): what
        :meth:`encode` makes of rows, without a Python object per cell (``ml8s predict`` reads its CSV file so).

        Raises:
            PredictionInputError: a needed column is absent from ``cells``, a cell is not of its column's kind, or a
                feature's value is too large for float32.
        """
        return self.encode_typed(self.typed_cells(cells, failed), rows)

    def encode_typed(self, columns: Mapping[str, Column], rows: int) -> Float32Array:
        """The float32 feature matrix of ``rows`` rows given as typed input columns (:meth:`typed_columns`).

        Raises:
            PredictionInputError: a feature's value is too large for float32, or a category cannot be placed.
        """
        for column in self.inputs:
            if column.kind == "categorical" and not column.complete:
                _refuse_unknown(column, columns[column.name])
        kept = {column.name: column.categories for column in self.inputs if column.kind == "categorical"}
        # Narrowed a feature at a time (the float64 matrix was twice the float32 one): the same casts.
        narrow = np.empty((rows, len(self.rules)), dtype=np.float32)
        worst: tuple[int, int, float] | None = None  # the first (row, feature) out of float32's range, its value
        for feature, wide in enumerate(encode_each(self.rules, columns, kept)):
            with np.errstate(over="ignore"):  # found just below and refused by name, not a RuntimeWarning on stderr
                values = wide.astype(np.float32)
            bad = np.flatnonzero(~np.isfinite(values))  # an infinity in the model's input: a NaN prediction or loss
            if len(bad) and (worst is None or int(bad[0]) < worst[0]):
                worst = (int(bad[0]), feature, float(wide[bad[0]]))
            narrow[:, feature] = values
        if worst is not None:
            row, feature, value = worst
            rule = self.rules[feature]
            raise PredictionInputError(
                f"row {row + 1} column {rule.source!r} gives feature {rule.name!r} the value {value:.6g}, "
                "too large for the model's float32 input; expected magnitudes below 3.4e38 after the feature's scaling"
            )
        return narrow

    def typed_columns(self, rows: Rows) -> dict[str, Column]:
        """Every input column of ``rows``, typed as the schema's kinds (a drift report reads them raw).

        Raises:
            PredictionInputError: a needed column is absent from a row, or a cell is not of its column's kind.
        """
        # a column's cells made just before it is typed: the first failing column's error comes first, whichever
        return {column.name: self.typed_column(column, row_cells(rows, column.name)) for column in self.inputs}

    def typed_cells(self, cells: Cells, failed: Mapping[str, PredictionInputError] | None = None) -> dict[str, Column]:
        """Every input column of ``cells``, typed as the schema's kinds; ``failed``: the error of a column that
        could not be read (:class:`ml8s.inference.cells.ReadCells`), raised in the column's turn.

        Raises:
            PredictionInputError: a needed column is absent or failed, or a cell is not of its column's kind.
        """
        columns: dict[str, Column] = {}
        for column in self.inputs:
            if failed and column.name in failed:
                raise failed[column.name]
            if column.name not in cells:
                raise PredictionInputError(
                    f"the rows have no column {column.name!r}; expected every column the model's features use"
                )
            columns[column.name] = self.typed_column(column, cells[column.name])
        return columns

    @staticmethod
    def typed_column(column: InputColumn, cells: pa.Array) -> Column:
        """The text ``cells`` of input column ``column`` typed as its kind (PredictionInputError where a present
        cell cannot be: a boolean that is not one, a number that is not finite, a category spelled like one of the
        encoder's buckets (:data:`BUCKETS`); text in a numeric column is missing, as training reads it, and
        :func:`ml8s.inference.output.stray_numbers` counts it; an indicator-only column's cells are present or
        missing as :mod:`ml8s.inference.presence` says)."""
        try:
            if column.kind == "any":
                return presence_column(column.name, cells, numeric=column.numeric)
            typed = text_column(column.name, column.kind, cells)
        except DataError as exc:
            raise PredictionInputError(exc.message) from exc
        if column.kind == "categorical":
            _refuse_bucket_names(typed)
        return typed


def _check_rules(rules: Sequence[FeatureRule], where: str) -> None:
    names = [rule.name for rule in rules]
    if not names or names != sorted(set(names)):
        raise InferenceError(f"{where} lists features {names}; expected at least one, unique and sorted by name")
    for rule in rules:
        wrong = ""
        if rule.kind == "onehot" and rule.category is None:
            wrong = "a one-hot feature without a category"
        elif rule.kind in ("numeric", "boolean") and (rule.impute is None or not math.isfinite(rule.impute)):
            wrong = "a value feature without a finite impute value"
        elif (rule.scale_mean is None) != (rule.scale_std is None) or (
            rule.scale_std is not None and (rule.kind != "numeric" or not rule.scale_std > 0)
        ):
            wrong = "scaling that is not a numeric feature's (scale_mean, scale_std > 0)"
        if wrong:
            raise InferenceError(
                f"{where} feature {rule.name!r} is {wrong}; expected the rules feature engineering writes"
            )


def _inputs(schema: _Schema, where: str) -> tuple[InputColumn, ...]:
    by_source: dict[str, list[FeatureRule]] = {}
    for rule in schema.features:
        by_source.setdefault(rule.source, []).append(rule)
    inputs: list[InputColumn] = []
    stray = {warning.column for warning in schema.warnings if warning.code == STRAY_TEXT_CODE}
    for source in sorted(by_source):
        kinds = {rule.kind for rule in by_source[source]}
        if kinds == {"onehot"}:
            categories = sorted(str(rule.category) for rule in by_source[source])
            known = [c for c in categories if c != OTHER]
            recorded = schema.categories.get(source)
            if recorded is not None:
                if OTHER in recorded or not set(known) <= set(recorded) or list(recorded) != sorted(set(recorded)):
                    raise InferenceError(
                        f"{where} records categories {list(recorded)} for column {source!r}; expected its sorted kept "
                        f"categories, a superset of its one-hot features' and without {OTHER!r}"
                    )
                known = list(recorded)
            complete = OTHER not in categories or len(known) >= MAX_CATEGORIES
            inputs.append(InputColumn(name=source, kind="categorical", categories=tuple(known), complete=complete))
        elif kinds <= {"numeric", "indicator"} or kinds <= {"boolean", "indicator"}:
            value = kinds - {"indicator"}
            kind: InputKind = "any" if not value else "numeric" if value == {"numeric"} else "boolean"
            inputs.append(InputColumn(name=source, kind=kind, numeric=kind == "any" and source in stray))
        else:
            raise InferenceError(f"{where} has features of kinds {sorted(kinds)} from column {source!r}; expected one")
    unplaced = sorted(set(schema.categories) - {i.name for i in inputs if i.kind == "categorical"})
    if unplaced:
        raise InferenceError(f"{where} records categories of {unplaced}; expected only columns with one-hot features")
    return tuple(inputs)


def _refuse_unknown(column: InputColumn, typed: Column) -> None:
    known = set(column.categories)
    for i, value in enumerate(typed.text().tolist()):
        category = MISSING if value is None else str(value)
        if category not in known:
            raise PredictionInputError(
                f"row {i + 1} column {column.name!r} is {category!r}, which the feature schema cannot place: "
                f"MAX_FEATURES kept {OTHER!r} but not every kept category of this column; expected one of "
                f"{list(column.categories)}"
            )


def _refuse_bucket_names(typed: Column) -> None:
    """Training refuses a category spelled like a bucket of the encoder (``features.column_names``): here it
    would land silently in that bucket (``__missing__`` read as a missing value), so it is refused as there."""
    first: int | None = None
    for name in BUCKETS:
        code = int(pc.index(typed.categories, name).as_py()) if len(typed.categories) else -1
        hits = np.flatnonzero(typed.values == code) if code >= 0 else np.empty(0, dtype=np.intp)
        if len(hits) and (first is None or int(hits[0]) < first):
            first = int(hits[0])
    if first is not None:
        value = str(typed.categories[int(typed.values[first])].as_py())
        raise PredictionInputError(
            f"column {typed.name!r} has {value!r} in row {first + 1} (of {len(typed.values)}), the name of "
            f"{BUCKETS[value]}: the model would read it as that bucket; expected a category other than {MISSING!r} "
            f"and {OTHER!r}, as training expects (rename the value, or leave the cell empty for a missing value)"
        )


def canonical_rules(transform: RawTransform) -> str:
    """The rules as compact JSON with sorted keys (what the ONNX metadata carries)."""
    return json.dumps([rule.record() for rule in transform.rules], sort_keys=True, separators=(",", ":"))
