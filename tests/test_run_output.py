"""What people read: log lines (time, elapsed, step, at most 160 characters), `ml8s run`'s flags and its
warnings about look-alike variables, and the per-epoch held-out record, which changes no weight."""

from __future__ import annotations

import contextlib
import io
import json
import logging
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import make_context, write_small_churn

from ml8s import log
from ml8s.cli.main import build_parser, main
from ml8s.identity.lookalike import lookalikes
from ml8s.identity.variables import USER_VARIABLES

_LINE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z \+\d+\.\ds (INFO |WARNING) \[(\w+)\] ")


def _capture(level: int, step: str, message: str) -> str:
    record = logging.LogRecord("ml8s", level, __file__, 1, "%s", (message,), None)
    record.step = step
    return log.HumanFormatter().format(record)


def test_a_line_has_time_elapsed_level_step_and_is_clipped_at_160() -> None:
    line = _capture(logging.INFO, "train", "epoch 1/3 loss 0.5")
    assert _LINE.match(line) and line.endswith("[train] epoch 1/3 loss 0.5")
    long = _capture(logging.INFO, "register", "x" * 400)
    assert len(long) == log.MAX_LINE and long.endswith("…")
    warning = _capture(logging.WARNING, "register", "y" * 400)  # warnings are kept whole
    assert warning.endswith("y" * 400)


def test_a_name_in_a_line_cannot_color_the_terminal_or_forge_a_line() -> None:
    """A data folder, file or column name went raw into a log line (``left out {partition}``): its escape sequence
    reached the terminal and a newline in it made a line that read as ml8s's own. Escaped as the CLI's errors."""
    forged = "2026-01-01T00:00:00.000Z +0.0s INFO  [bootstrap] all good"
    for level in (logging.INFO, logging.WARNING):
        line = _capture(level, "bootstrap", f"left out gen\x1b[31m\r\n{forged}: it is young")
        assert "\x1b" not in line and "\r" not in line and "gen\\x1b[31m\\r" in line
        first, second = line.split("\n")
        assert _LINE.match(first) and second == f"  {forged}: it is young"  # indented: a continuation, not a line


@contextlib.contextmanager
def _ml8s_lines() -> Iterator[io.StringIO]:
    """What the ``ml8s`` logger writes at INFO while inside, formatted as the CLI formats it."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(log.HumanFormatter())
    logger = logging.getLogger("ml8s")
    logger.addHandler(handler)
    old = logger.level
    logger.setLevel(logging.INFO)
    try:
        yield stream
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old)


def test_each_step_logs_its_wall_time_and_peak_rss() -> None:
    with _ml8s_lines() as stream:

        @log.timed("features")
        def step(fail: bool) -> int:
            if fail:
                raise ValueError("boom")
            return 7

        assert step(False) == 7
        with pytest.raises(ValueError, match="boom"):
            step(True)
    done, failed = stream.getvalue().splitlines()
    assert re.search(r"\[features\] done in \d+\.\ds, peak RSS \d+ MiB$", done)
    assert re.search(r"\[features\] failed after \d+\.\ds, peak RSS \d+ MiB$", failed)


def test_a_long_wait_logs_that_it_is_alive_and_a_short_one_nothing() -> None:
    with _ml8s_lines() as stream:
        with log.heartbeat("register", "MLflow at http://mlflow:5000", every_s=0.05):
            time.sleep(0.3)
        beats = len(stream.getvalue().splitlines())
        time.sleep(0.2)  # it stopped with the block
        with log.heartbeat("register", "MLflow at http://mlflow:5000", every_s=30):
            pass
    lines = stream.getvalue().splitlines()
    assert len(lines) == beats >= 2, lines
    assert all(re.search(r"\[register\] still waiting on MLflow at http://mlflow:5000: \d+s so far$", x) for x in lines)
    assert not [t for t in threading.enumerate() if t.name.startswith("ml8s-heartbeat-")]


def test_look_alike_variables_are_named_with_what_they_probably_mean() -> None:
    env = ["EPOCH", "BATCHSIZE", "ML8S_FOO", "epochs", "HOME", "PATH", "WORLD_SIZE", "CONTAINER_NAME"]
    env += ["MLFLOW_EXPERIMENT_ID", "MLFLOW_TRACKING_TOKEN", "MLFLOW_EXPERIMENT_NAME", "EPOCHS", "ML8S_LOG_LEVEL"]
    assert lookalikes(env) == [
        ("BATCHSIZE", "BATCH_SIZE"),
        ("EPOCH", "EPOCHS"),
        ("ML8S_FOO", None),
        ("epochs", "EPOCHS"),
    ]


def test_a_look_alike_variable_is_named_escaped(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The warning printed the variable's name raw: an escape sequence in it reached the terminal, and a newline
    made a line of its own that read as ml8s's ('ml8s: forged'). Warnings are escaped as error lines are."""
    monkeypatch.setenv("ML8S_X\x1b[31m\nml8s: forged", "1")
    monkeypatch.delenv("DATA_ROOT", raising=False)  # stops the run at its config, after the warnings
    assert main(["run"]) == 1
    err = capsys.readouterr().err
    assert "\x1b" not in err and [line for line in err.splitlines() if line.startswith("ml8s: f")] == []
    assert "ml8s: warning: ML8S_X\\x1b[31m\n  ml8s: forged is set but ml8s does not read it" in err


