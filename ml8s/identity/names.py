"""The names a run is registered under, checked when the settings are read (before anything is written).

MLFLOW_MODEL_NAME is MLflow's: almost any text, except what MLflow refuses (``/``, ``:``, a name a path
normalization would change, more than its 256-character column) and control characters (a newline split the
run's one-line summary, an escape sequence reached the terminal); MLFLOW_EXPERIMENT_PREFIX takes no control
characters either. CHAIN_NAME is a path segment in the
store (``ml8s_chain/{name}/``): letters, digits, ``.``, ``_`` and ``-``, starting with a letter or digit,
at most 128 characters. CHAIN_NAME defaults to the model name; a model name that is no valid chain name
(``it's-model``) gives a chain name derived from it by :func:`chain_name_from_model`.
"""

from __future__ import annotations

import hashlib
import posixpath
import re

from ml8s.errors import ConfigError
from ml8s.text import quoted

# Patterns are applied with fullmatch: ``$`` alone would let a trailing newline through.
CHAIN_NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
CHAIN_NAME_RULE = "letters, digits, '.', '_' or '-', starting with a letter or digit, at most 128 characters"
MAX_MODEL_NAME = 256  # MLflow's registered_models.name column
MAX_EXPERIMENT_NAME = 500  # MLflow refuses a longer experiment name (its MAX_EXPERIMENT_NAME_LENGTH)
_OUTSIDE_CHAIN_NAME = re.compile(r"[^A-Za-z0-9._-]")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")  # Unicode category Cc
_DIGEST_CHARS = 8


def check_model_name(name: str) -> str:
    """``name`` when MLflow accepts it as a registered model name.

    Raises:
        ConfigError: naming MLFLOW_MODEL_NAME and what MLflow expects.
    """
    normalized = posixpath.normpath(name) if name else ""
    if not name.strip():
        why = "it is empty"
    elif "/" in name or ":" in name:
        why = "MLflow refuses '/' and ':' in model names"
    elif normalized != name or normalized == "." or normalized.startswith(".."):
        why = f"MLflow refuses names a path normalization changes (this one reads as {normalized!r})"
    elif len(name) > MAX_MODEL_NAME:
        why = f"it has {len(name)} characters; MLflow stores at most {MAX_MODEL_NAME}"
    elif _CONTROL.search(name):
        why = "it holds a control character (a newline, a tab, an escape)"
    else:
        return name
    raise ConfigError(f"MLFLOW_MODEL_NAME={quoted(name)} is invalid: {why}; expected a registered model name")


def check_experiment_name(name: str) -> str:
    """``name`` when MLflow accepts it as an experiment name: a longer one failed registration, after the run had
    trained and written its artifacts.

    Raises:
        ConfigError: naming MLFLOW_EXPERIMENT_PREFIX (MLflow's MLFLOW_EXPERIMENT_NAME stands in for it).
    """
    if len(name) > MAX_EXPERIMENT_NAME:
        raise ConfigError(
            f"MLFLOW_EXPERIMENT_PREFIX (or MLFLOW_EXPERIMENT_NAME) has {len(name):,} characters; expected an MLflow "
            f"experiment name of at most {MAX_EXPERIMENT_NAME}"
        )
    if _CONTROL.search(name):
        raise ConfigError(
            f"MLFLOW_EXPERIMENT_PREFIX (or MLFLOW_EXPERIMENT_NAME)={quoted(name)} holds a control character (a "
            "newline, a tab, an escape); expected an MLflow experiment name without one"
        )
    return name


def check_chain_name(name: str) -> str:
    """``name`` when it is a valid chain name.

    Raises:
        ConfigError: naming CHAIN_NAME and the rule.
    """
    if not CHAIN_NAME_PATTERN.fullmatch(name):
        raise ConfigError(f"CHAIN_NAME={quoted(name)} is invalid; expected {CHAIN_NAME_RULE}")
    return name


def chain_name_from_model(model_name: str) -> str:
    """The chain name a model name gives when CHAIN_NAME is unset: itself when valid, else a derived one.

    Every character outside the chain-name alphabet becomes ``-`` (leading ``.``, ``_`` and ``-`` are
    dropped), and the first 8 hex digits of the name's sha256 are appended, so ``it's-model`` and
    ``it-s-model`` never share a chain. Deterministic: every process and every host derives the same.

    Example:
        >>> chain_name_from_model("churn-v2")
        'churn-v2'
        >>> chain_name_from_model("it's-model")  # doctest: +ELLIPSIS
        'it-s-model-...'
    """
    if CHAIN_NAME_PATTERN.fullmatch(model_name):
        return model_name
    digest = hashlib.sha256(model_name.encode("utf-8", "surrogatepass")).hexdigest()[:_DIGEST_CHARS]
    stem = _OUTSIDE_CHAIN_NAME.sub("-", model_name).lstrip("._-")[: 128 - 1 - _DIGEST_CHARS] or "model"
    return f"{stem}-{digest}"
