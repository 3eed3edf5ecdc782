"""The typed Flyte interfaces: the compute tasks' cache key is the same in every process, and the workflow
inputs stay in step with the user-level variables (names, types, defaults, descriptions)."""

from __future__ import annotations

import enum
import json
import os
import subprocess
import sys
import types
import typing
from pathlib import Path

import pytest
from conftest import write_small_churn

REPO = Path(__file__).resolve().parent.parent

# One process: the compute tasks' inputs as flytekit's type engine turns them into literals, and the local
# cache key flytekit derives from them (the cluster's catalog hashes the same deterministic literal bytes), for
# each of the environments it is given (a process per environment started flytekit and ml8s again each time).
_KEY_PROBE = """
import hashlib, json, sys
from flytekit import FlyteContextManager
from flytekit.core.local_cache import _calculate_cache_key
from flytekit.core.type_engine import TypeEngine
from flytekit.models.literals import LiteralMap
from ml8s.contract import ModelSpec
from ml8s.pipeline.bootstrap import bootstrap
from ml8s.context.run import RunSpec
from ml8s.training.summary import TrainSummary

ctx = FlyteContextManager.current_context()
outs = []
for env in json.loads(sys.argv[1]):
  spec = bootstrap(env).spec
  summary = TrainSummary(
      spec=ModelSpec(model_type="mlp", n_features=7, n_classes=2, hidden_units=64, hidden_layers=2),
      architecture="mlp[7-64-64-2]", parameter_count=4802, classes=("no", "yes"),
      feature_names=tuple(f"f{i}" for i in range(7)), epoch_losses=(0.6931471805599453, 0.1, 1e-07),
      train_rows=480, test_rows=120,
  )
  out = {}
  for name, value, kind in (("spec", spec, RunSpec), ("summary", summary, TrainSummary)):
      literal = TypeEngine.to_literal(ctx, value, kind, TypeEngine.to_literal_type(kind))
      assert TypeEngine.to_python_value(ctx, literal, kind) == value, name  # the task gets back what was sent
      data = literal.to_flyte_idl().SerializeToString(deterministic=True)
      out[name] = hashlib.sha256(data).hexdigest()
      out[name + "_key"] = _calculate_cache_key(f"tasks.{name}", "v1", LiteralMap({name: literal}))
  outs.append(out)
print(json.dumps(outs))
"""


