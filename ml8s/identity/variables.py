"""The user-level variables, their defaults and the normalization rules of SPEC §2.

Only the variables in :data:`USER_VARIABLES` (and the :data:`RESOLVED_KEYS` bootstrap fills in) enter the
canonical config; everything else is platform-level (see :mod:`ml8s.identity.settings`) and never reaches a hash.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Mapping

from ml8s.errors import ConfigError
from ml8s.identity.priority import explicit_or_env
from ml8s.identity.uri import parse_root_uri
from ml8s.text import quoted

# 1.1.0: missing-value tokens read as missing in every column (ml8s.data.missing); RUN_IDs unchanged.
# 2.0.0: the canonical config gains model_code (a plug-in's code identity): every RUN_ID changes.
# 2.1.0: the canonical config gains warm_start (the resolved parent's content hash, null for a cold start)
#        and sampler_alpha (the recency exponent of a warm start's history sampler); every run records its
#        training state: every RUN_ID changes. train_world_size (the ranks of a distributed training) joined
#        before 2.1.0 was released, so it shares the version.
# 2.2.0: a cold start's canonical config has no sampler_alpha (it samples no history, so the value cannot
#        change its bytes and must not fork a lineage): every cold-start RUN_ID changes, warm starts keep theirs.
CANONICALIZATION_VERSION = "2.2.0"
# Keys of the canonical config that no user sets: bootstrap resolves them (2.0.0: the code identity of a
# plug-in MODEL_TYPE, see ml8s.identity.model_code). canonical_config writes them as null.
RESOLVED_KEYS = ("model_code",)

# Keys only a warm start uses: absent from a cold start's canonical config (2.2.0 on).
WARM_ONLY_KEYS = ("sampler_alpha",)

JsonScalar = str | int | float | bool | None
JsonValue = JsonScalar | list[str]
CanonicalConfig = dict[str, JsonValue]

# name -> default string (None = required). Order here is documentation order only; the canonical
# JSON sorts keys.
USER_VARIABLES: dict[str, str | None] = {
    "DATA_ROOT": None,
    "TARGET_COLUMN": None,
    "MODEL_FORMAT": "onnx",
    "MODEL_TYPE": "mlp",
    "TEST_SIZE": "0.2",
    "RANDOM_SEED": "42",
    "SAMPLE_ROWS": "",
    "MAX_FEATURES": "",
    "EXCLUDE_COLUMNS": "",
    "STANDARDIZE": "true",
    "HIDDEN_UNITS": "64",
    "HIDDEN_LAYERS": "2",
    "EPOCHS": "10",
    "BATCH_SIZE": "256",
    "LEARNING_RATE": "0.001",
    "TRAIN_DEVICE": "cpu",
    # Continuous training (docs/continuous.md). WARM_START: "" (cold start), "head", a version number or a
    # block hash (a prefix of 12+ hex digits); bootstrap replaces it with the parent's content hash.
    "WARM_START": "",
    "SAMPLER_ALPHA": "1",
    # Distributed training (docs/distributed.md): the number of ranks; it changes the bits (the gradient
    # all-reduce sums in another order), so it is identity.
    "TRAIN_WORLD_SIZE": "1",
}

_NUMBER = re.compile(r"-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?")
# WARM_START is a version number only up to 11 digits: 12 and more are a block hash's prefix, whose hex
# digits may read as a number too (123456789012, or 1234e5678901: a float out of range).
WARM_START_VERSION = re.compile(r"[1-9][0-9]{0,10}")


def normalize_value(raw: str, *, name: str = "") -> JsonValue:
    """Normalize one variable's string value to its canonical JSON value (SPEC §2, in order).

    Args:
        raw: the string as the user set it.
        name: the variable name; ``DATA_ROOT`` gets the root rule of :func:`ml8s.identity.uri.parse_root_uri`.

    Example:
        >>> normalize_value(" b, a,,a ")
        ['a', 'b']
    """
    value = raw.strip()
    if name == "DATA_ROOT" and value:
        value = parse_root_uri(value, variable=name).uri
    if value == "":
        return None
    if name == "WARM_START":  # resolved by bootstrap before it is hashed: the text, or a version number
        return int(value) if WARM_START_VERSION.fullmatch(value) else value
    if value.lower() in ("true", "false"):
        return value.lower() == "true"
    if _NUMBER.fullmatch(value):
        return _number(value, name)
    if "," in value:
        items = sorted({item.strip() for item in value.split(",") if item.strip()})
        return items or None
    return value


def canonical_config(values: Mapping[str, str | None]) -> CanonicalConfig:
    """Build the canonical config from raw strings keyed by upper-case variable name.

    A missing or ``None`` value takes the variable's default string; a required variable left
    empty raises :class:`ConfigError` naming it. Unknown names raise too.
    """
    unknown = sorted(set(values) - set(USER_VARIABLES))
    if unknown:
        raise ConfigError(f"unknown user-level variable(s) {unknown}; expected one of {sorted(USER_VARIABLES)}")
    config: CanonicalConfig = {}
    for name in sorted(USER_VARIABLES):
        raw = values.get(name)
        if raw is None:
            raw = USER_VARIABLES[name] or ""
        normalized = normalize_value(raw, name=name)
        if normalized is None and USER_VARIABLES[name] is None:
            raise ConfigError(
                f"{name} is required and was empty or unset; set it in the environment or as a workflow input"
            )
        config[name.lower()] = normalized
    config.update({key: None for key in RESOLVED_KEYS})
    return without_unused_keys(config)


def without_unused_keys(config: CanonicalConfig) -> CanonicalConfig:
    """``config`` without the keys a cold start cannot use (:data:`WARM_ONLY_KEYS`) when it is one: bootstrap
    applies it again once WARM_START is resolved (``head`` on an empty chain is a cold start too)."""
    if config.get("warm_start") is not None:
        return config
    return {key: value for key, value in config.items() if key not in WARM_ONLY_KEYS}


def canonical_json(config: CanonicalConfig) -> str:
    """The exact serialization of SPEC §2 (sorted keys, no whitespace, UTF-8 kept)."""
    return json.dumps(config, separators=(",", ":"), sort_keys=True, ensure_ascii=False, allow_nan=False)


def raw_values_from_env(env: Mapping[str, str], overrides: Mapping[str, str] | None = None) -> dict[str, str | None]:
    """Raw strings for every user variable by the one priority of :mod:`ml8s.identity.priority`.

    Overrides are keyed by lower-case name (the workflow inputs); ``""`` means "take the environment", and an
    empty environment variable means "take the default" (None here, filled in by :func:`canonical_config`).
    """
    return {name: explicit_or_env(name, env, overrides) for name in USER_VARIABLES}


def _number(value: str, name: str) -> int | float:
    if re.fullmatch(r"-?(0|[1-9][0-9]*)", value):
        try:
            return int(value)
        except ValueError as exc:  # more digits than int() converts (sys.get_int_max_str_digits, 4300)
            raise ConfigError(
                f"{name or 'value'} is a whole number of {len(value.lstrip('-')):,} digits; expected at most "
                f"{sys.get_int_max_str_digits():,} digits"
            ) from exc
    number = float(value)
    if number in (float("inf"), float("-inf")):
        raise ConfigError(
            f"{name or 'value'}={quoted(value)} is a number out of the float range; expected a finite number"
        )
    return number


def value_shown(value: JsonValue) -> str:
    """A canonical value as a message quotes it (:func:`ml8s.text.quoted` for text, a list as its joined text)."""
    if isinstance(value, list):
        return quoted(",".join(value))
    return quoted(value) if isinstance(value, str) else str(value).lower() if isinstance(value, bool) else str(value)
