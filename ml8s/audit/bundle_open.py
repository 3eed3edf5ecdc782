"""Reading an audit bundle for ``ml8s audit verify``: every member in memory, never extracted, bounded.

A bundle comes from whoever hands it to the auditor: its size is bounded packed and unpacked (a small gzip of
zeros expands to gigabytes), a FIFO is refused instead of waited on, and a member that is no regular file or
that would land outside the top directory is a problem, not a path.
"""

from __future__ import annotations

import dataclasses
import gzip
import io
import os
import re
import tarfile
import zlib
from typing import TypeVar

from pydantic import BaseModel

from ml8s.audit import bundle as b
from ml8s.audit.bundle import BUNDLE_MAX_BYTES
from ml8s.audit.run_checks import use
from ml8s.contract import (
    ConfigSnapshot,
    FingerprintRecord,
    Manifest,
    TrainingMetadata,
    Unavailable,
    layout,
    parse,
    parse_checksum_lines,
)
from ml8s.errors import ConfigError
from ml8s.store.operator_files import read_operator_file

M = TypeVar("M", bound=BaseModel)
_NOT_ZERO = re.compile(rb"[^\0]")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


@dataclasses.dataclass(frozen=True)
class OpenedBundle:
    """An archive's members (path below the top directory -> bytes) and what was wrong reading it."""

    path: str
    top: str
    members: dict[str, bytes]
    problems: tuple[str, ...]

    def read(self, rel: str) -> bytes:
        if rel not in self.members:
            raise Unavailable(f"{rel} is not in the bundle (see check archive)")
        return self.members[rel]

    def parse(self, rel: str, model: type[M]) -> M:
        return parse(rel, self.read(rel), model)

    def index(self) -> b.BundleIndex:
        return use(lambda: self.parse(b.INDEX, b.BundleIndex), "archive")

    def snapshot(self) -> ConfigSnapshot:
        return self.parse(f"{b.RUN_DIR}/{layout.CONFIG_SNAPSHOT}", ConfigSnapshot)

    def manifest(self) -> Manifest:
        return self.parse(f"{b.RUN_DIR}/{layout.MANIFEST}", Manifest)

    def metadata(self) -> TrainingMetadata:
        return self.parse(f"{b.RUN_DIR}/{layout.TRAINING_METADATA}", TrainingMetadata)

    def fingerprint_record(self) -> FingerprintRecord:
        return self.parse(f"{b.RUN_DIR}/{layout.DATA_FINGERPRINT}", FingerprintRecord)

    def checksum_list(self, rel: str) -> dict[str, str]:
        return parse_checksum_lines(rel, self.read(rel))


def open_bundle(path: str) -> OpenedBundle:
    """Read every member of the tar.gz at ``path``; problems instead of exceptions for a bad archive."""
    if not os.path.lexists(path):
        return OpenedBundle(path, "", {}, (f"{path} does not exist",))
    try:
        # Bounded, compressed and expanded: a bundle comes from whoever hands it to the auditor, and a 2 MB gzip
        # of zeros expands to gigabytes; a FIFO is refused instead of waited on.
        packed = read_operator_file(path, setting="bundle", expected="an audit bundle", max_bytes=BUNDLE_MAX_BYTES)
        with gzip.GzipFile(fileobj=io.BytesIO(packed)) as unpacking:
            raw = unpacking.read(BUNDLE_MAX_BYTES + 1)
        if len(raw) > BUNDLE_MAX_BYTES:
            return OpenedBundle(path, "", {}, (f"{path} expands to over {BUNDLE_MAX_BYTES} bytes; expected a bundle",))
        archive = tarfile.open(fileobj=io.BytesIO(raw), mode="r:")
    except ConfigError as exc:
        return OpenedBundle(path, "", {}, (str(exc).removeprefix("CONFIG_ERROR: bundle="),))
    except (OSError, EOFError, zlib.error, tarfile.TarError) as exc:
        return OpenedBundle(path, "", {}, (f"{path} is not a readable tar.gz: {exc}",))
    members: dict[str, bytes] = {}
    problems: list[str] = []
    tops: set[str] = set()
    try:
        with archive:
            for info in archive:
                top, _, rel = info.name.partition("/")
                parts = rel.split("/")
                unsafe = not info.isreg() or not top or not rel or "" in parts or ".." in parts or "." in parts
                if unsafe or _CONTROL.search(info.name):  # a newline or an escape: no name ml8s writes
                    problems.append(f"unsafe or unexpected member {info.name!r} (type {info.type!r})")
                    continue
                if rel in members:
                    problems.append(f"member {info.name!r} appears twice")
                extracted = archive.extractfile(info)
                members[rel] = extracted.read() if extracted else b""
                tops.add(top)
    except (EOFError, tarfile.TarError) as exc:  # the tar cut short inside a whole gzip: its headers read lazily
        problems.append(f"{path} is cut short after {len(members)} whole member(s) ({exc}); expected a whole tar.gz")
    else:
        # tarfile ends its listing, silently, at the first block that is no valid header: a member longer than its
        # header says, a corrupt header or anything appended after the end of the archive was never read, and the
        # bundle PASSed. What follows the last member is the tar's zero padding alone.
        if stray := _NOT_ZERO.search(raw, archive.offset):
            problems.append(
                f"{path} holds data at byte {stray.start()} of its tar, after its last readable member (ending at "
                f"byte {archive.offset}): a corrupt header, a member longer than it says or data appended; "
                "expected only the tar's zero padding after its members"
            )
    if len(tops) > 1:
        problems.append(f"members under several top directories: {sorted(tops)}")
    return OpenedBundle(path, min(tops, default=""), members, tuple(problems))