def _keys(hash_seed: str, *envs: dict[str, str]) -> list[dict[str, str]]:
    """The literal digests and cache keys of each environment, computed in one fresh process (its own hash seed)."""
    run_env = {k: v for k, v in os.environ.items() if k not in ("FORCE_RERUN", "STRICT_DATA_IDENTITY")}
    run_env.update(PYTHONHASHSEED=hash_seed, HOME=envs[0]["HOME"])
    done = subprocess.run(
        [sys.executable, "-c", _KEY_PROBE, json.dumps(envs)],
        cwd=REPO,
        env=run_env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    keys: list[dict[str, str]] = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(keys) == len(envs), keys
    return keys


def test_compute_task_inputs_have_one_cache_key_in_every_process(tmp_path: Path) -> None:
    """The typed RunSpec and TrainSummary become the same literal bytes, hence the same cache key, in separate
    processes with different hash seeds, and under another pipeline root (no platform setting is in the key)."""
    data = write_small_churn(tmp_path / "data", rows=60)
    env = {"DATA_ROOT": str(data), "TARGET_COLUMN": "churned", "EPOCHS": "2", "HOME": str(tmp_path)}
    # the configurations compared with the first are computed in its process: three processes, not six
    first, epochs_3, *forced = _keys(
        "1",
        {**env, "PIPELINE_ROOT_URI": str(tmp_path / "a")},
        {**env, "EPOCHS": "3"},
        *[{**env, "FORCE_RERUN": "true"}] * 2,
    )
    (second,) = _keys("2", {**env, "PIPELINE_ROOT_URI": str(tmp_path / "a")})
    (other_root,) = _keys("3", {**env, "PIPELINE_ROOT_URI": str(tmp_path / "b"), "MLFLOW_MODEL_NAME": "other"})
    assert first == second == other_root
    # The key does depend on the configuration.
    assert epochs_3["spec_key"] != first["spec_key"]
    # A forced run's key matches no other run's, forced or not: no cache can answer for it.
    assert len({first["spec_key"], *(f["spec_key"] for f in forced)}) == 3


# Text, exactly as the environment holds it: paths, names, comma lists, a version number or a block hash.
TEXT_INPUTS = {"data_root", "target_column", "exclude_columns", "model_type", "warm_start"}


def _unwrap(annotation: object) -> tuple[object, ...]:
    """The members of a union input type (``int | None`` -> (int, NoneType)); a plain type alone."""
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        return typing.get_args(annotation)
    return (annotation,)


def test_workflow_inputs_follow_the_variables_types_and_defaults() -> None:
    """A user variable added, retyped or given another default without its workflow input (or the reverse)
    fails here: every input has the type of its validated parameter, unset spelled the one way for its type,
    and a description naming the variable and its default."""
    from ml8s.identity.params import RunParams
    from ml8s.identity.variables import USER_VARIABLES
    from tasks.bootstrap import bootstrap_run
    from tasks.inputs import UNSET
    from workflows.training import training_pipeline

    inputs = training_pipeline.python_interface.inputs_with_defaults
    docstring = training_pipeline.python_interface.docstring
    assert docstring is not None
    described = docstring.input_descriptions
    assert dict(bootstrap_run.python_interface.inputs) == {k: v[0] for k, v in inputs.items()}
    for variable, default in USER_VARIABLES.items():
        name = variable.lower()
        annotation, unset = inputs[name]
        members = _unwrap(annotation)
        param = RunParams.model_fields[name].annotation
        if typing.get_origin(param) is typing.Literal:  # a choice: an enum of exactly its values, plus env
            (choice,) = members
            assert isinstance(choice, type) and issubclass(choice, enum.Enum), name
            assert sorted(str(m.value) for m in choice) == sorted([*typing.get_args(param), UNSET]), name
            assert unset is choice(UNSET), name
        else:  # Optional[T] = None: a number or a boolean of the parameter's own type, or text; None is unset
            assert members[1:] == (type(None),) and unset is None, name
            (kind,) = members[:1]
            assert kind in _unwrap(param) or (kind is str and name in TEXT_INPUTS), name
        text = described[name]
        assert f"(unset: {variable}" in text, name
        assert f"else {default})" in text if default else "required" in text or ", else " in text, name
    platform = set(inputs) - {v.lower() for v in USER_VARIABLES}
    assert platform == {"pipeline_root_uri", "force_rerun"}


@pytest.mark.parametrize(
    ("value", "text"),
    [
        ("", ""),
        (" s3://bucket/data ", " s3://bucket/data "),
        ("env", "env"),  # a text input is never read as the unset marker: "env" may be a column's name
        (7, "7"),
        (0.25, "0.25"),
        (1e-05, "1e-05"),
        (True, "true"),
        (False, "false"),
    ],
)
def test_input_text_is_what_the_environment_would_hold(value: str | int | float | bool, text: str) -> None:
    from tasks.inputs import input_text

    assert input_text(value) == text


def test_unset_members_are_empty_text() -> None:
    from tasks.inputs import ModelFormat, TrainDevice, input_text

    assert [input_text(v) for v in (None, ModelFormat.ENV, TrainDevice.ENV)] == [""] * 3
    # a whole float is the integer's spelling (SAMPLER_ALPHA's default is 1), any other float its shortest repr
    assert [input_text(v) for v in (1.0, 0.5, 1e-05, 2.5e-07)] == ["1", "0.5", "1e-05", "2.5e-07"]
    assert [input_text(v) for v in (ModelFormat.SAFETENSORS, TrainDevice.CUDA, "logreg")] == [
        "safetensors",
        "cuda",
        "logreg",
    ]


def test_typed_inputs_and_the_environment_give_one_identity(tmp_path: Path) -> None:
    """SPEC §4: the canonical config is the same whether a value comes from an input or the environment."""
    from ml8s.pipeline.bootstrap import bootstrap
    from tasks.inputs import input_text

    data = write_small_churn(tmp_path / "data", rows=60)
    base = {"DATA_ROOT": str(data), "TARGET_COLUMN": "churned", "PIPELINE_ROOT_URI": str(tmp_path / "root")}
    typed = {"epochs": 3, "test_size": 0.25, "standardize": False, "model_type": "logreg", "max_features": 4}
    by_input = bootstrap(base, {k: input_text(v) for k, v in typed.items()})
    by_env = bootstrap(
        {**base, "EPOCHS": "3", "TEST_SIZE": "0.25", "STANDARDIZE": "false", "MODEL_TYPE": "logreg"}
        | {"MAX_FEATURES": "4"}
    )
    assert by_input.identity == by_env.identity


def test_a_malformed_input_is_named(tmp_path: Path) -> None:
    from ml8s.errors import ConfigError
    from ml8s.pipeline.bootstrap import bootstrap

    env = {"DATA_ROOT": str(tmp_path / "absent"), "TARGET_COLUMN": "churned", "PIPELINE_ROOT_URI": str(tmp_path)}
    with pytest.raises(ConfigError, match=r"^CONFIG_ERROR: EPOCHS=0 is invalid; .* \(explicit input epochs\)$"):
        bootstrap(env, {"epochs": "0"})
    with pytest.raises(ConfigError) as from_env:
        bootstrap({**env, "EPOCHS": "0"})
    assert "explicit input" not in str(from_env.value)  # the environment variable names itself
    with pytest.raises(ConfigError, match=r"FORCE_RERUN='maybe' is invalid; .*\(explicit input force_rerun\)$"):
        bootstrap(env, {"force_rerun": "maybe"})


def test_a_cached_output_whose_local_files_are_gone_is_a_miss(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A local run's compute outputs stay in its sandbox under TMPDIR while ~/.flyte/local-cache names them: after
    the sandbox was cleaned (reboot, tmp cleaning), a run of the same configuration under another root (or retried
    after a failed registration) got the dead path from the cache and died in flytekit's input conversion, with a
    traceback, on every retry. Such an entry is a miss now (the task computes again); one whose files remain hits."""
    from diskcache import Cache
    from flytekit.core.local_cache import LocalTaskCache
    from flytekit.models.core.types import BlobType
    from flytekit.models.literals import Blob, BlobMetadata, Literal, LiteralMap, Primitive, Scalar

    import tasks._util  # noqa: F401  (the compute tasks' cache policy)

    with Cache(str(tmp_path / "cache")) as cache:
        monkeypatch.setattr(LocalTaskCache, "_cache", cache, raising=False)
        monkeypatch.setattr(LocalTaskCache, "_initialized", True)
        inputs = LiteralMap({"spec": Literal(scalar=Scalar(primitive=Primitive(string_value="spec")))})
        kept, gone = tmp_path / "kept" / "features", tmp_path / "gone" / "features"
        kept.mkdir(parents=True)
        for name, where in (("kept", kept), ("gone", gone)):
            blob = Blob(BlobMetadata(BlobType("", BlobType.BlobDimensionality.MULTIPART)), str(where))
            LocalTaskCache.set(name, "v", inputs, (), LiteralMap({"o0": Literal(scalar=Scalar(blob=blob))}))
        found = LocalTaskCache.get("kept", "v", inputs, ())
        assert found is not None and found.literals["o0"].scalar.blob.uri == str(kept)
        assert LocalTaskCache.get("gone", "v", inputs, ()) is None
