"""`pyflyte run` never lies about an input: an inputs file, command-line flags and the environment give the
same RUN_ID for every input (false, 0 and whole floats included), an empty input takes the environment, a
mistyped value in an inputs file is one line naming it (flags: tests/test_workflow.py), and an ml8s error
inside the workflow is one line, no traceback.

The bootstrap task alone is run (``pyflyte run workflows/training.py bootstrap_run``: the workflow's inputs,
the same patched command line, no training), so each case costs one process start."""

from __future__ import annotations

import datetime
import json
import os
import re
import subprocess
from pathlib import Path
from typing import NamedTuple

import pytest
from conftest import write_small_churn
from forked_cli import forked_pyflyte

from ml8s.errors import StoreError
from ml8s.pipeline.bootstrap import bootstrap

REPO = Path(__file__).resolve().parent.parent
_RUN_LINE = re.compile(r"\[bootstrap\] run ([0-9a-f]{12}):")


class Case(NamedTuple):
    data: Path
    other: Path
    home: Path


@pytest.fixture(scope="module")
def case(tmp_path_factory: pytest.TempPathFactory) -> Case:
    base = tmp_path_factory.mktemp("flyte_inputs")
    home = base / "home"
    (home / "tmp").mkdir(parents=True)
    return Case(write_small_churn(base / "data", rows=60), write_small_churn(base / "other", rows=80), home)


# Every input at a value that is not its default (false, 0 and a whole float among them) ...
def _given(case: Case) -> dict[str, object]:
    return {
        "data_root": str(case.data),
        "target_column": "churned",
        "model_format": "safetensors",
        "model_type": "logreg",
        "test_size": 0.25,
        "random_seed": 0,
        "sample_rows": 50,
        "max_features": 3,
        "exclude_columns": "customer_id",
        "standardize": False,
        "hidden_units": 8,
        "hidden_layers": 1,
        "epochs": 2,
        "batch_size": 16,
        "learning_rate": 1.0,
        "train_device": "cpu",
        "sampler_alpha": 0.5,
        "train_world_size": 1,
        "force_rerun": False,
    }


# ... and an environment that sets every variable to something else, so an input that were ignored would
# take this value and change the RUN_ID.
def _other_env(case: Case) -> dict[str, str]:
    return {
        "DATA_ROOT": str(case.other),
        "TARGET_COLUMN": "plan",
        "MODEL_FORMAT": "onnx",
        "MODEL_TYPE": "mlp",
        "TEST_SIZE": "0.3",
        "RANDOM_SEED": "7",
        "SAMPLE_ROWS": "40",
        "MAX_FEATURES": "5",
        "EXCLUDE_COLUMNS": "tenure",
        "STANDARDIZE": "true",
        "HIDDEN_UNITS": "16",
        "HIDDEN_LAYERS": "3",
        "EPOCHS": "4",
        "BATCH_SIZE": "32",
        "LEARNING_RATE": "0.002",
        "TRAIN_DEVICE": "cpu",
        "SAMPLER_ALPHA": "2",
        "TRAIN_WORLD_SIZE": "2",
        "FORCE_RERUN": "true",
    }


def _env_text(value: object) -> str:
    """How a user writes the value in the environment (whole numbers without a point)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _pyflyte(case: Case, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k not in _other_env(case) and not k.startswith("MLFLOW_")}
    clean.update(HOME=str(case.home), TMPDIR=str(case.home / "tmp"), PIPELINE_ROOT_URI=str(case.home / "root"))
    return forked_pyflyte(["run", "workflows/training.py", "bootstrap_run", *args], clean | env, cwd=REPO)


def _run_id(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 0, f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    (run_id,) = _RUN_LINE.findall(done.stderr)
    return run_id


def _forced(done: subprocess.CompletedProcess[str]) -> bool:
    """The resolved FORCE_RERUN, from the task's output (the run context flytekit prints)."""
    (flag,) = set(re.findall(r"force_rerun=(True|False)", done.stdout))
    return flag == "True"


def test_inputs_file_flags_and_environment_give_one_run_id(case: Case, tmp_path: Path) -> None:
    given = _given(case)
    expected = bootstrap(
        {name.upper(): _env_text(value) for name, value in given.items()}
        | {"PIPELINE_ROOT_URI": str(tmp_path / "root")}
    ).run_id
    inputs = tmp_path / "inputs.yaml"
    inputs.write_text("".join(f"{name}: {json.dumps(value)}\n" for name, value in given.items()))
    by_file = _pyflyte(case, _other_env(case), "--inputs-file", str(inputs))
    flags = [word for name, value in given.items() for word in (f"--{name}", _env_text(value))]
    by_flags = _pyflyte(case, _other_env(case), *flags)
    by_env = _pyflyte(case, {name.upper(): _env_text(value) for name, value in given.items()})
    assert _run_id(by_file) == _run_id(by_flags) == _run_id(by_env) == expected
    assert not any(_forced(done) for done in (by_file, by_flags, by_env))  # false overrode FORCE_RERUN=true


def test_standardize_false_in_an_inputs_file_is_false(case: Case, tmp_path: Path) -> None:
    """The defect as filed: `standardize: false` was dropped (the run took STANDARDIZE's default, true) and
    `standardize: true` broke the command line."""
    base = {"DATA_ROOT": str(case.data), "TARGET_COLUMN": "churned", "PIPELINE_ROOT_URI": str(tmp_path)}
    for value in ("false", "true"):
        inputs = tmp_path / f"{value}.yaml"
        inputs.write_text(f"standardize: {value}\n")
        expected = bootstrap({**base, "STANDARDIZE": value}).run_id
        assert _run_id(_pyflyte(case, {**base, "STANDARDIZE": "maybe"}, "--inputs-file", str(inputs))) == expected


