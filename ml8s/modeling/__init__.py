"""Model families and the switches that make training bit-reproducible.

``families`` holds what a run records about its model and how it was made, without torch: the
verifier imports it. ``family`` is the interface every family implements (built-in or plug-in) and
``plugins`` loads a plug-in by import path and computes its code identity; neither imports torch.
``registry``, ``networks`` and ``determinism`` import torch; the verifier never imports them.

Bring your own model: ``MODEL_TYPE=plugin:my_pkg.models:build`` where ``build`` is a
:class:`ModelFamily` or a ``build(spec) -> torch.nn.Module`` function (docs/models.md).
"""

from __future__ import annotations

from ml8s.modeling.family import Build, ModelFamily, TrainStep
from ml8s.modeling.plugins import code_identity, resolve_model_code

__all__ = ["Build", "ModelFamily", "TrainStep", "code_identity", "resolve_model_code"]
