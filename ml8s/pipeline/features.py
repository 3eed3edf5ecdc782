"""Step 3, feature engineering: the rules of seed 001 and SPEC §4, all decisions deterministic.

Columns are sorted by name before anything else; categories are encoded in sorted order; statistics
(imputation, variance, standardization) are fitted on the training rows only; MAX_FEATURES keeps the
top-N by variance with ties broken by name. Output: ``features/feature_matrix.parquet`` (float32
features sorted by name, ``__target__`` class index, ``__split__`` 0 = train / 1 = test) and
``features/feature_schema.json`` (everything needed to reproduce the transform at inference), written
into a local directory; ``publish`` copies them into ARTIFACT_ROOT.
"""

from __future__ import annotations

import os

from pydantic import TypeAdapter

from ml8s import log
from ml8s.context.publish import local_path
from ml8s.context.run import RunSpec
from ml8s.contract import Feature, FeatureSchema, RowCounts, SplitRecord, TargetRecord, layout
from ml8s.contract.feature_schema import DataWarningRecord, MissingValues
from ml8s.data.missing import missing_values_record
from ml8s.features.column_names import SPLIT, TARGET
from ml8s.features.loaded import forget, load_prepared
from ml8s.features.matrix import write_encoded
from ml8s.features.prepared import Prepared
from ml8s.features.rules import fit_rules, hidden_categories
from ml8s.memory import give_back

# Version 2 adds ``categories`` (hidden_categories); it is written only when that is not empty, so every
# other schema keeps version 1 and its bytes.
SCHEMA_VERSION = 1
SCHEMA_VERSION_CATEGORIES = 2
_FEATURE: TypeAdapter[Feature] = TypeAdapter(Feature)


@log.timed("features")
def compute_features(spec: RunSpec, out_dir: str, *, hand_over: bool = False) -> None:
    """Load the data (re-verified), engineer features and write both feature files into ``out_dir``.

    ``hand_over``: this process trains next (``ml8s run``, one rank): the float32 rows are left for its training
    to map, which then does not decode the matrix file again (:func:`~ml8s.features.matrix.write_encoded`).

    Pure: nothing is written to the store (``publish`` does that), so the step can be cached. A warm start
    encodes its lineage's generations instead (:mod:`ml8s.features.warm`).
    """
    if spec.lineage is not None:
        from ml8s.features.warm import compute_warm_features

        forget()  # a warm start's snapshot parsed rows it does not encode
        compute_warm_features(spec, spec.lineage, out_dir)
        return
    prepared = load_prepared(spec.fingerprint, spec.params, keep=False)
    rules, kept = fit_rules(prepared, spec.params)
    give_back()  # fitting's temporaries are not carried into encoding's peak (ml8s.memory)
    features = [rule.record() for rule in rules]
    os.makedirs(out_dir, exist_ok=True)
    columns = {column.name: column for column in prepared.columns}
    path = local_path(out_dir, layout.FEATURE_MATRIX)
    write_encoded(path, rules, columns, kept, prepared.target, prepared.split, hand_over=hand_over)
    with open(local_path(out_dir, layout.FEATURE_SCHEMA), "wb") as handle:
        handle.write(feature_schema(prepared, features).to_bytes())
    for warning in prepared.warnings:
        spec.log("features", f"WARNING {warning.code}: {warning.message}")
    spec.log(
        "features",
        f"{len(rules)} features x {len(prepared.target)} rows ({prepared.train_rows} train, {prepared.test_rows} test)",
    )


def feature_schema(prepared: Prepared, features: list[dict[str, object]]) -> FeatureSchema:
    """``feature_schema.json`` from the prepared rows and the encoder's description of each feature."""
    hidden = hidden_categories(features, prepared)
    return FeatureSchema(
        schema_version=SCHEMA_VERSION_CATEGORIES if hidden else SCHEMA_VERSION,
        categories=hidden or None,
        features=[_FEATURE.validate_python(feature) for feature in features],
        target=TargetRecord(column=prepared.target_column, classes=list(prepared.classes), encoded_as=TARGET),
        split=SplitRecord(column=SPLIT, train=0, test=1),
        dropped_columns=dict(sorted(prepared.dropped.items())),
        rows=RowCounts.model_validate(prepared.row_counts()),
        rows_per_file=dict(sorted(prepared.rows_per_file.items())),
        missing_values=MissingValues.model_validate(missing_values_record()),
        warnings=[
            DataWarningRecord.model_validate(w.model_dump(mode="json"))
            for w in sorted(prepared.warnings, key=lambda w: (w.column, w.code))
        ],
    )
