"""The S3 settings read from the environment: credentials, endpoint and region, each checked where it is read."""

from __future__ import annotations

import re
from collections.abc import Mapping
from urllib.parse import urlsplit

from ml8s.errors import ConfigError
from ml8s.text import quoted

_REGION = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-]{0,61}[a-zA-Z0-9])?")


def first(env: Mapping[str, str], *names: str) -> str | None:
    """The value of the first of ``names`` set (not empty) in ``env``, or None."""
    return next((env[n] for n in names if env.get(n)), None)


def endpoint_url(env: Mapping[str, str]) -> str | None:
    """The endpoint URL from env, or None (AWS); ConfigError naming the variable when it is no http(s) URL
    (botocore raised a bare ValueError at client creation, or failed each request later)."""
    name = next((n for n in ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "FLYTE_AWS_ENDPOINT") if env.get(n)), "")
    if not name:
        return None
    value = env[name]
    try:
        parts = urlsplit(value)
        valid = parts.scheme in ("http", "https") and bool(parts.hostname) and parts.port != 0
    except ValueError:  # a port out of range or not a number, a bracket left open
        valid = False
    if not valid or value != value.strip():
        raise ConfigError(f"{name}={quoted(value)} is not an S3 endpoint; expected http(s)://HOST[:PORT]")
    return value


def region_name(env: Mapping[str, str]) -> str:
    name = next((n for n in ("AWS_REGION", "AWS_DEFAULT_REGION") if env.get(n)), "")
    if name and not _REGION.fullmatch(env[name]):
        raise ConfigError(f"{name}={quoted(env[name])} is not a region name; expected one such as us-east-1")
    return env[name] if name else "us-east-1"
