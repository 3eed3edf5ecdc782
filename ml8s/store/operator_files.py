"""Small files an operator names in a setting or an option (a key, a trust root, an anchor), read safely.

Such a path may be a Kubernetes secret (a symbolic link: followed, unlike the store's own reads) but never
a FIFO (an ``open`` blocks until a writer comes), a device (``/dev/zero`` never ends) or a huge file: the
open does not block, the file must be regular, and at most ``max_bytes + 1`` bytes are read. Every failure
is a ConfigError naming the setting and the path.
"""

from __future__ import annotations

import os
import stat

from ml8s.errors import ConfigError
from ml8s.store._safe import kind

_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC


def read_operator_file(path: str, *, setting: str, expected: str, max_bytes: int) -> bytes:
    """The bytes of the regular file ``path`` that ``setting`` names (``"--anchor"``, ``"CHAIN_TRUST_ROOT"``);
    ConfigError "{setting}={path}: <what is wrong>; expected {expected}" when it is no such file."""
    try:
        fd = os.open(path, _FLAGS)
    except OSError as exc:
        raise ConfigError(f"{setting}={path}: {exc.strerror or exc}; expected {expected}") from exc
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise ConfigError(f"{setting}={path}: {kind(mode)}, not read; expected {expected}")
        chunks: list[bytes] = []
        read = 0
        while read <= max_bytes and (chunk := os.read(fd, max_bytes + 1 - read)):
            chunks.append(chunk)
            read += len(chunk)
    except OSError as exc:
        raise ConfigError(f"{setting}={path}: {exc.strerror or exc}; expected {expected}") from exc
    finally:
        os.close(fd)
    if read > max_bytes:
        raise ConfigError(f"{setting}={path}: over {max_bytes} bytes; expected {expected}")
    return b"".join(chunks)
