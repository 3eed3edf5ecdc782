"""Bring your own model (issue 10): a plug-in family by import path trains, exports, verifies, and its code
is part of the run's identity; a bad import path is a named error at bootstrap, before anything is written."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from forked_cli import forked_ml8s

from ml8s.contract import ConfigSnapshot, ModelSpec, TrainingMetadata, layout
from ml8s.errors import ConfigError, ModelCodeChangedError, TrainingError
from ml8s.identity.hashing import compute_identity
from ml8s.identity.model_code import PluginRef, model_code_problem, parse_model_type
from ml8s.identity.variables import CANONICALIZATION_VERSION, canonical_config
from ml8s.modeling import families
from ml8s.modeling.plugins import code_identity, resolve_model_code

REPO = Path(__file__).resolve().parent.parent
PKG = "ml8s_test_plugin"
FAMILY = f"plugin:{PKG}.models:family"

MODELS = '''
import torch
from ml8s.modeling import ModelFamily
from ml8s_test_plugin.blocks import Residual


def build(spec):
    """A residual network: not expressible as ml8s's layer lists."""
    return Residual(spec.n_features, spec.hidden_units, spec.n_classes)


def smoothed_step(model, optimizer, x, y):
    optimizer.zero_grad(set_to_none=True)
    loss = torch.nn.functional.cross_entropy(model(x), y, label_smoothing=0.1)
    loss.backward()
    optimizer.step()
    return loss


family = ModelFamily(build=build, train_step=smoothed_step)
not_a_family = 42


def returns_a_string(spec):
    return "not a module"


def raises(spec):
    raise RuntimeError("boom")


def returns_a_float(model, optimizer, x, y):
    return 1.0


