"""A version's payload: bytes in memory, or local files streamed from disk (``LocalFile``)."""

from __future__ import annotations

from collections.abc import Mapping

from ml8s.chain._util import sha256_file, sha256_hex
from ml8s.chain.models import LocalFile, PayloadFile, PayloadSource
from ml8s.errors import ChainError


def local_file(path: str) -> LocalFile:
    """A local file as a payload entry, hashed once in chunks (commit streams it; memory stays flat)."""
    digest, size = sha256_file(path)
    return LocalFile(path=path, sha256=digest, size=size)


def payload_files(payload: Mapping[str, PayloadSource]) -> tuple[PayloadFile, ...]:
    """The sorted file list of a payload (names checked by PayloadFile's pattern); a LocalFile brings its
    own measured sha256 and size, so a large file is read once to hash it and once to upload it."""
    if not payload:
        raise ChainError("a version needs at least one payload file")
    return tuple(
        PayloadFile(name=n, sha256=d.sha256, size=d.size)
        if isinstance(d, LocalFile)
        else PayloadFile(name=n, sha256=sha256_hex(d), size=len(d))
        for n, d in sorted(payload.items())
    )
