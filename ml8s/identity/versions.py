"""The canonicalization versions this code can verify, and the canonical config's keys under each.

Runs keep verifying after an upgrade: the verifier re-hashes the canonical JSON and fingerprint that a
run recorded, whatever version made it, and checks the recorded config has exactly the keys of *its*
version. A new version is added here when the rules change (SPEC §2: any change bumps the version).
"""

from __future__ import annotations

from ml8s.identity.params import MAX_WORLD_SIZE
from ml8s.identity.variables import (
    CANONICALIZATION_VERSION,
    RESOLVED_KEYS,
    USER_VARIABLES,
    WARM_ONLY_KEYS,
    CanonicalConfig,
)

# 1.0.0: the sixteen user-level variables, nothing else (frozen: later variables do not apply to it).
_V1_KEYS = (
    "batch_size",
    "data_root",
    "epochs",
    "exclude_columns",
    "hidden_layers",
    "hidden_units",
    "learning_rate",
    "max_features",
    "model_format",
    "model_type",
    "random_seed",
    "sample_rows",
    "standardize",
    "target_column",
    "test_size",
    "train_device",
)
# 2.0.0: model_code (a plug-in's code identity) joined.
_V2_KEYS = tuple(sorted({*_V1_KEYS, "model_code"}))
# 2.1.0: warm_start, sampler_alpha and train_world_size joined (every run has all three).
_V21_KEYS = tuple(sorted({*_V2_KEYS, "warm_start", "sampler_alpha", "train_world_size"}))
_CURRENT_KEYS = tuple(sorted({*(name.lower() for name in USER_VARIABLES), *RESOLVED_KEYS}))

# 1.1.0 changed how features are made (missing-value tokens), not the keys.
CANONICAL_KEYS: dict[str, tuple[str, ...]] = {
    "1.0.0": _V1_KEYS,
    "1.1.0": _V1_KEYS,
    "2.0.0": _V2_KEYS,
    "2.1.0": _V21_KEYS,
    CANONICALIZATION_VERSION: _CURRENT_KEYS,
}
# Versions whose cold starts leave out WARM_ONLY_KEYS.
_COLD_WITHOUT_WARM_KEYS = frozenset({"2.2.0"})


def expected_keys(canonicalization_version: str, config: CanonicalConfig) -> list[str]:
    """The keys a recorded canonical config of this version must have exactly (sorted); an unknown
    version is held to the current one's."""
    keys = CANONICAL_KEYS.get(canonicalization_version, _CURRENT_KEYS)
    if canonicalization_version in _COLD_WITHOUT_WARM_KEYS and config.get("warm_start") is None:
        keys = tuple(key for key in keys if key not in WARM_ONLY_KEYS)
    return sorted(keys)


def records_training_state(canonicalization_version: str) -> bool:
    """Whether runs of this version write ``model/training_state.safetensors`` (from 2.1.0 on)."""
    return canonicalization_version not in ("1.0.0", "1.1.0", "2.0.0")


def world_size_of(config: CanonicalConfig) -> int:
    """TRAIN_WORLD_SIZE of a recorded canonical config: 1 when absent (before 2.1.0) or not a count from 1 to
    MAX_WORLD_SIZE, the bound a run accepts (the snapshot check reports a malformed value; the layout then expects
    one rank's files). Unbounded, an edited snapshot's 10**9 had verify and audit verify list 10**9 shard names."""
    value = config.get("train_world_size", 1)
    return value if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= MAX_WORLD_SIZE else 1


KNOWN_CANONICALIZATION_VERSIONS = tuple(sorted(CANONICAL_KEYS))
