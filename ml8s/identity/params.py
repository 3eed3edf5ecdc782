"""Typed, validated view of the canonical config: what the pipeline steps consume.

Validation happens once, in bootstrap, before anything is written; every message names the variable
and what was expected. Ranges are what the run can actually use: a seed numpy's legacy seeding takes
(``np.random.seed`` refuses 2**32 and above), an Adam step that cannot diverge to infinity at once,
counts that fit a 32-bit index, and a network whose hidden layers fit in memory on any machine (the
bounds are fixed, never measured, so a config is valid or not wherever it is checked).
"""

from __future__ import annotations

import math
import re
from typing import Literal

from pydantic import BaseModel, ConfigDict

from ml8s.errors import ConfigError
from ml8s.identity.model_code import validate_model_type
from ml8s.identity.uri import parse_root_uri
from ml8s.identity.variables import CanonicalConfig, JsonValue, value_shown

MAX_SEED = 2**32 - 1  # np.random.seed (seed_everything) takes 0 .. 2**32 - 1
MAX_COUNT = 2**31 - 1  # rows, features, batch size, epochs: 32-bit indices
MAX_LEARNING_RATE = 1.0
MAX_HIDDEN_UNITS = 65536
MAX_HIDDEN_LAYERS = 256
# Hidden-to-hidden weights: each is held four times in float32 while training (weight, gradient and
# Adam's two moments): 2**28 of them is 4 GiB.
MAX_HIDDEN_WEIGHTS = 2**28
# What Python reads as a decimal number: a value of this form that is not a canonical number was written loosely.
_LOOSE_NUMBER = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")
MAX_WORLD_SIZE = 64  # ranks of one distributed training: processes (or GPUs) of one node
MAX_SAMPLER_ALPHA = 64.0  # (g + 1) ** 64 still fits a float64 for a million generations
_BYTES_PER_WEIGHT = 16
_HEX64 = re.compile(r"[0-9a-f]{64}")


class RunParams(BaseModel):
    """The user-level variables after normalization and validation."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    data_root: str
    target_column: str
    model_format: Literal["onnx", "safetensors"]
    model_type: str  # a built-in family or plugin:<module>:<attribute> (ml8s.identity.model_code)
    test_size: float
    random_seed: int
    sample_rows: int | None
    max_features: int | None
    exclude_columns: tuple[str, ...]
    standardize: bool
    hidden_units: int
    hidden_layers: int
    epochs: int
    batch_size: int
    learning_rate: float
    train_device: Literal["cpu", "cuda"]
    # The resolved parent (its content hash; None: a cold start) and the history sampler's recency exponent.
    # Absent from configs of canonicalization versions before 2.1.0 (cold starts, alpha unused), and
    # sampler_alpha from a cold start's from 2.2.0 on.
    warm_start: str | None = None
    sampler_alpha: float = 1.0
    # The ranks that train (docs/distributed.md); absent from configs before 2.1.0 (one process).
    train_world_size: int = 1


def validate_params(config: CanonicalConfig) -> RunParams:
    """Check every canonical value's type and range; raise :class:`ConfigError` naming the variable."""
    data_root = _string(config, "data_root")
    # Checked, not rewritten: params.data_root stays the hashed value (canonical_config normalized it already).
    parse_root_uri(data_root, variable="DATA_ROOT")
    params = RunParams.model_validate(
        dict(
            data_root=data_root,
            target_column=_column(config, "target_column"),
            model_format=_choice(config, "model_format", ("onnx", "safetensors")),
            model_type=validate_model_type(config),
            test_size=_fraction(config, "test_size"),
            random_seed=_integer(config, "random_seed", minimum=0, maximum=MAX_SEED),
            sample_rows=_optional_integer(config, "sample_rows", minimum=1),
            max_features=_optional_integer(config, "max_features", minimum=1),
            exclude_columns=_names(config, "exclude_columns"),
            standardize=_boolean(config, "standardize"),
            hidden_units=_integer(config, "hidden_units", minimum=1, maximum=MAX_HIDDEN_UNITS),
            hidden_layers=_integer(config, "hidden_layers", minimum=0, maximum=MAX_HIDDEN_LAYERS),
            epochs=_integer(config, "epochs", minimum=1),
            batch_size=_integer(config, "batch_size", minimum=1),
            learning_rate=_positive(config, "learning_rate", maximum=MAX_LEARNING_RATE),
            train_device=_choice(config, "train_device", ("cpu", "cuda")),
            **_continuous(config),
        )
    )
    _check_network(params)
    _check_ranks(params)
    return params


def _continuous(config: CanonicalConfig) -> dict[str, str | float | int | None]:
    """WARM_START (as bootstrap resolved it: a 64-hex content hash or null), SAMPLER_ALPHA and
    TRAIN_WORLD_SIZE, when the config has them (canonicalization 2.1.0 on)."""
    if "warm_start" not in config:
        return {}
    world = (
        _integer(config, "train_world_size", minimum=1, maximum=MAX_WORLD_SIZE) if "train_world_size" in config else 1
    )
    warm = config["warm_start"]
    if warm is not None and not (isinstance(warm, str) and _HEX64.fullmatch(warm)):
        raise _fail(
            "warm_start", warm, "a parent's content hash (64 hex digits): bootstrap resolves head, N or a block hash"
        )
    expected = f"a number >= 0 and <= {MAX_SAMPLER_ALPHA:g}"
    if warm is None and "sampler_alpha" not in config:  # a cold start's (2.2.0 on): it samples no history
        return {"warm_start": None, "train_world_size": world}
    alpha = _number(config, "sampler_alpha", expected)
    if not 0 <= alpha <= MAX_SAMPLER_ALPHA:
        raise _fail("sampler_alpha", config["sampler_alpha"], expected)
    return {"warm_start": warm, "sampler_alpha": alpha, "train_world_size": world}


