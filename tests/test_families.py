"""Model families and recorded settings (ml8s.modeling.families): torch-free, and what torch actually does.

The verifier imports these definitions instead of copying them; these tests prove the definitions
agree with the torch modules built from them and with the switches training sets.
"""

from __future__ import annotations

import json
import subprocess
import sys
import typing
from pathlib import Path

import pytest

from ml8s.contract import ModelSpec
from ml8s.errors import ConfigError
from ml8s.identity.model_code import BUILTIN_MODEL_TYPES
from ml8s.identity.params import RunParams
from ml8s.modeling import families

REPO = Path(__file__).resolve().parent.parent


def spec(model_type: str, n_features: int = 7, n_classes: int = 3, units: int = 5, layers: int = 2) -> ModelSpec:
    return ModelSpec(
        model_type=model_type, n_features=n_features, n_classes=n_classes, hidden_units=units, hidden_layers=layers
    )


def run_python(code: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, env={"PYTHONPATH": str(REPO)}, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_verifier_and_cli_import_no_torch() -> None:
    out = run_python(
        "import sys, ml8s.audit, ml8s.cli\n"
        "assert 'ml8s.modeling.families' in sys.modules\n"
        "print(sorted(m for m in ('torch', 'onnx', 'onnxruntime', 'mlflow') if m in sys.modules))"
    )
    assert out.strip() == "[]"


@pytest.mark.parametrize(
    "model_spec",
    [
        spec("mlp"),
        spec("mlp", layers=0),
        spec("mlp", n_features=1, n_classes=2, units=1, layers=4),
        spec("logreg"),
        spec("logreg", layers=3),  # hidden sizes do not apply to logistic regression
    ],
    ids=str,
)
def test_formulas_agree_with_the_torch_module(model_spec: ModelSpec) -> None:
    import torch

    from ml8s.modeling.networks import build_model, parameter_count

    model = build_model(model_spec)
    assert families.parameter_count(model_spec) == parameter_count(model)
    assert len(model) == len(families.layers(model_spec))
    linear = [m for m in model if isinstance(m, torch.nn.Linear)]
    widths = [model_spec.n_features, *(m.out_features for m in linear)]
    assert families.architecture(model_spec) == f"{model_spec.model_type}:" + "-".join(map(str, widths))


def test_known_architectures() -> None:
    assert families.architecture(spec("mlp", 12, 2, 64, 2)) == "mlp:12-64-64-2"
    assert families.architecture(spec("logreg", 12, 2, 64, 2)) == "logreg:12-2"
    assert families.parameter_count(spec("mlp", 8, 2, 64, 2)) == 8 * 64 + 64 + 64 * 64 + 64 + 64 * 2 + 2


def test_an_unknown_family_is_a_named_error() -> None:
    with pytest.raises(ConfigError, match="MODEL_TYPE='rnn' is not a model family"):
        families.parameter_count(spec("rnn"))


def test_every_choice_of_the_user_variables_is_a_family_and_a_format() -> None:
    """MODEL_TYPE and MODEL_FORMAT are validated in ml8s.identity (below modeling): the lists must not drift."""
    fields = RunParams.model_fields
    assert tuple(sorted(BUILTIN_MODEL_TYPES)) == families.MODEL_TYPES
    assert tuple(sorted(typing.get_args(fields["model_format"].annotation))) == tuple(sorted(families.MODEL_FORMATS))


def test_recorded_determinism_flags_are_the_ones_training_sets() -> None:
    """seed_everything in a fresh process: torch's switches read back equal what the run records."""
    out = run_python(
        "import json, os, torch\n"
        "from ml8s.modeling.determinism import seed_everything\n"
        "seed_everything(3, 'cpu')\n"
        "cudnn = torch.backends.cudnn\n"
        "print(json.dumps({'cublas_workspace_config': os.environ['CUBLAS_WORKSPACE_CONFIG'],\n"
        "  'cudnn_benchmark': cudnn.benchmark, 'cudnn_deterministic': cudnn.deterministic,\n"
        "  'device': 'cpu', 'torch_num_threads': torch.get_num_threads(),\n"
        "  'use_deterministic_algorithms': torch.are_deterministic_algorithms_enabled()}))"
    )
    assert json.loads(out) == families.determinism_flags("cpu").model_dump()
    assert families.determinism_flags("cuda").torch_num_threads is None  # GPU runs keep torch's thread count


def test_recorded_versions_are_the_versioned_libraries() -> None:
    versions = families.library_versions()
    assert tuple(sorted(versions)) == families.RECORDED_VERSIONS
    assert versions["python"] == ".".join(map(str, sys.version_info[:3]))
    assert families.onnx_opset("onnx") == families.ONNX_OPSET and families.onnx_opset("safetensors") is None