float_step = ModelFamily(build=build, train_step=returns_a_float)
'''
BLOCKS = """
import torch

SCALE = 1.0


class Residual(torch.nn.Module):
    def __init__(self, n_features, width, n_classes):
        super().__init__()
        self.inp = torch.nn.Linear(n_features, width)
        self.block = torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.Tanh())
        self.head = torch.nn.Linear(width, n_classes)

    def forward(self, x):
        h = torch.relu(self.inp(x))
        return self.head(h + SCALE * self.block(h))
"""


def write_plugin(base: Path) -> Path:
    """The plug-in package under ``base`` (put ``base`` on the path); returns its directory."""
    pkg = base / PKG
    pkg.mkdir(parents=True, exist_ok=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "models.py").write_text(textwrap.dedent(MODELS))
    (pkg / "blocks.py").write_text(textwrap.dedent(BLOCKS))
    return pkg


@pytest.fixture
def plugin_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The plug-in package importable in this process; forgotten afterwards (other tests write their own)."""
    base = tmp_path / "plugins"
    write_plugin(base)
    monkeypatch.syspath_prepend(str(base))
    yield base / PKG
    for name in [m for m in sys.modules if m == PKG or m.startswith(f"{PKG}.")]:
        del sys.modules[name]


def spec(model_type: str = FAMILY) -> ModelSpec:
    return ModelSpec(model_type=model_type, n_features=5, n_classes=3, hidden_units=4, hidden_layers=2)


def env_with(plugins: Path, **extra: str) -> dict[str, str]:
    drop = ("PIPELINE_ROOT_URI", "MLFLOW_TRACKING_URI", "FORCE_RERUN", "STRICT_DATA_IDENTITY", "DATA_ROOT")
    env = {k: v for k, v in os.environ.items() if k not in drop and not k.startswith(("AWS_", "FLYTE_AWS_"))}
    env["PYTHONPATH"] = os.pathsep.join((str(plugins), str(REPO)))
    env.update(extra)
    return env


def ml8s(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return forked_ml8s(args, env, timeout=300)


# ------------------------------------------------------------------------------------ end to end


def test_plugin_trains_exports_verifies_and_its_code_is_identity(plugin_path: Path, tmp_path: Path) -> None:
    from conftest import write_small_churn

    from ml8s.pipeline.bootstrap import bootstrap

    data = write_small_churn(tmp_path / "data")
    root = tmp_path / "root"
    env = env_with(plugin_path.parent, DATA_ROOT=str(data), TARGET_COLUMN="churned", EPOCHS="2")
    env.update(PIPELINE_ROOT_URI=str(root), MODEL_TYPE=FAMILY)

    done = ml8s(env, "run")
    assert done.returncode == 0, done.stderr[-4000:]
    run_id = json.loads(done.stdout)["run_id"]
    run_dir = root / layout.run_prefix(run_id)
    snapshot = ConfigSnapshot.model_validate_json((run_dir / layout.CONFIG_SNAPSHOT).read_bytes())
    assert snapshot.canonicalization_version == CANONICALIZATION_VERSION
    assert snapshot.canonical_config["model_type"] == FAMILY
    code = snapshot.canonical_config["model_code"]
    assert code == code_identity(PluginRef(module=f"{PKG}.models", attribute="family"))
    metadata = TrainingMetadata.model_validate_json((run_dir / layout.TRAINING_METADATA).read_bytes())
    n, width = metadata.model.spec.n_features, 64
    assert metadata.model.architecture == f"{FAMILY}:{n}-2"
    assert metadata.model.parameter_count == (n * width + width) + (width * width + width) + (width * 2 + 2)
    assert (run_dir / "model" / "model.onnx").stat().st_size > 0

    verified = ml8s(env, "verify", run_id, "--root", str(root))
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert "RESULT: PASS" in verified.stdout

    assert bootstrap(env).run_id == run_id  # same code, same data: the RUN_ID the gate finds complete
    (plugin_path / "blocks.py").write_text(textwrap.dedent(BLOCKS).replace("SCALE = 1.0", "SCALE = 0.5"))
    changed = bootstrap(env)
    assert changed.run_id != run_id  # a sibling module of the plug-in changed: a new identity, a new run
    assert changed.identity.canonical_config["model_code"] not in (None, code)


def test_bad_import_path_fails_at_bootstrap_naming_model_type_and_writes_nothing(tmp_path: Path) -> None:
    from conftest import write_small_churn

    data = write_small_churn(tmp_path / "data")
    root = tmp_path / "root"
    env = env_with(tmp_path, DATA_ROOT=str(data), TARGET_COLUMN="churned", PIPELINE_ROOT_URI=str(root))
    env["MODEL_TYPE"] = "plugin:no_such_package.models:build"
    done = ml8s(env, "run")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "ml8s: CONFIG_ERROR: MODEL_TYPE='plugin:no_such_package.models:build'" in done.stderr
    assert "no module named 'no_such_package'" in done.stderr
    assert "Traceback" not in done.stderr
    assert not root.exists()


# ------------------------------------------------------------------------------------ bootstrap errors


@pytest.mark.parametrize(
    ("model_type", "words"),
    [
        ("plugin:ml8s_test_plugin.missing:build", ("no module named 'ml8s_test_plugin.missing'",)),
        ("plugin:ml8s_test_plugin.models:nothing", ("has no attribute 'nothing'",)),
        ("plugin:ml8s_test_plugin.models:not_a_family", ("is a int", "expected an ml8s.modeling.ModelFamily")),
        ("plugin:ml8s_test_plugin.broken:build", ("importing 'ml8s_test_plugin.broken' failed", "ZeroDivisionError")),
        ("plugin:ml8s_test_plugin.models", ("is invalid", "plugin:<module>:<attribute>")),
        ("plugin:1bad.models:build", ("is invalid",)),
        ("plugin:a..b:build", ("is invalid",)),
        ("xgboost", ("is invalid", "one of mlp, logreg, or plugin:")),
    ],
)
def test_bad_plugins_are_config_errors_naming_model_type(
    plugin_path: Path, model_type: str, words: tuple[str, ...]
) -> None:
    (plugin_path / "broken.py").write_text("build = 1 / 0\n")
    with pytest.raises(ConfigError) as caught:
        resolve_model_code(canonical_config({"DATA_ROOT": "/d", "TARGET_COLUMN": "y", "MODEL_TYPE": model_type}))
    assert caught.value.message.startswith(f"MODEL_TYPE={model_type!r}")
    for word in words:
        assert word in caught.value.message


def test_builtins_have_no_code_and_plugins_need_theirs(plugin_path: Path) -> None:
    builtin = canonical_config({"DATA_ROOT": "/d", "TARGET_COLUMN": "y"})
    assert builtin["model_code"] is None and resolve_model_code(builtin) == builtin
    unresolved = canonical_config({"DATA_ROOT": "/d", "TARGET_COLUMN": "y", "MODEL_TYPE": FAMILY})
    assert "resolved at bootstrap" in (model_code_problem(unresolved) or "")
    resolved = resolve_model_code(unresolved)
    assert model_code_problem(resolved) is None
    assert model_code_problem({**builtin, "model_code": resolved["model_code"]}) == (
        f"model_code is {resolved['model_code']!r} for the built-in MODEL_TYPE='mlp'; expected null"
    )
    ids = {compute_identity(c, "f" * 64).run_id for c in (builtin, resolved)}
    assert len(ids) == 2


# ------------------------------------------------------------------------------------ code identity


def test_code_identity_hashes_every_code_file_of_the_package(plugin_path: Path) -> None:
    ref = PluginRef(module=f"{PKG}.models", attribute="family")
    first = code_identity(ref)
    assert first.startswith("sha256:") and len(first) == len("sha256:") + 64
    (plugin_path / "__pycache__").mkdir()
    (plugin_path / "__pycache__" / "models.cpython-311.pyc").write_bytes(b"\x00stale")
    (plugin_path / "README.txt").write_text("docs are not code")
    assert code_identity(ref) == first  # byte caches and non-code files do not count
    (plugin_path / "sub").mkdir()
    (plugin_path / "sub" / "extra.py").write_text("X = 1\n")
    second = code_identity(ref)
    assert second != first  # a new module anywhere in the package counts
    (plugin_path / "sub" / "extra.py").write_text("X = 2\n")
    assert code_identity(ref) not in (first, second)


def test_code_identity_is_the_same_in_another_process(plugin_path: Path) -> None:
    here = code_identity(PluginRef(module=f"{PKG}.models", attribute="family"))
    code = (
        "from ml8s.identity.model_code import PluginRef\nfrom ml8s.modeling.plugins import code_identity\n"
        f"print(code_identity(PluginRef(module='{PKG}.models', attribute='family')))"
    )
    env = {"PYTHONPATH": os.pathsep.join((str(plugin_path.parent), str(REPO)))}
    done = subprocess.run([sys.executable, "-c", code], cwd="/", env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == here


def test_single_module_plugin_hashes_its_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "ml8s_single_plugin.py").write_text("def build(spec):\n    return None\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    ref = PluginRef(module="ml8s_single_plugin", attribute="build")
    import hashlib

    digest = hashlib.sha256((tmp_path / "ml8s_single_plugin.py").read_bytes()).hexdigest()
    expected = hashlib.sha256(f"ml8s_single_plugin.py:{digest}".encode()).hexdigest()
    assert code_identity(ref) == f"sha256:{expected}"


def test_zipped_plugin_takes_its_distribution_version(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No code file on disk to hash (a zip import): the installed distribution's version is the identity."""
    archive = tmp_path / "zipped.zip"
    with zipfile.ZipFile(archive, "w") as zipped:
        zipped.writestr("ml8s_zipped_plugin/__init__.py", "def build(spec):\n    return None\n")
    meta = tmp_path / "site" / "ml8s_zipped_plugin-1.2.3.dist-info"
    meta.mkdir(parents=True)
    (meta / "METADATA").write_text("Metadata-Version: 2.1\nName: ml8s-zipped-plugin\nVersion: 1.2.3\n")
    (meta / "top_level.txt").write_text("ml8s_zipped_plugin\n")
    ref = PluginRef(module="ml8s_zipped_plugin", attribute="build")
    monkeypatch.syspath_prepend(str(archive))
    with pytest.raises(ConfigError, match="no code files to hash and no installed distribution"):
        code_identity(ref)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    assert code_identity(ref) == "dist:ml8s-zipped-plugin==1.2.3"
    sys.modules.pop("ml8s_zipped_plugin", None)


# ------------------------------------------------------------------------------------ the family interface


def test_plugin_family_builds_and_steps_with_its_own_train_step(plugin_path: Path) -> None:
    import torch

    from ml8s.modeling.registry import family_for

    code = resolve_model_code(canonical_config({"DATA_ROOT": "/d", "TARGET_COLUMN": "y", "MODEL_TYPE": FAMILY}))
    family = family_for(FAMILY, code["model_code"])
    torch.manual_seed(0)
    model = family.build(spec())
    assert [type(m).__name__ for m in model.children()] == ["Linear", "Sequential", "Linear"]
    x, y = torch.zeros(4, 5), torch.tensor([0, 1, 2, 0])
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    with torch.no_grad():
        expected = torch.nn.functional.cross_entropy(model(x), y, label_smoothing=0.1)
    assert family.train_step is not None
    loss = family.train_step(model, optimizer, x, y)
    assert torch.equal(loss.detach(), expected)  # the plug-in's smoothed loss, not ml8s's default
    assert families.architecture(spec()) == f"{FAMILY}:5-3"


def test_bare_build_function_gets_the_default_step(plugin_path: Path) -> None:
    from ml8s.modeling.registry import cross_entropy_step, family_for

    model_type = f"plugin:{PKG}.models:build"
    code = resolve_model_code(canonical_config({"DATA_ROOT": "/d", "TARGET_COLUMN": "y", "MODEL_TYPE": model_type}))
    family = family_for(model_type, code["model_code"])
    model = family.build(spec(model_type))
    assert type(model).__name__ == "Residual"
    assert family.train_step is not None and family.train_step is not cross_entropy_step  # checked wrapper
    builtin = family_for("mlp", None)
    assert builtin.train_step is cross_entropy_step


def test_training_refuses_code_other_than_the_recorded(plugin_path: Path) -> None:
    from ml8s.modeling.registry import family_for

    code = resolve_model_code(canonical_config({"DATA_ROOT": "/d", "TARGET_COLUMN": "y", "MODEL_TYPE": FAMILY}))
    (plugin_path / "blocks.py").write_text(textwrap.dedent(BLOCKS).replace("SCALE = 1.0", "SCALE = 2.0"))
    with pytest.raises(ModelCodeChangedError, match=r"the plug-in's code is sha256:.*but the run recorded"):
        family_for(FAMILY, code["model_code"])


def test_a_build_that_returns_no_module_is_a_training_error(plugin_path: Path) -> None:
    from ml8s.modeling.registry import family_for

    model_type = f"plugin:{PKG}.models:returns_a_string"
    code = resolve_model_code(canonical_config({"DATA_ROOT": "/d", "TARGET_COLUMN": "y", "MODEL_TYPE": model_type}))
    with pytest.raises(TrainingError, match=r"built a str; expected a torch\.nn\.Module"):
        family_for(model_type, code["model_code"]).build(spec(model_type))


def test_plugin_exceptions_and_bad_losses_are_training_errors(plugin_path: Path) -> None:
    import torch

    from ml8s.modeling.registry import family_for

    for attribute, words in (("raises", "its build raised RuntimeError: boom"), ("float_step", "returned float")):
        model_type = f"plugin:{PKG}.models:{attribute}"
        resolved = resolve_model_code(
            canonical_config({"DATA_ROOT": "/d", "TARGET_COLUMN": "y", "MODEL_TYPE": model_type})
        )
        family = family_for(model_type, resolved["model_code"])
        with pytest.raises(TrainingError, match=words):
            model = family.build(spec(model_type))
            assert family.train_step is not None
            family.train_step(model, torch.optim.Adam(model.parameters()), torch.zeros(2, 5), torch.tensor([0, 1]))


def test_parse_model_type() -> None:
    assert parse_model_type("mlp") is None and parse_model_type("logreg") is None
    assert parse_model_type("plugin:a.b_c.d:make") == PluginRef(module="a.b_c.d", attribute="make")
    for bad in ("MLP", "plugin:", "plugin:a:b:c", "plugin:a-b:c", None, 3, ["a", "b"]):
        with pytest.raises(ConfigError, match="MODEL_TYPE="):
            parse_model_type(bad)
    with pytest.raises(ConfigError, match="is a plug-in: it has no layer list"):
        families.parameter_count(spec())


def test_a_plugin_exported_as_safetensors_is_refused_at_bootstrap(plugin_path: Path) -> None:
    # it trained and wrote every artifact and the registry claim, then failed registering ("no layer list")
    config = canonical_config(
        {"DATA_ROOT": "/d", "TARGET_COLUMN": "y", "MODEL_TYPE": FAMILY, "MODEL_FORMAT": "safetensors"}
    )
    with pytest.raises(ConfigError, match=r"MODEL_FORMAT='safetensors': .* expected MODEL_FORMAT=onnx for a plug-in"):
        resolve_model_code(config)
    onnx = canonical_config({"DATA_ROOT": "/d", "TARGET_COLUMN": "y", "MODEL_TYPE": FAMILY, "MODEL_FORMAT": "onnx"})
    assert str(resolve_model_code(onnx)["model_code"]).startswith("sha256:")


def test_only_a_plugin_with_its_own_train_step_is_refused_by_ranks(plugin_path: Path, tmp_path: Path) -> None:
    # every plug-in's step was wrapped, so TRAIN_WORLD_SIZE=2 refused a bare build function as "brings its own
    # train_step"; the ranks' check is brings_own_step, and the refusal comes before any rank trains
    from conftest import make_context, write_small_churn

    from ml8s.modeling import ModelFamily
    from ml8s.modeling.registry import brings_own_step, family_for
    from ml8s.training import ranks

    def family(attribute: str) -> ModelFamily:
        model_type = f"plugin:{PKG}.models:{attribute}"
        config = canonical_config({"DATA_ROOT": "/d", "TARGET_COLUMN": "y", "MODEL_TYPE": model_type})
        return family_for(model_type, resolve_model_code(config)["model_code"])

    assert not brings_own_step(family("build"))
    assert brings_own_step(family("family"))
    assert not brings_own_step(family_for("mlp", None))
    data = write_small_churn(tmp_path / "data")
    ctx = make_context(data, tmp_path / "root", MODEL_TYPE=FAMILY, TRAIN_WORLD_SIZE="2")
    world = ranks.RankEnv(rank=0, local_rank=0, world_size=2)
    with pytest.raises(ranks.RankError, match="brings its own train_step"):
        ranks.train_rank(ctx.spec, str(tmp_path / "features"), str(tmp_path / "out"), world)
