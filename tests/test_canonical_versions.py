"""Canonicalization 2.0.0 (the plug-in code identity joined the canonical config): runs made under 1.0.0
keep verifying, because the verifier re-hashes what a run recorded and checks the keys of *its* version."""

from __future__ import annotations

from ml8s.audit.offline import KNOWN_CANONICALIZATION_VERSIONS, snapshot_problems
from ml8s.contract import ConfigSnapshot
from ml8s.identity.hashing import compute_identity
from ml8s.identity.params import validate_params
from ml8s.identity.variables import (
    CANONICALIZATION_VERSION,
    CanonicalConfig,
    canonical_config,
    canonical_json,
    without_unused_keys,
)
from ml8s.identity.versions import CANONICAL_KEYS

FP = "ab" * 32


def snapshot(config: CanonicalConfig, version: str) -> ConfigSnapshot:
    """A snapshot whose hashes are right for its config: only the version and the keys are under test."""
    identity = compute_identity(config, FP)
    return ConfigSnapshot.of(identity).model_copy(update={"canonicalization_version": version})


def v1_config() -> CanonicalConfig:
    """The canonical config exactly as ml8s 1.0.0 wrote it: the sixteen user-level variables."""
    config = v2_config()
    del config["model_code"]
    return config


def v2_config() -> CanonicalConfig:
    """The canonical config as ml8s 2.0.0 wrote it: 1.0.0's and model_code."""
    config = dict(canonical_config({"DATA_ROOT": "/data/churn", "TARGET_COLUMN": "churned"}))
    del config["warm_start"], config["train_world_size"]
    return config


def v21_config() -> CanonicalConfig:
    """A cold start's canonical config as ml8s 2.1.0 wrote it: sampler_alpha too."""
    return {**canonical_config({"DATA_ROOT": "/data/churn", "TARGET_COLUMN": "churned"}), "sampler_alpha": 1}


def test_the_current_version_is_2_2_0_and_older_ones_are_still_known() -> None:
    assert CANONICALIZATION_VERSION == "2.2.0"
    assert frozenset(KNOWN_CANONICALIZATION_VERSIONS) == frozenset({"1.0.0", "1.1.0", "2.0.0", "2.1.0", "2.2.0"})
    assert CANONICAL_KEYS["1.1.0"] == CANONICAL_KEYS["1.0.0"]  # 1.1.0 changed feature rules only
    assert set(CANONICAL_KEYS["2.0.0"]) - set(CANONICAL_KEYS["1.0.0"]) == {"model_code"}
    added = {"sampler_alpha", "train_world_size", "warm_start"}
    assert set(CANONICAL_KEYS["2.1.0"]) - set(CANONICAL_KEYS["2.0.0"]) == added
    assert CANONICAL_KEYS["2.2.0"] == CANONICAL_KEYS["2.1.0"]  # 2.2.0 leaves sampler_alpha out of cold starts
    assert len(CANONICAL_KEYS["1.0.0"]) == 16


def test_sampler_alpha_is_no_part_of_a_cold_start() -> None:
    """A cold start samples no history: SAMPLER_ALPHA cannot change its bytes, so it cannot change its RUN_ID."""
    base = {"DATA_ROOT": "/data/churn", "TARGET_COLUMN": "churned"}
    runs = {canonical_json(canonical_config({**base, "SAMPLER_ALPHA": alpha})) for alpha in ("0", "1", "2.5", "")}
    assert len(runs) == 1 and "sampler_alpha" not in runs.pop()
    warm = canonical_config({**base, "WARM_START": "head", "SAMPLER_ALPHA": "2.5"})
    assert warm["sampler_alpha"] == 2.5  # a warm start samples its history by it: identity
    assert without_unused_keys({**warm, "warm_start": None}) == canonical_config(base)  # head of an empty chain
    assert validate_params(canonical_config(base)).warm_start is None


def test_a_2_2_0_cold_start_has_no_sampler_alpha_and_a_warm_start_has_it() -> None:
    cold = snapshot(dict(canonical_config({"DATA_ROOT": "/data/churn", "TARGET_COLUMN": "churned"})), "2.2.0")
    assert snapshot_problems(cold, cold.run_id) == []
    forked = snapshot(v21_config(), "2.2.0")  # a cold start that kept sampler_alpha: not 2.2.0's keys
    assert any("expected exactly the keys of canonicalization 2.2.0" in p for p in snapshot_problems(forked, "x" * 12))
    warm = snapshot({**v21_config(), "warm_start": "ab" * 32}, "2.2.0")
    assert snapshot_problems(warm, warm.run_id) == []
    bare = snapshot({**canonical_config({"DATA_ROOT": "/d", "TARGET_COLUMN": "y"}), "warm_start": "ab" * 32}, "2.2.0")
    assert any("sampler_alpha" in p for p in snapshot_problems(bare, bare.run_id))


def test_a_1_0_0_run_verifies() -> None:
    old = snapshot(v1_config(), "1.0.0")
    assert snapshot_problems(old, old.run_id) == []


def test_a_2_0_0_run_verifies() -> None:
    older = snapshot(v2_config(), "2.0.0")
    assert snapshot_problems(older, older.run_id) == []


def test_a_2_1_0_run_verifies() -> None:
    older = snapshot(v21_config(), "2.1.0")
    assert snapshot_problems(older, older.run_id) == []
    without = snapshot(dict(canonical_config({"DATA_ROOT": "/data/churn", "TARGET_COLUMN": "churned"})), "2.1.0")
    assert any("expected exactly the keys of canonicalization 2.1.0" in p for p in snapshot_problems(without, "x"))


def test_keys_must_be_those_of_the_recorded_version() -> None:
    old_keys_new_label = snapshot(v1_config(), "2.0.0")
    problems = snapshot_problems(old_keys_new_label, old_keys_new_label.run_id)
    assert len(problems) == 1 and "expected exactly the keys of canonicalization 2.0.0" in problems[0]
    new_keys_old_label = snapshot({**v1_config(), "model_code": None}, "1.0.0")
    problems = snapshot_problems(new_keys_old_label, new_keys_old_label.run_id)
    assert len(problems) == 1 and "expected exactly the keys of canonicalization 1.0.0" in problems[0]


def test_unknown_version_fails() -> None:
    future = snapshot(v1_config(), "9.0.0")
    assert any("'9.0.0' is unknown to this verifier" in p for p in snapshot_problems(future, future.run_id))


def test_plugin_without_its_code_identity_fails() -> None:
    config = dict(canonical_config({"DATA_ROOT": "/d", "TARGET_COLUMN": "y", "MODEL_TYPE": "plugin:p.m:build"}))
    unresolved = snapshot(config, "2.2.0")
    assert any("expected its code identity" in p for p in snapshot_problems(unresolved, unresolved.run_id))
    resolved = snapshot({**config, "model_code": "sha256:" + "0" * 64}, "2.2.0")
    assert snapshot_problems(resolved, resolved.run_id) == []
