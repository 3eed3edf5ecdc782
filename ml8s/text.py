"""Text for messages and records from what came from outside.

Bytes that are not UTF-8 (file names, arguments, environment variables) reach Python as lone surrogates, which
every UTF-8 write refuses (canonical JSON, manifests, block headers, reports): callers check with
:func:`is_utf8` before they write anything, and show such text with :func:`shown`. A document that does not
validate is named by its first problem (:func:`first_problem`), never echoed.
"""

from __future__ import annotations

from pydantic import ValidationError


def is_utf8(text: str) -> bool:
    """Whether ``text`` encodes as UTF-8 (it holds no lone surrogate)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def is_digits(text: str) -> bool:
    """Whether ``text`` is one or more ASCII digits: ``str.isdigit`` also takes '０' (full width, which ``int``
    reads as 0) and '²' (which ``int`` refuses), so a whole number from outside is checked with this."""
    return text.isascii() and text.isdigit()


def shown(text: str) -> str:
    """``text`` as a message or report can hold it: the bytes that were not UTF-8 as ``\\xff`` escapes."""
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def first_problem(exc: ValidationError) -> str:
    """The first validation problem as 'field: reason' (one line, without the input, which may be huge or hostile)."""
    first = exc.errors(include_input=False, include_url=False)[0]
    at = ".".join(str(part) for part in first["loc"]) or "the document"
    more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    return f"{at}: {' '.join(first['msg'].split())}{more}"
