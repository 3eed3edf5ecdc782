"""conftest's scheduling for ``make test`` (``-n auto --dist loadgroup``): the tests of a module with a fixture scoped
wider than one test are one unit (one worker makes the fixture once), so are those of test_verify.py's session run
(test_audit_bundle.py's too), and any other test is a unit of its own (dealt wherever a worker is free)."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import SHARED_SESSION_RUN, pytest_xdist_make_scheduler, shared_run_scope


@pytest.fixture(scope="module")
def shared() -> list[str]:
    return []


def test_the_tests_of_a_module_that_shares_a_fixture_are_one_unit(
    shared: list[str], request: pytest.FixtureRequest
) -> None:
    root = request.config.rootpath
    here = "tests/test_xdist_groups.py"
    assert shared_run_scope(root, f"{here}::test_a") == shared_run_scope(root, f"{here}::test_b[x]") == here
    for module in ("test_lineage", "test_pipeline", "test_workflow", "test_distributed", "test_mlflow_server"):
        assert shared_run_scope(root, f"tests/{module}.py::test_x") == f"tests/{module}.py"


def test_the_session_run_of_test_verify_is_one_unit_with_its_other_user(request: pytest.FixtureRequest) -> None:
    root = request.config.rootpath
    for module in ("test_verify", "test_audit_bundle"):
        assert shared_run_scope(root, f"tests/{module}.py::test_x[1]") == SHARED_SESSION_RUN


def test_any_other_test_is_a_unit_of_its_own(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    root = request.config.rootpath
    for nodeid in ("tests/test_uri.py::test_x[a-b]", "tests/test_chain_commit.py::test_init_is_idempotent"):
        assert shared_run_scope(root, nodeid) == nodeid
    (tmp_path / "tests").mkdir()
    assert shared_run_scope(tmp_path, "tests/test_absent.py::test_x") == "tests/test_absent.py::test_x"


def test_only_loadgroup_gets_this_scheduler(request: pytest.FixtureRequest) -> None:
    """Another --dist (or none) keeps xdist's own scheduler."""
    assert request.config.getvalue("dist") == "no"  # in a worker, or without xdist
    assert pytest_xdist_make_scheduler(request.config, None) is None
