"""Whether a local root is a directory, or a path one can be created at, before anything reads under it.

A root that is a file, a FIFO or a symlink loop makes every read under it fail with ENOTDIR or ELOOP; each
reader would word that differently (or, listing nothing, report an empty root). The CLI, bootstrap and
verify check the shape once, up front, and name the root and what stands there instead.
"""

from __future__ import annotations

import errno
import os
import stat

from ml8s.errors import ConfigError
from ml8s.text import quoted


def check_local_root(uri: str, *, variable: str = "PIPELINE_ROOT_URI") -> str | None:
    """Raise :class:`ConfigError` naming ``variable`` when a ``file://`` root is no directory and none can be
    created there (a file, a FIFO, a symlink loop); the nearest existing directory, or None for an S3 root."""
    if not uri.startswith("file://"):
        return None
    return creatable_directory(
        uri[len("file://") :], f"{variable}={quoted(uri)}", "a directory (or a path one can be created at)"
    )


def creatable_directory(path: str, said: str, expected: str) -> str:
    """The nearest existing directory at or above ``path`` (where the missing rest can be created); ConfigError
    "``said``: EXISTING is KIND, expected ``expected``" when what stands there is no directory."""
    existing = path
    while not os.path.lexists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        raise ConfigError(f"{said}: {existing} is {kind_of(existing)}, expected {expected}")
    return existing


def kind_of(path: str) -> str:
    """What stands at ``path`` instead of a directory, in the words of the error."""
    if os.path.islink(path) and not os.path.exists(path):
        try:
            os.stat(path)
        except OSError as exc:
            return "a symlink loop" if exc.errno == errno.ELOOP else "a broken symlink"
    mode = os.stat(path).st_mode
    for test, words in ((stat.S_ISREG, "a file"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return words
    return "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "not a directory"
