"""Plug-in model families: loading one by import path, and the code identity that enters the run's hash.

``MODEL_TYPE=plugin:my_pkg.models:build`` names ``my_pkg.models.build``: a
:class:`~ml8s.modeling.family.ModelFamily`, or a bare ``build(spec) -> torch.nn.Module`` function.
Bootstrap imports it (a bad import path fails there, naming MODEL_TYPE, before anything is written)
and records its code identity in the canonical config (``model_code``), so RUN_ID changes with the code:

- ``sha256:<hex>``: the sha256 of every importable code file (``.py`` sources and compiled extension
  modules) of the plug-in's top-level package, or of its single module file: one
  ``{relative_path}:{sha256}`` line per file, sorted, joined with ``\\n``. Byte caches
  (``__pycache__``) and hidden directories are skipped.
- ``dist:<name>==<version>``: only when the module has no such files (e.g. imported from a zip):
  the version of the installed distribution providing it.

Code outside the plug-in's package (its own dependencies) is not hashed: pin those in the environment.
Nothing here imports torch; the plug-in module itself may.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.machinery
import importlib.metadata
import importlib.util
import os

from ml8s.errors import ConfigError
from ml8s.identity.model_code import (
    DISTRIBUTION_CODE_PREFIX,
    MODEL_CODE_KEY,
    SOURCE_CODE_PREFIX,
    PluginRef,
    parse_model_type,
)
from ml8s.identity.variables import CanonicalConfig
from ml8s.modeling.family import ModelFamily

_CODE_SUFFIXES = tuple(sorted({*importlib.machinery.SOURCE_SUFFIXES, *importlib.machinery.EXTENSION_SUFFIXES}))


def resolve_model_code(config: CanonicalConfig) -> CanonicalConfig:
    """The canonical config with ``model_code`` resolved: unchanged for a built-in family.

    Raises:
        ConfigError: MODEL_TYPE is malformed, cannot be imported, is not a family, or its code cannot
            be identified. The message names MODEL_TYPE.
    """
    plugin = parse_model_type(config.get("model_type"))
    if plugin is None:
        return config
    if config.get("model_format") == "safetensors":
        # A safetensors model is served by rebuilding a built-in family's layers: inference never imports a
        # plug-in. Such a run trained, wrote every artifact and the registry claim, then failed at registration.
        raise ConfigError(
            f"MODEL_TYPE={plugin.model_type!r} with MODEL_FORMAT='safetensors': a safetensors model is loaded by "
            "rebuilding a built-in family (mlp, logreg), and ml8s never imports a plug-in where it predicts; "
            "expected MODEL_FORMAT=onnx for a plug-in"
        )
    before = code_identity(plugin)
    import_target(plugin)
    after = code_identity(plugin)
    if after != before:
        raise ConfigError(
            f"MODEL_TYPE={plugin.model_type!r}: the plug-in's code changed while it was being imported "
            f"({before} then {after}); expected it unchanged during bootstrap, re-run"
        )
    return {**config, MODEL_CODE_KEY: after}


def import_target(plugin: PluginRef) -> object:
    """Import the plug-in's module and return its attribute, checked to be a family or a callable.

    Raises:
        ConfigError: naming MODEL_TYPE, when the module cannot be imported (or fails while importing),
            has no such attribute, or the attribute is neither a ModelFamily nor callable.
    """
    where = f"MODEL_TYPE={plugin.model_type!r}"
    try:
        module = importlib.import_module(plugin.module)
    except ModuleNotFoundError as exc:
        raise ConfigError(
            f"{where}: no module named {exc.name or plugin.module!r}; expected an importable module "
            "(install the plug-in's package, or put it on PYTHONPATH, where bootstrap and training run)"
        ) from exc
    except Exception as exc:  # the plug-in's own import-time code failed: whatever it raised, name it
        raise ConfigError(
            f"{where}: importing {plugin.module!r} failed with {type(exc).__name__}: {exc}; "
            "expected the module to import cleanly"
        ) from exc
    target: object = getattr(module, plugin.attribute, None)
    if target is None:
        raise ConfigError(f"{where}: module {plugin.module!r} has no attribute {plugin.attribute!r}")
    if not isinstance(target, ModelFamily) and not callable(target):
        raise ConfigError(
            f"{where}: {plugin.module}.{plugin.attribute} is a {type(target).__name__}; expected an "
            "ml8s.modeling.ModelFamily or a build(spec) -> torch.nn.Module function"
        )
    return target


def code_identity(plugin: PluginRef) -> str:
    """``sha256:<hex>`` of the plug-in's code files, else ``dist:<name>==<version>`` (module docstring).

    Raises:
        ConfigError: the top-level package cannot be found, or has neither code files nor a distribution.
    """
    top = plugin.module.partition(".")[0]
    where = f"MODEL_TYPE={plugin.model_type!r}"
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError) as exc:
        raise ConfigError(f"{where}: cannot locate {top!r}: {exc}; expected an importable package") from exc
    if spec is None:
        raise ConfigError(
            f"{where}: no module named {top!r}; expected an importable module "
            "(install the plug-in's package, or put it on PYTHONPATH, where bootstrap and training run)"
        )
    files = _code_files(top, spec)
    if files:
        return SOURCE_CODE_PREFIX + _hash_files(files)
    distributions = sorted(importlib.metadata.packages_distributions().get(top, []))
    if distributions:
        return f"{DISTRIBUTION_CODE_PREFIX}{distributions[0]}=={importlib.metadata.version(distributions[0])}"
    raise ConfigError(
        f"{where}: {top!r} has no code files to hash and no installed distribution to take a version from; "
        "expected a package or module on disk, or an installed distribution"
    )


def _code_files(top: str, spec: importlib.machinery.ModuleSpec) -> list[tuple[str, str]]:
    """``(relative_path, path)`` of every code file of the top-level package (or its one module file)."""
    locations = list(spec.submodule_search_locations or [])
    if not locations:
        origin = spec.origin or ""
        return [(os.path.basename(origin), origin)] if origin.endswith(_CODE_SUFFIXES) else []
    found: list[tuple[str, str]] = []
    for location in locations:
        for directory, dirs, names in os.walk(location):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__" and not d.startswith("."))
            rel_dir = os.path.relpath(directory, location).replace(os.sep, "/")
            for name in sorted(names):
                if name.endswith(_CODE_SUFFIXES):
                    rel = f"{top}/{name}" if rel_dir == "." else f"{top}/{rel_dir}/{name}"
                    found.append((rel, os.path.join(directory, name)))
    return sorted(found)


def _hash_files(files: list[tuple[str, str]]) -> str:
    lines = []
    for rel, path in files:
        try:
            with open(path, "rb") as handle:
                lines.append(f"{rel}:{hashlib.file_digest(handle, 'sha256').hexdigest()}")
        except OSError as exc:
            raise ConfigError(f"cannot read plug-in code file {path}: {exc.strerror or exc}") from exc
    return hashlib.sha256("\n".join(sorted(lines)).encode("utf-8")).hexdigest()