def _check_network(params: RunParams) -> None:
    weights = params.hidden_units**2 * max(params.hidden_layers - 1, 0)
    if weights > MAX_HIDDEN_WEIGHTS:
        gib, max_gib = weights * _BYTES_PER_WEIGHT / 2**30, MAX_HIDDEN_WEIGHTS * _BYTES_PER_WEIGHT // 2**30
        raise ConfigError(
            f"HIDDEN_UNITS={params.hidden_units} with HIDDEN_LAYERS={params.hidden_layers} makes {weights:,} "
            f"hidden-to-hidden weights ({gib:,.0f} GiB while training); expected at most {MAX_HIDDEN_WEIGHTS:,} "
            f"({max_gib} GiB): fewer units or layers"
        )


def _check_ranks(params: RunParams) -> None:
    """Every rank takes a contiguous slice of every batch, so a batch must hold at least one row per rank."""
    if params.train_world_size > params.batch_size:
        raise ConfigError(
            f"TRAIN_WORLD_SIZE={params.train_world_size} is larger than BATCH_SIZE={params.batch_size}; expected "
            "at most BATCH_SIZE ranks (each rank trains on its contiguous slice of every batch)"
        )


def _fail(key: str, value: JsonValue, expected: str) -> ConfigError:
    return ConfigError(f"{key.upper()}={value_shown(value)} is invalid; expected {expected}")


def _string(config: CanonicalConfig, key: str) -> str:
    value = config[key]
    if not isinstance(value, str):
        raise _fail(key, value, "a single non-empty string")
    return value


def _column(config: CanonicalConfig, key: str) -> str:
    """A column name; one holding commas is canonically the list of its parts, kept joined by commas
    (the data step matches it against the headers normalized the same way)."""
    value = config[key]
    if isinstance(value, list) and value:
        return ",".join(value)
    return _string(config, key)


def _choice(config: CanonicalConfig, key: str, choices: tuple[str, ...]) -> str:
    value = config[key]
    if not isinstance(value, str) or value not in choices:
        raise _fail(key, value, "one of " + ", ".join(choices))
    return value


def _integer(config: CanonicalConfig, key: str, *, minimum: int, maximum: int = MAX_COUNT) -> int:
    value = config[key]
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
        expected = f"an integer >= {minimum} and <= {maximum} (digits only, no sign, fraction or exponent)"
        if isinstance(value, float) and value.is_integer() and minimum <= value <= maximum:
            # the canonical form of "1e3" or "1000.0" is the float 1000.0: say how to write the integer it meant
            expected += f"; the value was written with a fraction or an exponent: write {int(value)}"
        raise _fail(key, value, expected + _spelling(value))
    return value


def _optional_integer(config: CanonicalConfig, key: str, *, minimum: int) -> int | None:
    return None if config[key] is None else _integer(config, key, minimum=minimum)


def _number(config: CanonicalConfig, key: str, expected: str) -> float:
    value = config[key]
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _fail(key, value, expected + _spelling(value))
    return float(value)


def _spelling(value: JsonValue) -> str:
    """Why a value that Python reads as a number is text here, and how to write it: numbers are read as JSON writes
    them (SPEC's normalization), so ``.001``, ``010``, ``+5`` and ``5.`` stay text, and "expected a number" alone
    contradicted what the user saw."""
    if not isinstance(value, str) or not _LOOSE_NUMBER.fullmatch(value):
        return ""
    number = float(value)
    if not math.isfinite(number):
        return ""  # out of float64's range: the range check's words are the ones to read
    meant = str(int(number)) if number.is_integer() and abs(number) < 2**53 else repr(number)
    return (
        f"; {value_shown(value)} is read as text, not a number: numbers are written as JSON writes them (no '+', "
        f"no leading zero, a digit on both sides of a point): write {meant}"
    )


def _fraction(config: CanonicalConfig, key: str) -> float:
    expected = "a number strictly between 0 and 1"
    value = _number(config, key, expected)
    if not 0 < value < 1:
        raise _fail(key, config[key], expected)
    return value


def _positive(config: CanonicalConfig, key: str, *, maximum: float) -> float:
    expected = f"a number > 0 and <= {maximum:g}"
    value = _number(config, key, expected)
    if not 0 < value <= maximum:
        raise _fail(key, config[key], expected)
    return value


def _boolean(config: CanonicalConfig, key: str) -> bool:
    value = config[key]
    if not isinstance(value, bool):
        raise _fail(key, value, "true or false")
    return value


def _names(config: CanonicalConfig, key: str) -> tuple[str, ...]:
    value = config[key]
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    if isinstance(value, list):
        return tuple(value)
    raise _fail(key, value, "a comma-separated list of column names")