def test_a_reproduce_line_shows_its_reason_escaped(capsys: pytest.CaptureFixture[str]) -> None:
    """``ml8s chain reproduce`` printed a version's reason raw: the re-run's error names data files as they are, so
    a file named with a newline forged the line of another version ('v9 ... MATCH') and an escape reached the
    terminal. Shown escaped, as ``ml8s chain verify`` shows a finding's reason: one line per version."""
    from ml8s.cli.reproduce import _line
    from ml8s.ops.reproduce import Reproduction

    reason = "DATA_ERROR: data file g\x1b[31m\nv9      run aaaaaaaaaaaa  content bbbbbbbbbbbb  MATCH.csv is empty"
    _line(Reproduction(counter=3, run_id="0123456789ab", content_hash="c" * 64, reason=reason))
    _line(
        Reproduction(
            counter=4,
            run_id="0123456789ab",
            content_hash="c" * 64,
            reproduced_hash="d" * 64,
            differing=("model\x1b[2J.onnx",),
        )
    )
    out = capsys.readouterr().out
    first, second = out.splitlines()
    assert "\x1b" not in out and first.endswith(
        "NOT REPRODUCED: DATA_ERROR: data file g\\x1b[31m\\nv9      run "
        "aaaaaaaaaaaa  content bbbbbbbbbbbb  MATCH.csv is empty"
    )
    assert second.endswith("DIFFERS: re-trained dddddddddddd; files model\\x1b[2J.onnx")


def test_ml8s_run_takes_every_user_variable_as_a_flag() -> None:
    flags = [word for name in USER_VARIABLES for word in (f"--{name.lower().replace('_', '-')}", f"v-{name}")]
    args = build_parser().parse_args(["run", *flags, "--pipeline-root-uri", "/r", "--force-rerun"])
    assert {name: getattr(args, name.lower()) for name in USER_VARIABLES} == {n: f"v-{n}" for n in USER_VARIABLES}
    assert args.pipeline_root_uri == "/r" and args.force_rerun is True
    unset = build_parser().parse_args(["run"])
    assert all(getattr(unset, name.lower()) is None for name in USER_VARIABLES)


