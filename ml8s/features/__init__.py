"""Feature engineering rules: how raw columns become the float32 feature matrix (SPEC §3, Step 3).

- ``column_names``: the reserved and derived column names (target, split, one-hot and indicator names).
- ``rules``: type inference, imputation, standardization and one-hot encoding (``prepare``, ``encode``).
- ``matrix``: the feature matrix file (Parquet) written and read.
- ``warm``: a warm start's features: the parent's frozen schema applied to new generations, appended to
  the lineage's record history.

The step that runs them is ``ml8s.pipeline.features``. Import the modules you need: numpy and pyarrow
load with them, not with this package.
"""
