"""``silenced``: the alias step's thread, left running past ALIAS_DEADLINE_SECONDS, can still be inside it when a
registration (or another alias step) enters it on the same logger. The level saved by the second entry was the
first one's CRITICAL, restored last: MLflow's sqlite logger stayed at CRITICAL for the rest of the process, and a
later "database is locked" retry said nothing. The level is now restored when the last use ends."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator

import pytest

from ml8s.registry.mlflow_model import silenced

NAME = "mlflow.store.db.utils"


@pytest.fixture(name="logger")
def logger_fixture() -> Iterator[logging.Logger]:
    logger = logging.getLogger(NAME)
    before = logger.level
    logger.setLevel(logging.INFO)
    yield logger
    logger.setLevel(before)


def test_overlapping_uses_on_two_threads_restore_the_level(logger: logging.Logger) -> None:
    """The lingering thread enters first and leaves while the registration is still inside."""
    entered, leave, left = threading.Event(), threading.Event(), threading.Event()

    def lingering() -> None:
        with silenced(NAME):
            entered.set()
            leave.wait(30)
        left.set()

    thread = threading.Thread(target=lingering)
    thread.start()
    assert entered.wait(30)
    with silenced(NAME):
        assert logger.level == logging.CRITICAL
        leave.set()
        assert left.wait(30)
        assert logger.level == logging.CRITICAL  # still inside the registration's use
    thread.join(30)
    assert logger.level == logging.INFO


def test_uses_ending_in_either_order_restore_the_level(logger: logging.Logger) -> None:
    first, second = silenced(NAME), silenced(NAME)
    first.__enter__()
    second.__enter__()
    first.__exit__(None, None, None)
    assert logger.level == logging.CRITICAL
    second.__exit__(None, None, None)
    assert logger.level == logging.INFO
    with silenced(NAME), silenced(NAME):  # nested, the usual order
        assert logger.level == logging.CRITICAL
    assert logger.level == logging.INFO


def test_a_use_that_raises_restores_the_level_and_other_loggers_are_untouched(logger: logging.Logger) -> None:
    other = logging.getLogger("mlflow.tracking")
    other_level = other.level
    with pytest.raises(ValueError, match="boom"), silenced(NAME):
        raise ValueError("boom")
    assert logger.level == logging.INFO and other.level == other_level
    parent = logging.getLogger("mlflow")
    parent_level = parent.level
    with silenced(NAME), silenced("mlflow"):
        assert parent.level == logging.CRITICAL
    assert logger.level == logging.INFO and parent.level == parent_level
