"""Text for messages and records from what came from outside.

Bytes that are not UTF-8 (file names, arguments, environment variables) reach Python as lone surrogates, which
every UTF-8 write refuses (canonical JSON, manifests, block headers, reports): callers check with
:func:`is_utf8` before they write anything, and show such text with :func:`shown`. A document that does not
validate is named by its first problem (:func:`first_problem`), never echoed. A value an error message quotes is
cut short and escaped (:func:`quoted`), and loses a URL's credentials (:func:`without_credentials`).
"""

from __future__ import annotations

import json
import re

from pydantic import ValidationError

# The characters of a value an error message quotes (:func:`quoted`): a 100 KB variable, echoed whole, buried the
# one line of a CONFIG_ERROR in terminals, logs and reports.
EXCERPT_CHARS = 200
# The marks that reorder the rest of a line (bidirectional embeddings, overrides, isolates and marks) or break it
# where a terminal or log viewer honours them (U+2028, U+2029): a name ending in U+202E "txt.exe" reads "exe.txt".
_REORDERING = "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029"
# What :func:`shown` escapes: Unicode category Cc, and the marks above.
_CONTROL = re.compile(f"[\x00-\x1f\x7f-\x9f{_REORDERING}]")
# A URL's userinfo in free text: up to the last "@" of its authority, which ends at "/", "?" or "#" (a password
# may hold an "@").
_USERINFO = re.compile(r"\b([A-Za-z][A-Za-z0-9+.\-]*://)([^\s/?#]*)@")
# What a terminal must not get raw from a message (:func:`terminal_text`): Cc but the line feed and the tab, and
# the reordering marks.
_UNSAFE_IN_LINES = re.compile(f"[\x00-\x08\x0b-\x1f\x7f-\x9f{_REORDERING}]")
# What :func:`terminal_json` writes as ``\\uXXXX``: those, and the lone surrogates that stand for bytes that were
# no UTF-8 (raw, they made the report no UTF-8; escaped, a JSON reader takes them back as the same text)
_UNSAFE_IN_JSON = re.compile(_UNSAFE_IN_LINES.pattern[:-1] + "\ud800-\udfff]")


def without_credentials(text: str) -> str:
    """``text`` with the credentials of every URL in it removed, as a manifest records a tracking URI: an
    ``http(s)://`` URL loses its whole userinfo (a token alone is a secret), another keeps the user name.

    Every error message passes through it (an MLflow URL may carry a password, and a message reaches
    terminals, logs, reports and audit bundles), and so does every log line.

    Example:
        >>> without_credentials("MLflow at https://bot:s3cret@mlflow:5000/ and postgresql://ml:pw@db/m")
        'MLflow at https://mlflow:5000/ and postgresql://ml@db/m'
    """

    def public(match: re.Match[str]) -> str:
        scheme, user = match.group(1), match.group(2).partition(":")[0]
        return scheme if scheme.lower() in ("http://", "https://") or not user else f"{scheme}{user}@"

    return _USERINFO.sub(public, text)


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
    """``text`` as a message or report can hold it: the bytes that were not UTF-8 as ``\\xff`` escapes, and the
    control characters and the marks that reorder or break a line (bidirectional controls, U+2028, U+2029) as
    ``repr`` escapes them (a file name with a newline forged a line of tmp-cleanup's output, one with an escape
    sequence reached the terminal, one with U+202E printed the rest of its line backwards)."""
    text = text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    return _CONTROL.sub(lambda match: repr(match.group())[1:-1], text)


def terminal_text(message: str) -> str:
    """``message`` as the CLI prints it (its error lines): the control characters (an escape sequence that clears
    the screen, a carriage return that writes over the line) and bytes that were not UTF-8 escaped as :func:`shown`
    escapes them, wherever the message took them from (a store key, a file name, an exception's text). The line
    feeds and tabs that lay out a multi-line message stay; each line after the first is indented, so that none
    reads as a line of its own (``ml8s: ...``).

    Example:
        >>> terminal_text("bad key 'a\\x1b[2Jb\\rc'\\nsecond line")
        "bad key 'a\\\\x1b[2Jb\\\\rc'\\n  second line"
    """
    text = message.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace").rstrip("\n")
    return _UNSAFE_IN_LINES.sub(lambda match: repr(match.group())[1:-1], text).replace("\n", "\n  ")


def terminal_json(obj: object) -> str:
    """``obj`` as the CLI prints a JSON report: readable (indented, keys sorted, non-ASCII kept), but the characters
    :func:`terminal_text` escapes that JSON leaves raw (C1 controls such as U+009B, which a terminal takes as CSI,
    DEL, bidirectional overrides, line separators) written as ``\\uXXXX``: a store key holding one steered the
    operator's terminal. JSON itself escapes C0 controls, so these appear only inside strings, where the escape
    parses back to the same text; so do names that were no UTF-8 (lone surrogates), which left the output no UTF-8."""
    text = json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False)
    return _UNSAFE_IN_JSON.sub(lambda match: f"\\u{ord(match.group()):04x}", text)


def clipped(text: str) -> str:
    """``text`` cut to its first :data:`EXCERPT_CHARS` characters, then "… (N characters)" (``text`` when shorter)."""
    return text[:EXCERPT_CHARS] + _cut(text)


def quoted(text: str) -> str:
    """A value from outside as an error message quotes it: without a URL's credentials, quoted and escaped as
    ``repr`` does (control characters, bytes that were not UTF-8), and at most :data:`EXCERPT_CHARS` characters of
    it, then "… (N characters)". A short value reads as ``repr`` reads it.

    The credentials go before the cut: a cut between a password and its "@" would leave the password unrecognized.

    Example:
        >>> quoted("a" * 300)[-20:]
        "a'… (300 characters)"
    """
    public = without_credentials(text)
    return repr(public[:EXCERPT_CHARS]) + _cut(public)


def _cut(text: str) -> str:
    return f"… ({len(text):,} characters)" if len(text) > EXCERPT_CHARS else ""


def first_problem(exc: ValidationError) -> str:
    """The first validation problem as 'field: reason' (one line, without the input, which may be huge or hostile)."""
    first = exc.errors(include_input=False, include_url=False)[0]
    at = ".".join(str(part) for part in first["loc"]) or "the document"
    more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    return f"{at}: {' '.join(first['msg'].split())}{more}"
