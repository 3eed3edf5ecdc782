"""Reading contract files back: ``parse`` for verifiers, ``load`` for pipeline steps.

``parse`` turns bytes into a model or raises :class:`Invalid` (an :class:`Unavailable`) naming the
file and the problem, so a check that merely *uses* a file skips, and the check that *owns* it fails.
``load`` is the same reading for a step of the pipeline, where a malformed file is an
:class:`~ml8s.errors.IntegrityError`.
"""

from __future__ import annotations

from typing import TypeVar

from pydantic import BaseModel, ValidationError

from ml8s.errors import IntegrityError
from ml8s.identity.hashing import canonical_bytes, json_loads
from ml8s.text import first_problem


class Unavailable(Exception):
    """A check cannot run: an input it needs is missing or unreadable. The runner reports it as SKIP
    (the check that owns that input FAILs for it)."""


class Invalid(Unavailable):
    """A record is present but malformed: the check that owns it FAILs (a missing one may only SKIP)."""


M = TypeVar("M", bound=BaseModel)


def parse(rel: str, data: bytes, model: type[M]) -> M:
    """Validate ``data`` as ``model``; also require the canonical JSON form the pipeline writes
    (sorted keys, 2-space indent, trailing newline), so a reformatted file is noticed too."""
    try:
        raw = json_loads(data)
    except ValueError as exc:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise Invalid(f"{rel} is not valid UTF-8 JSON: {exc}") from exc
    try:
        # JSON mode: a strict model takes a JSON array for a tuple field, as it reads the file it wrote.
        parsed = model.model_validate_json(data)
    except ValidationError as exc:
        raise Invalid(f"{rel} is not a valid record: {first_problem(exc)}") from exc
    try:
        canonical = canonical_bytes(raw)
    except ValueError:  # NaN or Infinity: JSON that ml8s never writes
        canonical = b""
    if canonical != data:
        raise Invalid(f"{rel} is not in the canonical form ml8s writes (edited by hand or by another tool)")
    return parsed


def load(uri: str, data: bytes, model: type[M]) -> M:
    """``parse`` for a pipeline step: a malformed file raises :class:`~ml8s.errors.IntegrityError`."""
    try:
        return parse(uri, data, model)
    except Invalid as exc:
        raise IntegrityError(f"{exc}; expected the file as ml8s wrote it (run `ml8s verify`)") from exc


def checksum_lines(checksums: dict[str, str]) -> bytes:
    """``sha256sum`` format (``<hex>  <path>``), sorted by path: ``sha256sum -c`` checks it."""
    return "".join(f"{digest}  {path}\n" for path, digest in sorted(checksums.items())).encode("utf-8")


def parse_checksum_lines(rel: str, data: bytes) -> dict[str, str]:
    """Inverse of :func:`checksum_lines`; a malformed, duplicated or unsorted line is an error."""
    out: dict[str, str] = {}
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise Invalid(f"{rel} is not UTF-8 text") from exc
    for number, line in enumerate(text.splitlines(), start=1):
        digest, sep, path = line.partition("  ")
        if not sep or len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest) or not path:
            raise Invalid(f"{rel} line {number} is not '<sha256 hex>  <path>': {line[:80]!r}")
        if path in out:
            raise Invalid(f"{rel} lists {path} twice")
        out[path] = digest
    if checksum_lines(out) != data:
        raise Invalid(f"{rel} is not sorted by path with one trailing newline per line")
    return out