def test_empty_or_null_inputs_take_the_environment(case: Case, tmp_path: Path) -> None:
    env = {"DATA_ROOT": str(case.data), "TARGET_COLUMN": "churned", "EPOCHS": "3", "EXCLUDE_COLUMNS": "plan"}
    expected = bootstrap(env | {"PIPELINE_ROOT_URI": str(tmp_path)}).run_id
    inputs = tmp_path / "inputs.yaml"
    inputs.write_text('epochs: null\nexclude_columns: ""\nstandardize: null\n')
    assert _run_id(_pyflyte(case, env, "--epochs", "", "--exclude_columns", "")) == expected
    assert _run_id(_pyflyte(case, env, "--inputs-file", str(inputs))) == expected


def test_a_bad_file_value_is_one_line_naming_it(case: Case, tmp_path: Path) -> None:
    inputs = tmp_path / "inputs.yaml"
    inputs.write_text("standardize: maybe\n")
    done = _pyflyte(case, {"DATA_ROOT": str(case.data), "TARGET_COLUMN": "churned"}, "--inputs-file", str(inputs))
    text = " ".join((done.stdout + done.stderr).split())
    assert done.returncode != 0 and "Invalid value for '--standardize': 'maybe' is not a valid boolean" in text
    assert "Traceback" not in text


@pytest.mark.parametrize(
    ("value", "kind"), [(["tenure", "plan"], "a list"), ({"a": 1}, "a mapping"), (datetime.date(2024, 1, 1), "a date")]
)
def test_an_inputs_file_value_that_is_no_scalar_is_refused(value: object, kind: str) -> None:
    """A YAML list became its JSON text ('["tenure", "plan"]': EXCLUDE_COLUMNS of two odd names, found missing only
    by the snapshot task), a mapping likewise, and a date a TypeError traceback."""
    import click

    from tasks.pyflyte_cli import _words

    with pytest.raises(click.BadParameter, match=f"^exclude_columns is {kind} "):
        _words({"exclude_columns": value})
    assert _words({"epochs": 3, "test_size": 0.25, "standardize": False, "model_type": "mlp", "warm_start": None}) == [
        *("--epochs", "3", "--test_size", "0.25", "--standardize", "false", "--model_type", "mlp")
    ]


def test_an_ml8s_error_from_a_task_reaches_the_terminal_escaped(capsys: pytest.CaptureFixture[str]) -> None:
    """pyflyte's one line for an ml8s error (``ml8s: CODE: message``) wrote the message as it was: a store key
    holding an escape sequence and a carriage return cleared the terminal and wrote over the line."""
    from tasks.pyflyte_cli import _print_one_line

    wrapped = RuntimeError("flytekit's wrapping")  # a task's exception reaches pyflyte wrapped
    wrapped.__cause__ = StoreError("s3://b/runs/a\x1b[2Jb\rc does not exist")
    _print_one_line(wrapped, verbosity=0)
    assert capsys.readouterr().err == "ml8s: STORE_ERROR: s3://b/runs/a\\x1b[2Jb\\rc does not exist\n"


def test_an_inputs_file_list_is_one_usage_error(case: Case, tmp_path: Path) -> None:
    inputs = tmp_path / "inputs.yaml"
    inputs.write_text("exclude_columns: [tenure, plan]\n")
    done = _pyflyte(case, {"DATA_ROOT": str(case.data), "TARGET_COLUMN": "churned"}, "--inputs-file", str(inputs))
    text = " ".join((done.stdout + done.stderr).replace("│", " ").split())  # pyflyte boxes the message
    assert done.returncode == 2 and "Traceback" not in text and done.stdout == "", text
    assert "Invalid value for --inputs-file: exclude_columns is a list (['tenure', 'plan'])" in text


def test_an_inputs_file_that_is_not_utf8_is_a_usage_error(case: Case, tmp_path: Path) -> None:
    """A file saved in Latin-1 was a UnicodeDecodeError traceback, printed on stdout."""
    inputs = tmp_path / "inputs.yaml"
    inputs.write_bytes("target_column: café\n".encode("latin-1"))
    done = _pyflyte(case, {"DATA_ROOT": str(case.data)}, "--inputs-file", str(inputs))
    text = " ".join((done.stdout + done.stderr).replace("│", " ").split())  # pyflyte boxes the message
    assert done.returncode == 2 and "Traceback" not in text and done.stdout == "", text
    assert "Invalid value for --inputs-file:" in text and "is not UTF-8 text (byte 0xe9 at offset 18)" in text


def test_an_ml8s_error_inside_the_workflow_is_one_line(case: Case) -> None:
    """`--target_column Nope` passes bootstrap (the column is checked against the data by the snapshot task):
    the task's DATA_ERROR is printed as `ml8s run` prints it, without flytekit's traceback."""
    env = {k: v for k, v in os.environ.items() if k not in _other_env(case) and not k.startswith("MLFLOW_")}
    env.update(HOME=str(case.home), TMPDIR=str(case.home / "tmp"), PIPELINE_ROOT_URI=str(case.home / "nope"))
    args = ["run", "workflows/training.py", "training_pipeline", "--data_root", str(case.data)]
    done = forked_pyflyte([*args, "--target_column", "Nope"], env, cwd=REPO)
    assert done.returncode == 1
    assert "Traceback" not in done.stdout + done.stderr
    (line,) = [line for line in done.stderr.splitlines() if line.startswith("ml8s: ")]
    assert line.startswith("ml8s: DATA_ERROR: TARGET_COLUMN='Nope' is not a column of the data; expected one of")
