"""The code MLflow runs to build a run's pyfunc model ("models from code": nothing is pickled).

``mlflow.pyfunc.save_model(python_model=<this file>)`` copies it into the model; loading the model runs it,
with the model's ``code/`` (this package) importable, and takes the model it sets.
"""

from __future__ import annotations

from mlflow.models import set_model

from ml8s.inference.pyfunc import RawRowModel

set_model(RawRowModel())
