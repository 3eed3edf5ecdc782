"""Tar archives built in memory for tests: image layers, audit bundles, hostile archives."""

from __future__ import annotations

import io
import tarfile


def tar_bytes(members: dict[str, bytes]) -> bytes:
    """An uncompressed tar of ``members`` (name -> content), in name order, regular files only."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        for name, data in sorted(members.items()):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return raw.getvalue()
