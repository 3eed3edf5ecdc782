"""The model families and every training/export setting a run records, importable without torch.

Training, export and the verifier read these from here: the verifier recomputes a run's architecture
string, parameter count, export settings and determinism flags from the same definitions that made
the run, so nothing is copied. A family is a function from a :class:`ModelSpec` to its layer list;
the architecture string and the parameter count are computed from that list, and
``ml8s.modeling.networks`` builds the torch module from it, layer by layer. Adding a family: its layer
list here (and a layer kind, with its parameter formula, if it needs one), the torch module of any new
layer kind in ``networks.py``, and its name in ``ml8s.identity.model_code.BUILTIN_MODEL_TYPES``.

A plug-in family (``MODEL_TYPE=plugin:<module>:<attribute>``, see ``ml8s.modeling.plugins``) has no layer
list here: its parameters are counted from the module it builds (and, by the verifier, from the native
weights), and its architecture string names the plug-in and its input and output widths.
"""

from __future__ import annotations

import importlib.metadata
import platform
from collections.abc import Callable

from pydantic import BaseModel, ConfigDict

from ml8s.contract.training_metadata import DeterminismRecord, ModelSpec
from ml8s.errors import ConfigError
from ml8s.identity.model_code import is_plugin
from ml8s.identity.params import MAX_HIDDEN_LAYERS, MAX_HIDDEN_UNITS, MAX_HIDDEN_WEIGHTS
from ml8s.text import quoted

OPTIMIZER = "adam"
MODEL_FORMATS = ("onnx", "safetensors")
ONNX_OPSET = 17
# Max abs logit difference allowed between the exported model and the torch model on the held-out rows.
EXPORT_TOLERANCE = 1e-4
# Libraries whose versions training_metadata.json records (with the Python version, as "python").
VERSIONED_LIBRARIES = ("numpy", "onnx", "onnxruntime", "pyarrow", "safetensors", "torch")
RECORDED_VERSIONS = tuple(sorted(("python", *VERSIONED_LIBRARIES)))
# cuBLAS's deterministic workspace (read from the environment at CUDA initialization).
CUBLAS_WORKSPACE_CONFIG = ":4096:8"


class Linear(BaseModel):
    """A fully connected layer: ``in_features x out_features`` weights and ``out_features`` biases."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    in_features: int
    out_features: int

    @property
    def parameter_count(self) -> int:
        return self.in_features * self.out_features + self.out_features


class ReLU(BaseModel):
    """An activation: no parameters, same width."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    @property
    def parameter_count(self) -> int:
        return 0


Layer = Linear | ReLU
Family = Callable[[ModelSpec], tuple[Layer, ...]]


def _logreg(spec: ModelSpec) -> tuple[Layer, ...]:
    """Multinomial logistic regression: one linear layer to the class logits."""
    return (Linear(in_features=spec.n_features, out_features=spec.n_classes),)


def _mlp(spec: ModelSpec) -> tuple[Layer, ...]:
    """HIDDEN_LAYERS x (Linear, ReLU) of HIDDEN_UNITS, then a linear head.

    Raises:
        ConfigError: the spec is beyond what a run accepts (a training_metadata.json edited by hand: a layer is
            built per hidden layer, and 10**9 of them never ended; torch would allocate the weights).
    """
    layers_ok, units_ok = 0 <= spec.hidden_layers <= MAX_HIDDEN_LAYERS, 1 <= spec.hidden_units <= MAX_HIDDEN_UNITS
    if not (layers_ok and units_ok) or spec.hidden_units**2 * max(spec.hidden_layers - 1, 0) > MAX_HIDDEN_WEIGHTS:
        raise ConfigError(
            f"model spec {spec.hidden_layers} hidden layers of {spec.hidden_units} units is beyond what a run accepts "
            f"(0 to {MAX_HIDDEN_LAYERS} layers of 1 to {MAX_HIDDEN_UNITS} units, at most {MAX_HIDDEN_WEIGHTS:,} "
            "hidden-to-hidden weights); expected the spec its run recorded"
        )
    out: list[Layer] = []
    width = spec.n_features
    for _ in range(spec.hidden_layers):
        out += [Linear(in_features=width, out_features=spec.hidden_units), ReLU()]
        width = spec.hidden_units
    return (*out, Linear(in_features=width, out_features=spec.n_classes))


FAMILIES: dict[str, Family] = {"logreg": _logreg, "mlp": _mlp}
MODEL_TYPES = tuple(sorted(FAMILIES))


def layers(spec: ModelSpec) -> tuple[Layer, ...]:
    """The family's layers, in the order they are created (so a seeded RNG gives the same weights).

    Raises:
        ConfigError: ``spec.model_type`` is not a family.
    """
    family = FAMILIES.get(spec.model_type)
    if family is None and is_plugin(spec.model_type):
        raise ConfigError(
            f"MODEL_TYPE={spec.model_type!r} is a plug-in: it has no layer list; count the parameters of the "
            "module it builds"
        )
    if family is None:
        raise ConfigError(
            f"MODEL_TYPE={quoted(spec.model_type)} is not a model family; expected one of {list(MODEL_TYPES)}"
        )
    return family(spec)


def parameter_count(spec: ModelSpec) -> int:
    """Weights and biases of every layer of the family."""
    return sum(layer.parameter_count for layer in layers(spec))


def architecture(spec: ModelSpec) -> str:
    """A readable, stable description: the type and the width after each linear layer, e.g. ``mlp:12-64-64-2``.

    A plug-in's layers are its own: its string is MODEL_TYPE and its input and output widths,
    e.g. ``plugin:my_pkg.models:build:12-2``.
    """
    if is_plugin(spec.model_type):
        return f"{spec.model_type}:{spec.n_features}-{spec.n_classes}"
    linear = [layer for layer in layers(spec) if isinstance(layer, Linear)]
    widths = [spec.n_features, *(layer.out_features for layer in linear)]
    return f"{spec.model_type}:" + "-".join(str(w) for w in widths)


def onnx_opset(model_format: str) -> int | None:
    """The ONNX opset an export records: ``ONNX_OPSET`` for onnx, none for safetensors."""
    return ONNX_OPSET if model_format == "onnx" else None


def determinism_flags(device: str) -> DeterminismRecord:
    """The switches ``ml8s.modeling.determinism.seed_everything`` sets for ``device``, as recorded.

    CPU training runs on one thread: float reductions split across threads may sum in another order on
    a machine with another core count, and the bytes must not depend on the machine.
    """
    return DeterminismRecord(
        cublas_workspace_config=CUBLAS_WORKSPACE_CONFIG,
        cudnn_benchmark=False,
        cudnn_deterministic=True,
        device=device,
        torch_num_threads=1 if device == "cpu" else None,
        use_deterministic_algorithms=True,
    )


def library_versions() -> dict[str, str]:
    """The versions a run records (``RECORDED_VERSIONS``): Python's and each versioned library's."""
    return {"python": platform.python_version(), **{p: importlib.metadata.version(p) for p in VERSIONED_LIBRARIES}}
