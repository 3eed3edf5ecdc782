"""SPEC §11: every bad input fails with one clear message naming the variable or file and what was
expected, before anything is written under ARTIFACT_ROOT.

Every case here fails in bootstrap (configuration, fingerprint) or in the snapshot step (data loaded
and checked against the configuration), so nothing trains and the file runs in a few seconds.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import write_small_churn

from ml8s.contract import layout
from ml8s.data import fingerprint
from ml8s.errors import ConfigError, DataChangedError, DataError, Ml8sError
from ml8s.identity.settings import PLATFORM_VARIABLES
from ml8s.identity.variables import USER_VARIABLES
from ml8s.pipeline.bootstrap import bootstrap
from ml8s.pipeline.run import run_pipeline
from ml8s.pipeline.snapshot import snapshot

HEADER = "customer_id,tenure,monthly_charges,plan,auto_pay,churned"
FEATURES = "customer_id,tenure,monthly_charges,plan,auto_pay"
UNSET = "<unset>"  # an env value meaning "remove the variable"

Mutation = Callable[[Path], None]


@dataclass(frozen=True)
class Case:
    """One bad input: env overrides and/or a change to the data directory, and what must be raised."""

    error: type[Ml8sError]
    needles: tuple[str, ...]  # substrings the message must contain: the variable or file, what was expected
    env: dict[str, str] = field(default_factory=dict)
    mutate: Mutation | None = None


# -- data mutations (the data directory starts as conftest's part-000.csv + part-001.csv) ---------------------


def _clear(data: Path) -> None:
    for path in data.iterdir():
        path.unlink()


def _empty_dir(data: Path) -> None:
    _clear(data)


def _zero_byte_csv(data: Path) -> None:
    (data / "part-002.csv").write_bytes(b"")


def _header_only(data: Path) -> None:
    for name in ("part-000.csv", "part-001.csv"):
        (data / name).write_text(HEADER + "\n")


def _unsupported_extension(data: Path) -> None:
    (data / "notes.txt").write_text("collected in 2024\n")


def _garbage_parquet(data: Path) -> None:
    (data / "part-002.parquet").write_bytes(bytes(range(256)) * 3)


def _invalid_utf8_row(data: Path) -> None:
    (data / "part-001.csv").write_bytes(HEADER.encode() + b"\nC1,3,20.5,ba\xff\xfesic,true,yes\n")


def _invalid_utf8_header(data: Path) -> None:
    (data / "part-001.csv").write_bytes(
        b"customer_id,ten\xffure,monthly_charges,plan,auto_pay,churned\nC1,3,2,a,true,no\n"
    )


def _ragged_rows(data: Path) -> None:
    (data / "part-001.csv").write_text(HEADER + "\nC1,3,20.5,basic,true,yes,surplus\n")


def _unterminated_quote(data: Path) -> None:
    (data / "part-001.csv").write_text(HEADER + '\nC1,3,20.5,"basic,true,yes\n')


def _blank_column_name(data: Path) -> None:
    (data / "part-001.csv").write_text("customer_id,tenure,,plan,auto_pay,churned\nC1,3,20.5,basic,true,yes\n")


def _duplicate_column(data: Path) -> None:
    (data / "part-001.csv").write_text("customer_id,tenure,tenure,plan,auto_pay,churned\nC1,3,20.5,basic,true,yes\n")


def _different_columns(data: Path) -> None:
    (data / "part-001.csv").write_text("customer_id,tenure,region,plan,auto_pay,churned\nC1,3,north,basic,true,yes\n")


def _single_class(data: Path) -> None:
    _clear(data)
    rows = [f"C{i},{i},{i}.5,basic,true,yes" for i in range(50)]
    (data / "part-000.csv").write_text("\n".join([HEADER, *rows]) + "\n")


def _category_named_like_a_bucket(data: Path) -> None:
    text = (data / "part-001.csv").read_text().splitlines()
    text[2] = text[2].replace(",basic,", ",__other__,").replace(",plus,", ",__other__,").replace(",pro,", ",__other__,")
    (data / "part-001.csv").write_text("\n".join(text) + "\n")


def _target_always_missing_csv(data: Path) -> None:
    _clear(data)
    rows = [f"C{i},{i},{i}.5,basic,true," for i in range(50)]
    (data / "part-000.csv").write_text("\n".join([HEADER, *rows]) + "\n")


def _target_always_missing_parquet(data: Path) -> None:
    # A typed (float64) all-null target: once crashed with an IndexError instead of a DataError.
    _clear(data)
    table = pa.table({"tenure": [1.0, 2.0, 3.0, 4.0], "churned": pa.array([None] * 4, type=pa.float64())})
    pq.write_table(table, data / "part-000.parquet")


def _one_labelled_row(data: Path) -> None:
    _clear(data)
    (data / "part-000.csv").write_text("tenure,churned\n1,yes\n2,\n3,\n")


def _incompatible_parquet_column(data: Path) -> None:
    _clear(data)
    table = pa.table({"tags": pa.array([[1], [2], [3], [4]]), "churned": ["a", "b", "a", "b"]})
    pq.write_table(table, data / "part-000.parquet")


def _broken_symlink(data: Path) -> None:
    os.symlink(data / "does-not-exist.csv", data / "part-002.csv")


def _unreadable_file(data: Path) -> None:
    (data / "part-001.csv").chmod(0)


def _refuse_reading(monkeypatch: pytest.MonkeyPatch, path: Path) -> None:
    real_open = os.open

    def guarded(file: str, flags: int, *args: int, **kwargs: int | None) -> int:
        if str(file) == str(path):
            raise PermissionError(13, "Permission denied", str(file))
        return real_open(file, flags, *args, **kwargs)

    monkeypatch.setattr(fingerprint.os, "open", guarded)  # data files are opened with os.open (O_NONBLOCK)


CASES: dict[str, Case] = {
    # -- malformed numbers ----------------------------------------------------------------------------------
    "test_size_zero": Case(ConfigError, ("TEST_SIZE=0", "strictly between 0 and 1"), {"TEST_SIZE": "0"}),
    "test_size_one": Case(ConfigError, ("TEST_SIZE=1", "strictly between 0 and 1"), {"TEST_SIZE": "1"}),
    "test_size_above_one": Case(ConfigError, ("TEST_SIZE=1.5", "strictly between 0 and 1"), {"TEST_SIZE": "1.5"}),
    "test_size_text": Case(ConfigError, ("TEST_SIZE='abc'", "strictly between 0 and 1"), {"TEST_SIZE": "abc"}),
    "test_size_negative": Case(ConfigError, ("TEST_SIZE=-0.1", "strictly between 0 and 1"), {"TEST_SIZE": "-0.1"}),
    # valid alone, but it left one row of 60 to train on, silently (the held-out side is at least 1 row anyway)
    "test_size_leaves_one_training_row": Case(
        DataError,
        ("TEST_SIZE=0.999 of the 60 rows kept holds out 59, leaving 1 to train on", "at least 2 training rows"),
        {"TEST_SIZE": "0.999"},
    ),
    "seed_negative": Case(ConfigError, ("RANDOM_SEED=-1", "an integer >= 0"), {"RANDOM_SEED": "-1"}),
    "seed_fraction": Case(ConfigError, ("RANDOM_SEED=1.5", "an integer >= 0"), {"RANDOM_SEED": "1.5"}),
    # "007" is no JSON number, so it stays text: the message says so and how to write it (it said "an integer"
    # alone, which 007 looks like)
    "seed_leading_zero": Case(
        ConfigError,
        ("RANDOM_SEED='007'", "an integer >= 0", "'007' is read as text, not a number", "write 7"),
        {"RANDOM_SEED": "007"},
    ),
    "epochs_plus": Case(ConfigError, ("EPOCHS='+5'", "read as text", "no '+'", "write 5"), {"EPOCHS": "+5"}),
    "learning_rate_no_leading_digit": Case(
        ConfigError, ("LEARNING_RATE='.001'", "a number > 0", "read as text", "write 0.001"), {"LEARNING_RATE": ".001"}
    ),
    "test_size_trailing_point": Case(
        ConfigError, ("TEST_SIZE='1.e-1'", "strictly between", "write 0.1"), {"TEST_SIZE": "1.e-1"}
    ),
    # 1e3 matches the JSON number grammar with an exponent, so it normalizes to the float 1000.0
    "seed_exponent": Case(
        ConfigError,
        ("RANDOM_SEED=1000.0", "no sign, fraction or exponent", "written with a fraction or an exponent: write 1000"),
        {"RANDOM_SEED": "1e3"},
    ),
    "epochs_zero": Case(ConfigError, ("EPOCHS=0", "an integer >= 1"), {"EPOCHS": "0"}),
    "epochs_word": Case(ConfigError, ("EPOCHS='ten'", "an integer >= 1"), {"EPOCHS": "ten"}),
    "batch_size_zero": Case(ConfigError, ("BATCH_SIZE=0", "an integer >= 1"), {"BATCH_SIZE": "0"}),
    "learning_rate_zero": Case(ConfigError, ("LEARNING_RATE=0", "a number > 0"), {"LEARNING_RATE": "0"}),
    "learning_rate_negative": Case(ConfigError, ("LEARNING_RATE=-1", "a number > 0"), {"LEARNING_RATE": "-1"}),
    "learning_rate_nan": Case(ConfigError, ("LEARNING_RATE='nan'", "a number > 0"), {"LEARNING_RATE": "nan"}),
    "learning_rate_overflow": Case(
        ConfigError, ("LEARNING_RATE='1e999'", "expected a finite number"), {"LEARNING_RATE": "1e999"}
    ),
    "hidden_units_zero": Case(ConfigError, ("HIDDEN_UNITS=0", "an integer >= 1"), {"HIDDEN_UNITS": "0"}),
    "hidden_units_boolean": Case(ConfigError, ("HIDDEN_UNITS=true", "an integer >= 1"), {"HIDDEN_UNITS": "TRUE"}),
    "hidden_layers_negative": Case(ConfigError, ("HIDDEN_LAYERS=-1", "an integer >= 0"), {"HIDDEN_LAYERS": "-1"}),
    "sample_rows_zero": Case(ConfigError, ("SAMPLE_ROWS=0", "an integer >= 1"), {"SAMPLE_ROWS": "0"}),
    "max_features_zero": Case(ConfigError, ("MAX_FEATURES=0", "an integer >= 1"), {"MAX_FEATURES": "0"}),
    # -- unknown choices ------------------------------------------------------------------------------------
    "model_format_joblib": Case(
        ConfigError, ("MODEL_FORMAT='joblib'", "one of onnx, safetensors"), {"MODEL_FORMAT": "joblib"}
    ),
    "model_type_xgboost": Case(ConfigError, ("MODEL_TYPE='xgboost'", "one of mlp, logreg"), {"MODEL_TYPE": "xgboost"}),
    "train_device_tpu": Case(ConfigError, ("TRAIN_DEVICE='tpu'", "one of cpu, cuda"), {"TRAIN_DEVICE": "tpu"}),
    "standardize_maybe": Case(ConfigError, ("STANDARDIZE='maybe'", "true or false"), {"STANDARDIZE": "maybe"}),
    # -- required variables, URIs ---------------------------------------------------------------------------
    "data_root_unset": Case(ConfigError, ("DATA_ROOT", "required"), {"DATA_ROOT": UNSET}),
    "data_root_blank": Case(ConfigError, ("DATA_ROOT", "required"), {"DATA_ROOT": "   "}),
    "data_root_ftp": Case(
        ConfigError, ("DATA_ROOT='ftp://x'", "expected a local path, file:// or s3://"), {"DATA_ROOT": "ftp://x"}
    ),
    "data_root_nonexistent": Case(
        DataError,
        ("DATA_ROOT", "no-such-dir", "does not exist", "expected a data file or directory"),
        {"DATA_ROOT": "{tmp}/no-such-dir"},
    ),
    "target_unset": Case(ConfigError, ("TARGET_COLUMN", "required"), {"TARGET_COLUMN": UNSET}),
    "target_blank": Case(ConfigError, ("TARGET_COLUMN", "required"), {"TARGET_COLUMN": "  "}),
    # a comma list names a column whose header holds those parts (test_column_names.py); here there is none
    "target_list": Case(DataError, ("TARGET_COLUMN='a,b'", "not a column of the data"), {"TARGET_COLUMN": "a,b"}),
    "target_not_a_column": Case(
        DataError, ("TARGET_COLUMN='label'", "not a column", "expected one of"), {"TARGET_COLUMN": "label"}
    ),
    "exclude_unknown_column": Case(
        DataError, ("EXCLUDE_COLUMNS", "'ghost'", "not columns of the data"), {"EXCLUDE_COLUMNS": "ghost,plan"}
    ),
    "exclude_contains_target": Case(
        DataError,
        ("EXCLUDE_COLUMNS", "contains the target 'churned'", "expected feature columns only"),
        {"EXCLUDE_COLUMNS": "plan,churned"},
    ),
    "exclude_every_feature": Case(
        DataError,
        ("no feature columns are left after EXCLUDE_COLUMNS", "expected at least one"),
        {"EXCLUDE_COLUMNS": FEATURES},
    ),
    "pipeline_root_gs": Case(
        ConfigError,
        ("PIPELINE_ROOT_URI='gs://bucket'", "expected a local path, file:// or s3://"),
        {"PIPELINE_ROOT_URI": "gs://bucket"},
    ),
    "force_rerun_perhaps": Case(ConfigError, ("FORCE_RERUN='perhaps'", "true or false"), {"FORCE_RERUN": "perhaps"}),
    "strict_identity_sometimes": Case(
        ConfigError, ("STRICT_DATA_IDENTITY='sometimes'", "true or false"), {"STRICT_DATA_IDENTITY": "sometimes"}
    ),
    "tmp_retention_negative": Case(
        ConfigError, ("TMP_RETENTION_DAYS='-1'", "a whole number of days"), {"TMP_RETENTION_DAYS": "-1"}
    ),
    # -- bad data -------------------------------------------------------------------------------------------
    "empty_data_dir": Case(
        DataError, ("DATA_ROOT", "holds no files", "expected at least one data file"), mutate=_empty_dir
    ),
    "zero_byte_csv": Case(DataError, ("part-002.csv", "is empty", "expected a header line"), mutate=_zero_byte_csv),
    "header_only": Case(DataError, ("DATA_ROOT", "no data rows", "expected at least 2 rows"), mutate=_header_only),
    "unsupported_extension": Case(
        DataError, ("notes.txt", "unsupported format", "expected .csv or .parquet"), mutate=_unsupported_extension
    ),
    "garbage_parquet": Case(DataError, ("part-002.parquet", "cannot be parsed as parquet"), mutate=_garbage_parquet),
    "invalid_utf8_row": Case(DataError, ("part-001.csv", "cannot be parsed as csv", "UTF8"), mutate=_invalid_utf8_row),
    "invalid_utf8_header": Case(
        DataError, ("part-001.csv", "cannot be parsed as csv", "utf-8"), mutate=_invalid_utf8_header
    ),
    "ragged_rows": Case(DataError, ("part-001.csv", "Expected 6 columns, got 7"), mutate=_ragged_rows),
    "unterminated_quote": Case(DataError, ("part-001.csv", "cannot be parsed as csv"), mutate=_unterminated_quote),
    "blank_column_name": Case(
        DataError, ("part-001.csv", "blank column name", "expected named columns"), mutate=_blank_column_name
    ),
    "duplicate_column": Case(
        DataError, ("part-001.csv", "repeats column(s) ['tenure']", "expected unique names"), mutate=_duplicate_column
    ),
    "different_columns": Case(
        DataError, ("part-001.csv", "'region'", "expected the columns of part-000.csv"), mutate=_different_columns
    ),
    "single_class_target": Case(
        DataError, ("TARGET_COLUMN='churned'", "one class", "expected 2 or more"), mutate=_single_class
    ),
    "category_named_like_a_bucket": Case(
        DataError, ("part-001.csv", "column 'plan'", "data row 2", "'__other__'"), mutate=_category_named_like_a_bucket
    ),
    "target_missing_everywhere_csv": Case(
        DataError,
        ("TARGET_COLUMN='churned'", "only 0 row(s)", "expected at least 2"),
        mutate=_target_always_missing_csv,
    ),
    "target_missing_everywhere_parquet": Case(
        DataError,
        ("TARGET_COLUMN='churned'", "only 0 row(s)", "expected at least 2"),
        mutate=_target_always_missing_parquet,
    ),
    "one_labelled_row": Case(
        DataError, ("TARGET_COLUMN='churned'", "only 1 row(s)", "expected at least 2"), mutate=_one_labelled_row
    ),
    "unreadable_parquet_type": Case(
        DataError,
        ("data file part-000.parquet", "column 'tags' is of type list<", "expected numbers, booleans, decimals, dates"),
        mutate=_incompatible_parquet_column,
    ),
    "broken_symlink": Case(DataError, ("broken symlink", "part-002.csv"), mutate=_broken_symlink),
    "unreadable_file": Case(DataError, ("part-001.csv", "cannot read"), mutate=_unreadable_file),
    # -- environment ----------------------------------------------------------------------------------------
    "cuda_without_gpu": Case(
        ConfigError, ("TRAIN_DEVICE='cuda'", "no CUDA device", "expected cpu"), {"TRAIN_DEVICE": "cuda"}
    ),
}


def _cuda_available() -> bool:
    import torch

    return bool(torch.cuda.is_available())


def _env(data: Path, root: Path, overrides: dict[str, str]) -> dict[str, str]:
    env = {"DATA_ROOT": str(data), "TARGET_COLUMN": "churned", "PIPELINE_ROOT_URI": str(root), "EPOCHS": "1"}
    for name, value in overrides.items():
        if value == UNSET:
            env.pop(name, None)
        else:
            env[name] = value.replace("{tmp}", str(data.parent))
    return env


def written_files(root: Path) -> list[str]:
    """Every file under ``{root}/ml8s_training_runs`` (the directory may be absent)."""
    runs = root / layout.RUNS_DIR
    return sorted(str(p.relative_to(runs)) for p in runs.rglob("*") if not p.is_dir()) if runs.exists() else []


def test_at_least_24_cases() -> None:
    assert len(CASES) >= 24


@pytest.mark.parametrize("name", sorted(CASES))
def test_bad_input_fails_clearly_before_writing(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    case = CASES[name]
    if name == "cuda_without_gpu" and _cuda_available():
        pytest.skip("a CUDA device is available here, so TRAIN_DEVICE=cuda is a valid input")
    data = write_small_churn(tmp_path / "data", rows=60, files=2)
    if case.mutate is not None:
        case.mutate(data)
    if name == "unreadable_file" and os.access(data / "part-001.csv", os.R_OK):
        # root reads a chmod-000 file anyway: make the OS refuse it the way it would refuse another user.
        _refuse_reading(monkeypatch, data / "part-001.csv")
    root = tmp_path / "root"
    env = _env(data, root, case.env)

    with pytest.raises(case.error) as caught:
        run_pipeline(env)

    message = str(caught.value)
    assert message.startswith(f"{caught.value.code}: ")
    assert "\n" not in message, "one message on one line"
    for needle in case.needles:
        assert needle in message, f"{needle!r} not in {message!r}"
    assert written_files(root) == []


def test_data_changed_between_fingerprint_and_load(tmp_path: Path) -> None:
    data = write_small_churn(tmp_path / "data", rows=60, files=2)
    root = tmp_path / "root"
    ctx = bootstrap(_env(data, root, {}))
    changed = data / "part-001.csv"
    changed.write_text(changed.read_text().replace("yes", "no", 1))

    with pytest.raises(DataChangedError) as caught:
        snapshot(ctx, ctx.open_store())

    message = str(caught.value)
    assert "part-001.csv" in message and "changed after it was fingerprinted" in message
    assert "expected sha256" in message
    assert written_files(root) == []


@pytest.mark.parametrize("now", ["a,b\n1,2\n", "", '"never closed\n'], ids=["other columns", "emptied", "unparsable"])
def test_data_changed_into_bad_data_is_named_as_changed(tmp_path: Path, now: str) -> None:
    """The file is parsed while its bytes are hashed: what a changed file now holds must not hide that it changed."""
    data = write_small_churn(tmp_path / "data", rows=60, files=2)
    root = tmp_path / "root"
    ctx = bootstrap(_env(data, root, {}))
    (data / "part-001.csv").write_text(now)

    with pytest.raises(DataChangedError, match=r"part-001\.csv changed after it was fingerprinted"):
        snapshot(ctx, ctx.open_store())
    assert written_files(root) == []


def test_data_file_removed_between_fingerprint_and_load(tmp_path: Path) -> None:
    data = write_small_churn(tmp_path / "data", rows=60, files=2)
    root = tmp_path / "root"
    ctx = bootstrap(_env(data, root, {}))
    (data / "part-000.csv").unlink()

    with pytest.raises(DataChangedError, match=r"part-000\.csv was fingerprinted but cannot be read now"):
        snapshot(ctx, ctx.open_store())
    assert written_files(root) == []


# -- the CLI -------------------------------------------------------------------------------------------------


def _cli() -> str:
    script = Path(sys.executable).parent / "ml8s"
    if not script.exists():
        pytest.skip(f"console script {script} is not installed (pip install -e .)")
    return str(script)


def _clean_environ(**values: str) -> dict[str, str]:
    """The process environment without any ml8s variable, plus ``values``."""
    ours = set(USER_VARIABLES) | set(PLATFORM_VARIABLES) | {"ML8S_LOG_LEVEL"}
    env = {k: v for k, v in os.environ.items() if k not in ours}
    env.update(values)
    return env


def test_cli_identity_bad_test_size_one_line(tmp_path: Path) -> None:
    data = write_small_churn(tmp_path / "data", rows=60, files=2)
    env = _clean_environ(
        DATA_ROOT=str(data), TARGET_COLUMN="churned", PIPELINE_ROOT_URI=str(tmp_path / "root"), TEST_SIZE="1.5"
    )
    result = subprocess.run([_cli(), "identity"], env=env, capture_output=True, text=True, timeout=120, check=False)

    assert result.returncode == 1
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("ml8s: CONFIG_ERROR: TEST_SIZE=1.5 is invalid; expected")
    assert written_files(tmp_path / "root") == []


@pytest.mark.parametrize("command", [["run"], ["identity"], ["chain", "log"]])
def test_a_misspelt_log_level_is_one_line_before_any_write(tmp_path: Path, command: list[str]) -> None:
    # It was a ValueError traceback from logging for `ml8s run`, and silently ignored by the other commands.
    data = write_small_churn(tmp_path / "data", rows=60, files=2)
    env = _clean_environ(
        DATA_ROOT=str(data), TARGET_COLUMN="churned", PIPELINE_ROOT_URI=str(tmp_path / "root"), ML8S_LOG_LEVEL="verbose"
    )
    result = subprocess.run([_cli(), *command], env=env, capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr.splitlines() == [
        "ml8s: CONFIG_ERROR: ML8S_LOG_LEVEL='verbose' is invalid; expected one of DEBUG, INFO, WARNING, ERROR, CRITICAL"
    ]
    assert written_files(tmp_path / "root") == []


def test_cli_identity_good_config_prints_json(tmp_path: Path) -> None:
    data = write_small_churn(tmp_path / "data", rows=60, files=2)
    root = tmp_path / "root"
    env = _clean_environ(DATA_ROOT=str(data), TARGET_COLUMN="churned", PIPELINE_ROOT_URI=str(root))
    result = subprocess.run([_cli(), "identity"], env=env, capture_output=True, text=True, timeout=120, check=False)

    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert set(report) == {
        "artifact_root",
        "canonical_config",
        "canonical_json",
        "canonicalization_version",
        "data_fingerprint",
        "full_config_hash",
        "run_id",
    }
    assert report["run_id"] == report["full_config_hash"][:12]
    assert json.loads(report["canonical_json"]) == report["canonical_config"]
    assert report["canonical_config"]["data_root"] == f"file://{data}"
    assert report["artifact_root"] == f"file://{root}/{layout.RUNS_DIR}/{report['run_id']}"
    in_process = bootstrap({"DATA_ROOT": str(data), "TARGET_COLUMN": "churned", "PIPELINE_ROOT_URI": str(root)})
    assert report["full_config_hash"] == in_process.identity.full_config_hash
    assert written_files(root) == []


@pytest.mark.parametrize(
    ("variable", "value", "expected"),
    [
        ("DRIFT_POLICY", "ignore", "expected 'warn' or 'fail'"),
        ("STALE_PARENT_POLICY", "x", "expected 'retrain' or 'fail'"),
        ("PROMOTE_MIN_DELTA", "nan", "expected a number from -1 to 1"),
        ("PROMOTE_MIN_DELTA", "2", "expected a number from -1 to 1"),
        ("PROMOTE_MIN_DELTA", "abc", "expected a number from -1 to 1"),
        ("TMP_RETENTION_DAYS", "-3", "expected a whole number of days"),
        ("DATA_QUIET_SECONDS", "soon", "expected a whole number of seconds"),
        ("ALIAS_DEADLINE_SECONDS", "0", "expected a whole number of seconds from 1 to 86400"),
        ("ALIAS_DEADLINE_SECONDS", "86401", "expected a whole number of seconds from 1 to 86400"),
    ],
)
def test_every_platform_setting_is_a_named_config_error(variable: str, value: str, expected: str) -> None:
    # DRIFT_POLICY and PROMOTE_MIN_DELTA escaped as a pydantic ValidationError: INTERNAL_ERROR at the CLI.
    from ml8s.identity.settings import PlatformSettings

    with pytest.raises(ConfigError) as caught:
        PlatformSettings.load({variable: value})
    assert str(caught.value) == f"CONFIG_ERROR: {variable}={value!r} is invalid; {expected}"
