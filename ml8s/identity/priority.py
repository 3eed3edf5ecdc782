"""Where a variable's text comes from, written down once for every variable (user-level and platform).

1. an explicit input: a workflow input or a CLI flag, keyed by the variable's lower-case name;
2. the environment, keyed by the variable's name;
3. the default, which the caller owns (USER_VARIABLES, the PlatformSettings fields).

A value that is empty or only whitespace counts as not given at its level: a workflow input left at "" takes
the environment, and ``VAR=`` in the environment takes the default.
"""

from __future__ import annotations

from collections.abc import Mapping

from ml8s.errors import ConfigError
from ml8s.text import quoted


def explicit_or_env(name: str, env: Mapping[str, str], explicit: Mapping[str, str] | None = None) -> str | None:
    """The trimmed text of variable ``name`` by the priority above; None when neither level gives one.

    Args:
        name: the variable's name, e.g. ``PIPELINE_ROOT_URI``.
        env: the environment (``os.environ`` or a mapping standing in for it).
        explicit: workflow inputs or CLI flags, keyed by lower-case name.

    Example:
        >>> explicit_or_env("EPOCHS", {"EPOCHS": "3"}, {"epochs": " "})
        '3'
    """
    for value in ((explicit or {}).get(name.lower()), env.get(name)):
        if value is not None and value.strip():
            return checked_utf8(name, value.strip())
    return None


def checked_utf8(name: str, value: str) -> str:
    """``value`` (given as ``name``) unless it holds bytes that are not UTF-8 (Python keeps them as lone
    surrogates): every value is written as UTF-8 (canonical JSON, manifests, MLflow, paths), and those writes
    failed deep inside a run."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ConfigError(
            f"{name}={quoted(value)} holds bytes that are not UTF-8 (the first at character {exc.start + 1}); "
            "expected UTF-8 text"
        ) from exc
    return value
