"""What we uploaded, hashed once as it goes: the request's checksum headers and what the server must report."""

from __future__ import annotations

import base64
import hashlib


class Digest:
    """sha256 and md5 of what was uploaded, with the per-part digests S3 combines for multipart objects.

    Each part is hashed once for its request headers; the whole-object digests are the part's own while
    there is one part (every single-request PUT), and are computed apart only once a second part arrives.
    """

    def __init__(self) -> None:
        self.sha, self.md5, self.size = hashlib.sha256(), hashlib.md5(usedforsecurity=False), 0
        self.parts: list[tuple[bytes, bytes, int]] = []  # (sha256, md5, size) of each part
        self._first: bytes | None = None  # the lone part's bytes, hashed into sha/md5 if a second one comes

    def add(self, data: bytes) -> tuple[str, str]:
        """Account for one part; returns its base64 sha256 and md5, the request's checksum headers."""
        part = (hashlib.sha256(data).digest(), hashlib.md5(data, usedforsecurity=False).digest(), len(data))
        if self.parts:
            for earlier in (self._first, data) if self._first is not None else (data,):
                self.sha.update(earlier)
                self.md5.update(earlier)
            self._first = None
        else:
            self._first = data
        self.size += len(data)
        self.parts.append(part)
        return _b64(part[0]), _b64(part[1])

    def sha256(self) -> bytes:
        return self.parts[0][0] if len(self.parts) == 1 else self.sha.digest()

    def md5_hex(self) -> str:
        return self.parts[0][1].hex() if len(self.parts) == 1 else self.md5.hexdigest()

    def etags(self) -> set[str]:
        """ETags a server computes for these bytes: the md5, or the md5 of the part md5s and ``-N``."""
        joined = hashlib.md5(b"".join(p[1] for p in self.parts), usedforsecurity=False).hexdigest()
        return {self.md5_hex(), f"{joined}-{len(self.parts)}"}

    def checksums(self) -> set[str]:
        """SHA256 checksums a server reports: full-object, or composite (sha256 of the part sha256s)."""
        composite = _b64(hashlib.sha256(b"".join(p[0] for p in self.parts)).digest())
        return {_b64(self.sha256()), composite, f"{composite}-{len(self.parts)}"}


def _b64(digest: bytes) -> str:
    return base64.b64encode(digest).decode("ascii")
