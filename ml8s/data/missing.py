"""Which cells are missing values, and what a mostly-numeric column with stray text becomes.

The token set is deliberate: each entry is how a common tool writes "no value", and a cell matches
when its text, trimmed of surrounding whitespace, *equals* a token exactly (case-sensitive; no
prefix or substring matching). It applies to every text column (CSV cells, Parquet string columns),
the target included, before a column is typed; typed Parquet columns carry their own nulls and NaNs.

==========  ====================================================================================
``""``      an empty cell: every CSV writer
``#N/A``    Excel and Google Sheets (a failed lookup, exported as text)
``<NA>``    pandas' ``pd.NA`` written with ``to_csv``
``?``       the UCI repository convention (adult, mushroom, ...): never a meaningful category
``N/A``     ``n/a`` typed by hand in spreadsheets, upper and lower case as written
``NA``      R's ``write.csv`` and most statistics packages
``NULL``    SQL exports (MySQL, SQL Server, ``psql`` with ``NULL 'NULL'``)
``NaN``     pandas/numpy float NaN written as text; also Java and JavaScript
``None``    Python's ``str(None)`` from hand-written exports
``n/a``     see ``N/A``
``nan``     numpy's ``str(float('nan'))``
``null``    JSON and JavaScript exports
==========  ====================================================================================

Left out on purpose: ``-`` (accounting formats write zero as a dash), ``none``/``na``/``Null`` and
other case variants (lower-case ``none`` and ``na`` are real categories often enough: "no add-ons",
a country code), ``inf``/``Infinity`` (not missing: a non-finite number, rejected by the loader).

A text column whose non-missing cells are numbers except for a few (at most
:data:`STRAY_TEXT_MAX_FRACTION` of them) is typed numeric: the stray cells are read as missing
(imputed, with a ``__missing`` indicator feature) and reported as a :class:`DataWarning` with code
:data:`STRAY_TEXT_CODE` in ``features/feature_schema.json``. One-hot encoding such a column would
quietly give a far worse model; failing would reject data that has one typo in a million rows.

Changing the set or these rules changes the features a dataset gives, which is a canonicalization
change: bump ``CANONICALIZATION_VERSION`` (:mod:`ml8s.identity.variables`).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

MISSING_TOKENS: tuple[str, ...] = ("", "#N/A", "<NA>", "?", "N/A", "NA", "NULL", "NaN", "None", "n/a", "nan", "null")
MATCH_RULE = "exact, case-sensitive equality with the cell text trimmed of surrounding whitespace"
STRAY_TEXT_MAX_FRACTION = 0.05
STRAY_TEXT_CODE = "NUMERIC_COLUMN_STRAY_TEXT"
_EXAMPLES = 5
_EXAMPLE_CHARS = 40


class DataWarning(BaseModel):
    """Something in the data that was handled by a documented rule but that a person should know."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    code: str
    column: str
    cells: int
    examples: tuple[str, ...]
    message: str


def missing_values_record() -> dict[str, object]:
    """How missing values were read: recorded in ``features/feature_schema.json``."""
    return {
        "tokens": list(MISSING_TOKENS),
        "match": MATCH_RULE,
        "stray_text_max_fraction": STRAY_TEXT_MAX_FRACTION,
    }


def stray_text_warning(column: str, stray: list[str], numbers: int, cells: int | None = None) -> DataWarning:
    """The warning of a mostly-numeric column whose ``stray`` cells (non-numeric text) were read as missing;
    ``cells`` counts them when ``stray`` lists each distinct text once."""
    examples = tuple(sorted({value[:_EXAMPLE_CHARS] for value in stray})[:_EXAMPLES])
    cells = len(stray) if cells is None else cells
    return DataWarning(
        code=STRAY_TEXT_CODE,
        column=column,
        cells=cells,
        examples=examples,
        message=(
            f"column {column!r} holds {numbers} numbers and {cells} cell(s) of other text "
            f"(e.g. {list(examples)}); typed numeric, the text read as missing"
        ),
    )


def is_mostly_numeric(numbers: int, present: int) -> bool:
    """True when all but at most STRAY_TEXT_MAX_FRACTION of the ``present`` cells are ``numbers``."""
    return numbers > 0 and present - numbers <= STRAY_TEXT_MAX_FRACTION * present
