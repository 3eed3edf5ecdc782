"""Print this machine's package index settings as the ``index-env`` build secret (KEY=VALUE lines).

The images' RUN steps source it through images/build-env.sh, so pip and uv inside a build use the same
indexes as pip here, and no layer keeps them (index URLs may carry tokens). Read from ``pip config list``
(every pip.conf pip reads, and PIP_* variables) and from UV_* variables. Indexes a build cannot reach,
``file://`` URLs and plain paths of this machine, are left out with a note on stderr; so is find-links
(a folder of wheels goes in as a build context, see the Makefile's TORCH_WHEELS).

Usage: python3 images/index_env.py > build/images/index-env
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from collections.abc import Mapping

# pip's key -> (the pip variable, the uv variable) written for it.
_INDEX_KEYS = {
    "index-url": ("PIP_INDEX_URL", "UV_DEFAULT_INDEX"),
    "extra-index-url": ("PIP_EXTRA_INDEX_URL", "UV_INDEX"),
}
# Not index locations, but how patiently to fetch: passed on as they are.
_TIMEOUT_KEYS = {
    "timeout": ("PIP_DEFAULT_TIMEOUT", "UV_HTTP_TIMEOUT"),
    "default-timeout": ("PIP_DEFAULT_TIMEOUT", "UV_HTTP_TIMEOUT"),
}
_UV_PASSTHROUGH = ("UV_DEFAULT_INDEX", "UV_INDEX", "UV_INDEX_URL", "UV_EXTRA_INDEX_URL", "UV_HTTP_TIMEOUT")


def pip_settings(config_list: str) -> dict[str, str]:
    """``pip config list`` output (``scope.key='value'`` lines) to {key: value}; later scopes win, as in pip."""
    settings: dict[str, str] = {}
    for line in config_list.splitlines():
        name, sep, value = line.partition("=")
        if not sep or "." not in name:
            continue
        key = name.rsplit(".", 1)[1]
        try:
            settings[key] = str(ast.literal_eval(value))
        except (ValueError, SyntaxError):
            settings[key] = value
    return settings


def reachable(url: str) -> bool:
    """Only http(s) indexes can be reached from inside a build; file:// URLs and paths are this machine's."""
    return url.startswith(("https://", "http://"))


def index_env(settings: Mapping[str, str], environ: Mapping[str, str], notes: list[str]) -> list[str]:
    """The KEY=VALUE lines of the secret, sorted; ``notes`` gets one line per setting left out (no values)."""
    out: dict[str, str] = {}
    for key, (pip_var, uv_var) in _INDEX_KEYS.items():
        urls = settings.get(key, "").split()
        kept = [u for u in urls if reachable(u)]
        if len(kept) < len(urls):
            left = len(urls) - len(kept)
            notes.append(f"{key}: {left} location(s) not reachable from a build (file:// or a path) left out")
        if kept:
            out[pip_var] = out[uv_var] = " ".join(kept)
    for key, (pip_var, uv_var) in _TIMEOUT_KEYS.items():
        if settings.get(key, "").isdigit():
            out[pip_var] = out[uv_var] = settings[key]
    if settings.get("trusted-host"):
        out["PIP_TRUSTED_HOST"] = settings["trusted-host"]
    for var in _UV_PASSTHROUGH:
        if environ.get(var):
            out[var] = environ[var]
    if settings.get("find-links"):
        notes.append("find-links: left out (a folder of wheels goes in as a build context)")
    return [f"{k}={v}" for k, v in sorted(out.items())]


def main() -> int:
    listed = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, check=False
    )
    if listed.returncode != 0:
        print(
            f"index_env: `pip config list` failed, no index settings passed: {listed.stderr.strip()}", file=sys.stderr
        )
    notes: list[str] = []
    lines = index_env(pip_settings(listed.stdout), os.environ, notes)
    for note in notes:
        print(f"index_env: {note}", file=sys.stderr)
    names = ", ".join(line.split("=", 1)[0] for line in lines) or "none"
    print(f"index_env: {len(lines)} setting(s): {names}", file=sys.stderr)
    sys.stdout.write("".join(line + "\n" for line in lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