def test_per_epoch_held_out_evaluation_changes_no_weight(tmp_path: Path) -> None:
    """Training with the per-epoch held-out evaluation and without it writes the same weight bytes; the log
    holds every epoch with its held-out figures and end time, the TensorBoard events the same points."""
    from ml8s.pipeline.features import compute_features
    from ml8s.training import fit
    from ml8s.training.epochs import EpochRecorder

    ctx = make_context(write_small_churn(tmp_path / "data", rows=200), tmp_path / "root", epochs="3")
    compute_features(ctx.spec, str(tmp_path / "features"))
    fit.train(ctx.spec, str(tmp_path / "features"), str(tmp_path / "with"))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(fit, "EpochRecorder", lambda held_out, **_: EpochRecorder(None))  # no per-epoch evaluation
        fit.train(ctx.spec, str(tmp_path / "features"), str(tmp_path / "without"))
    for name in ("model_native.safetensors", "training_state.safetensors", "metrics.json"):
        assert (tmp_path / "with" / name).read_bytes() == (tmp_path / "without" / name).read_bytes(), name
    record = json.loads((tmp_path / "with" / "epochs.json").read_bytes())
    epochs = record["epochs"]
    assert [e["epoch"] for e in epochs] == [1, 2, 3]
    assert all(e["held_out_log_loss"] > 0 and 0 <= e["held_out_accuracy"] <= 1 for e in epochs)
    assert record["started_ms"] <= epochs[0]["time_ms"] <= epochs[-1]["time_ms"]
    final = json.loads((tmp_path / "with" / "metrics.json").read_bytes())
    assert epochs[-1]["held_out_log_loss"] == pytest.approx(final["log_loss"], rel=1e-6)
    without = json.loads((tmp_path / "without" / "epochs.json").read_bytes())["epochs"]
    assert [e["held_out_log_loss"] for e in without] == [None] * 3


def test_tensorboard_events_carry_real_wall_times(tmp_path: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from ml8s.contract.epochs import EpochRecord
    from ml8s.training.tensorboard import write_training_events

    records = [
        EpochRecord(epoch=1, train_loss=0.5, held_out_log_loss=0.6, held_out_accuracy=0.7, time_ms=1_700_000_000_000),
        EpochRecord(epoch=2, train_loss=0.4, held_out_log_loss=0.5, held_out_accuracy=0.8, time_ms=1_700_000_001_500),
    ]
    path = tmp_path / "events.out.tfevents.ml8s-train"
    write_training_events(str(path), records, {"accuracy": 0.8})
    events = EventAccumulator(str(tmp_path))
    events.Reload()
    assert [(e.step, e.wall_time) for e in events.Scalars("train/loss")] == [(1, 1_700_000_000.0), (2, 1_700_000_001.5)]
    assert [e.value for e in events.Scalars("heldout_epoch/log_loss")] == pytest.approx([0.6, 0.5])
    (final,) = events.Scalars("heldout/accuracy")
    assert (final.step, final.wall_time) == (2, 1_700_000_001.5)


def test_the_summary_line_reads_a_forced_run_manifest_and_never_fails(tmp_path: Path) -> None:
    from ml8s.pipeline.summary import summary_line

    manifest = {
        "run_id": "0123456789ab",
        "full_config_hash": "0123456789ab" + "0" * 52,
        "data_fingerprint": "1" * 64,
        "canonicalization_version": "2.1.0",
        "artifact_root": f"file://{tmp_path}/ml8s_training_runs/0123456789ab",
        "artifacts": {},
        "mlflow": {"model_name": "m", "model_version": "3"},
        "force_rerun": {"recomputed": ["snapshot"], "changed": [], "reproduced": True, "previous_sha256": {}},
    }
    line = summary_line(json.dumps(manifest), 1.25)
    assert line == f"ml8s: run 0123456789ab done in 1.2s; m v3; file://{tmp_path}/ml8s_training_runs/0123456789ab"
    assert summary_line("not json") == "ml8s: run done"


def test_a_bug_reaches_a_cli_user_as_one_line_and_debug_shows_the_traceback(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import argparse

    from ml8s.cli.args import guarded

    def broken(args: argparse.Namespace) -> int:
        raise KeyError("missing")  # as a bug would raise it

    monkeypatch.delenv("ML8S_LOG_LEVEL", raising=False)
    assert guarded(broken)(argparse.Namespace()) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("ml8s: INTERNAL_ERROR: KeyError at test_run_output.py:") and "'missing'" in line, line
    monkeypatch.setenv("ML8S_LOG_LEVEL", "DEBUG")
    with pytest.raises(KeyError):
        guarded(broken)(argparse.Namespace())
