"""MODEL_TYPE and the code identity of a plug-in model: what the canonical config may hold for them.

``MODEL_TYPE`` is a built-in family (``mlp``, ``logreg``) or ``plugin:<module>:<attribute>``, the import
path of a model family a team brings (``ml8s.modeling.plugins`` loads it). A plug-in's code is part of
the run's identity: bootstrap resolves it into the canonical config's ``model_code`` key (a sha256 of
the plug-in package's Python sources, or the version of the distribution that installed it), so two
runs whose plug-in code differs get different RUN_IDs. Built-in families are ml8s's own code:
their ``model_code`` is ``null``. Only the grammar lives here (below ``ml8s.modeling`` in the layering),
so validation and the verifier share it without importing any model code.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict

from ml8s.errors import ConfigError
from ml8s.identity.variables import CanonicalConfig, JsonValue, value_shown

BUILTIN_MODEL_TYPES = ("logreg", "mlp")
PLUGIN_PREFIX = "plugin:"
MODEL_CODE_KEY = "model_code"
SOURCE_CODE_PREFIX = "sha256:"
DISTRIBUTION_CODE_PREFIX = "dist:"

_IDENTIFIER = r"[A-Za-z_][A-Za-z0-9_]*"
_PLUGIN = re.compile(rf"plugin:(?P<module>{_IDENTIFIER}(\.{_IDENTIFIER})*):(?P<attribute>{_IDENTIFIER})")
_CODE = re.compile(r"sha256:[0-9a-f]{64}|dist:[A-Za-z0-9][A-Za-z0-9._-]*==[A-Za-z0-9][A-Za-z0-9.+!_-]*")
_EXPECTED = "one of mlp, logreg, or plugin:<module>:<attribute> (e.g. plugin:my_pkg.models:build)"


class PluginRef(BaseModel):
    """The import path of a plug-in model family: ``importlib.import_module(module).<attribute>``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    module: str
    attribute: str

    @property
    def model_type(self) -> str:
        """The MODEL_TYPE value that names this plug-in."""
        return f"{PLUGIN_PREFIX}{self.module}:{self.attribute}"


def parse_model_type(value: JsonValue) -> PluginRef | None:
    """None for a built-in family, the import path for a plug-in.

    Raises:
        ConfigError: neither a built-in family nor a well-formed ``plugin:<module>:<attribute>``.
    """
    if isinstance(value, str) and value in BUILTIN_MODEL_TYPES:
        return None
    match = _PLUGIN.fullmatch(value) if isinstance(value, str) else None
    if match is None:
        raise ConfigError(f"MODEL_TYPE={value_shown(value)} is invalid; expected {_EXPECTED}")
    return PluginRef(module=match["module"], attribute=match["attribute"])


def is_plugin(model_type: str) -> bool:
    """Whether MODEL_TYPE names a plug-in (by its prefix; :func:`parse_model_type` checks the rest)."""
    return model_type.startswith(PLUGIN_PREFIX)


def is_model_code(value: JsonValue) -> bool:
    """Whether ``value`` has the form of a resolved code identity (``sha256:<hex>`` or ``dist:<name>==<version>``)."""
    return isinstance(value, str) and _CODE.fullmatch(value) is not None


def model_code_problem(config: CanonicalConfig) -> str | None:
    """What is wrong with the canonical config's MODEL_TYPE and ``model_code`` together, or None.

    A plug-in needs its resolved code identity; a built-in family has none (``null``).
    """
    model_type, code = config.get("model_type"), config.get(MODEL_CODE_KEY)
    try:
        plugin = parse_model_type(model_type)
    except ConfigError as exc:
        return exc.message
    if plugin is None and code is not None:
        return f"{MODEL_CODE_KEY} is {code!r} for the built-in MODEL_TYPE={model_type!r}; expected null"
    if plugin is not None and not is_model_code(code):
        return (
            f"{MODEL_CODE_KEY} is {code!r} for the plug-in MODEL_TYPE={model_type!r}; expected its code identity "
            "(sha256:<64 hex digits> or dist:<name>==<version>), resolved at bootstrap"
        )
    return None


def validate_model_type(config: CanonicalConfig) -> str:
    """MODEL_TYPE, checked together with its code identity.

    Raises:
        ConfigError: a malformed MODEL_TYPE, or a plug-in whose code identity was not resolved.
    """
    problem = model_code_problem(config)
    if problem is not None:
        raise ConfigError(problem)
    value = config["model_type"]
    if not isinstance(value, str):  # parse_model_type accepted it, so it is a string; this narrows the type
        raise ConfigError(f"MODEL_TYPE={value_shown(value)} is invalid; expected {_EXPECTED}")
    return value
