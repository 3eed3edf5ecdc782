"""``features/feature_schema.json``: everything needed to reproduce the feature transform at inference."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from ml8s.contract._base import ContractFile, ContractModel
from ml8s.identity.hashing import canonical_bytes


class NumberFeature(ContractModel):
    """A numeric or boolean column: missing values imputed with the training mean; numeric columns are
    standardized with the training mean and standard deviation when STANDARDIZE is on."""

    kind: Literal["boolean", "numeric"]
    name: str
    source: str
    impute: float
    train_variance: float
    scale_mean: float | None = None  # absent from the file when not standardized, never null
    scale_std: float | None = None


class OneHotFeature(ContractModel):
    """One category of a categorical column (rare categories share ``__other__``)."""

    kind: Literal["onehot"]
    name: str
    source: str
    category: str
    train_variance: float


class IndicatorFeature(ContractModel):
    """1.0 where a numeric or boolean column was missing."""

    kind: Literal["indicator"]
    name: str
    source: str
    train_variance: float


Feature = Annotated[NumberFeature | OneHotFeature | IndicatorFeature, Field(discriminator="kind")]


class TargetRecord(ContractModel):
    column: str
    classes: list[str]
    encoded_as: str


class SplitRecord(ContractModel):
    column: str
    train: int
    test: int


class RowCounts(ContractModel):
    read: int
    missing_target_dropped: int
    kept: int
    train: int
    test: int


class MissingValues(ContractModel):
    """How missing values were read (``ml8s.data.missing``): the tokens, how a cell matches one, and how
    much stray text a mostly-numeric column may hold before it is typed as text."""

    tokens: list[str]
    match: str
    stray_text_max_fraction: float


class DataWarningRecord(ContractModel):
    """Something in the data that a documented rule handled but that a person should know."""

    code: str
    column: str
    cells: int
    examples: list[str]
    message: str


class FeatureSchema(ContractFile):
    """The features in matrix order (sorted by name), the target, the split and what was dropped."""

    schema_version: int
    features: list[Feature]
    target: TargetRecord
    split: SplitRecord
    dropped_columns: dict[str, str]
    rows: RowCounts
    rows_per_file: dict[str, int]
    # Absent from files written under canonicalization 1.0.0 (before the token set was recorded).
    missing_values: MissingValues | None = None
    warnings: list[DataWarningRecord] = Field(default_factory=list)
    # Schema version 2 only: every kept category of a column whose ``__other__`` feature survived MAX_FEATURES
    # while some kept categories' features did not (serving needs them to tell "kept, no feature" from other).
    categories: dict[str, list[str]] | None = None

    def to_bytes(self) -> bytes:
        return canonical_bytes(self.model_dump(mode="json", exclude_none=True))
