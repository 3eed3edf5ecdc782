"""Run identity (SPEC §2): the user-level variables, their normalization, the platform settings, the
validated parameters and the hashes that name a run (FULL_CONFIG_HASH, RUN_ID).

Every variable's text comes from one priority (:mod:`ml8s.identity.priority`), every root URI from one
parser (:mod:`ml8s.identity.uri`). Nothing here reads data or writes anything: the fingerprint comes from
:mod:`ml8s.data`.
"""

from __future__ import annotations

from ml8s.identity.hashing import RunIdentity, canonical_bytes, compute_identity, full_config_hash
from ml8s.identity.model_code import MODEL_CODE_KEY, PluginRef, parse_model_type
from ml8s.identity.params import RunParams, validate_params
from ml8s.identity.priority import explicit_or_env
from ml8s.identity.settings import PlatformSettings, worker_id
from ml8s.identity.uri import RootUri, parse_root_uri
from ml8s.identity.variables import (
    CANONICALIZATION_VERSION,
    USER_VARIABLES,
    CanonicalConfig,
    JsonValue,
    canonical_config,
    canonical_json,
    normalize_value,
)

__all__ = [
    "CANONICALIZATION_VERSION",
    "MODEL_CODE_KEY",
    "USER_VARIABLES",
    "CanonicalConfig",
    "JsonValue",
    "PlatformSettings",
    "PluginRef",
    "RootUri",
    "RunIdentity",
    "RunParams",
    "canonical_bytes",
    "canonical_config",
    "canonical_json",
    "compute_identity",
    "explicit_or_env",
    "full_config_hash",
    "normalize_value",
    "parse_model_type",
    "parse_root_uri",
    "validate_params",
    "worker_id",
]
