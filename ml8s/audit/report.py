"""Verification reports: a list of named checks, each PASS, FAIL or SKIP with its reason.

The same report type serves ``ml8s verify`` (a run in its store) and ``ml8s audit verify`` (a bundle,
offline). A report PASSes only when every check PASSes: SKIP means "not checked" (a file it needs is
missing or unreadable, and the check owning that file FAILs), so a SKIP never hides a FAIL and never
counts as a PASS. Reports carry no timestamps: the same store gives the same report, byte for byte.
"""

from __future__ import annotations

import dataclasses
import enum
import html
import unicodedata
from collections.abc import Callable, Iterable, Sequence
from typing import Generic, TypeVar

from pydantic import BaseModel, ConfigDict

from ml8s.contract import Unavailable
from ml8s.errors import Ml8sError


class Status(enum.StrEnum):
    PASS = "PASS"
    FAIL = "FAIL"
    SKIP = "SKIP"


class CheckResult(BaseModel):
    """One check: its name (stable, used by tests and docs/audits.md), verdict, reason and details."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    status: Status
    reason: str
    details: tuple[str, ...] = ()


class Report(BaseModel):
    """The outcome of a verification. ``subject`` is the run id; ``location`` the ARTIFACT_ROOT or bundle."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: str
    subject: str
    location: str
    status: Status
    checks: tuple[CheckResult, ...]

    @property
    def passed(self) -> bool:
        return self.status is Status.PASS

    def failed(self) -> tuple[str, ...]:
        """Names of the checks that FAILed."""
        return tuple(c.name for c in self.checks if c.status is Status.FAIL)

    def check(self, name: str) -> CheckResult:
        return next(c for c in self.checks if c.name == name)


def passed(name: str, reason: str, details: Iterable[str] = ()) -> CheckResult:
    return CheckResult(name=name, status=Status.PASS, reason=reason, details=tuple(details))


def failed(name: str, problems: Sequence[str], details: Iterable[str] = ()) -> CheckResult:
    """A FAIL whose reason is the first problem; every problem is listed in the details."""
    extra = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    return CheckResult(
        name=name, status=Status.FAIL, reason=problems[0] + extra, details=(*problems[1:], *tuple(details))
    )


def verdict(name: str, problems: Sequence[str], ok: str, details: Iterable[str] = ()) -> CheckResult:
    """FAIL with the problems found, or PASS with ``ok``."""
    return failed(name, problems, details) if problems else passed(name, ok, details)


S = TypeVar("S")


@dataclasses.dataclass(frozen=True)
class Check(Generic[S]):
    """A named check over a subject ``S`` (a run in its store, or an opened bundle).

    The verifiers take a tuple of these, so adding a check (e.g. the model chain's) is one more entry.
    """

    name: str
    run: Callable[[S], CheckResult]


def run_checks(checks: Sequence[Check[S]], subject: S) -> tuple[CheckResult, ...]:
    """Run every check; one that cannot run is SKIP, one that raises an ml8s error is FAIL with it."""
    results: list[CheckResult] = []
    for check in checks:
        try:
            result = check.run(subject)
        except Unavailable as exc:
            result = CheckResult(name=check.name, status=Status.SKIP, reason=f"not checked: {exc}")
        except Ml8sError as exc:
            result = CheckResult(name=check.name, status=Status.FAIL, reason=str(exc))
        results.append(result.model_copy(update={"name": check.name}))
    return tuple(results)


def make_report(kind: str, subject: str, location: str, results: tuple[CheckResult, ...]) -> Report:
    ok = bool(results) and all(r.status is Status.PASS for r in results)
    return Report(
        kind=kind, subject=subject, location=location, status=Status.PASS if ok else Status.FAIL, checks=results
    )


def render_text(report: Report) -> str:
    """The report for a terminal: one line per check, details indented, the verdict last."""
    width = max((len(c.name) for c in report.checks), default=0)
    lines = [f"ml8s {report.kind} {report.subject}: {_one_line(report.location)}"]
    for c in report.checks:
        lines.append(f"{c.status.value:<4}  {c.name:<{width}}  {_one_line(c.reason)}")
        lines.extend(f"{'':<4}  {'':<{width}}    - {_one_line(d)}" for d in c.details)
    bad, total = report.failed(), len(report.checks)
    if report.passed:
        lines.append(f"RESULT: PASS ({total} checks)")
    else:
        lines.append(f"RESULT: FAIL ({len(bad)} of {total} checks failed: {', '.join(bad) or 'none ran'})")
    return "\n".join(lines) + "\n"


def _one_line(text: str) -> str:
    """``text`` with its control characters escaped: a name from a bundle or a store (a member, a stray file) that
    held a newline printed lines of its own, such as a forged ``PASS`` line or ``RESULT: PASS``, and an escape
    sequence reached the terminal. U+2028 and U+2029 (categories Zl, Zp) break a line as a newline does, where a
    terminal or log viewer honours them."""
    return "".join(c if not _breaks(c) else c.encode("unicode_escape").decode("ascii") for c in text)


def _breaks(c: str) -> bool:
    return unicodedata.category(c)[0] == "C" or c in "\u2028\u2029"


_COLOURS = {Status.PASS: "#1a7f37", Status.FAIL: "#cf222e", Status.SKIP: "#9a6700"}


def render_html(report: Report) -> str:
    """The report as an HTML table (the Flyte Deck of ``workflows/verify.py``); every value escaped."""
    rows = "".join(
        f"<tr><td><b style='color:{_COLOURS[c.status]}'>{c.status.value}</b></td><td><code>{html.escape(c.name)}"
        f"</code></td><td>{html.escape(c.reason)}{_details(c.details)}</td></tr>"
        for c in report.checks
    )
    return (
        f"<h2>ml8s {html.escape(report.kind)} {html.escape(report.subject)}: "
        f"<span style='color:{_COLOURS[report.status]}'>{report.status.value}</span></h2>"
        f"<p><code>{html.escape(report.location)}</code></p>"
        "<table border='1' cellpadding='4' style='border-collapse:collapse'>"
        f"<thead><tr><th>status</th><th>check</th><th>reason</th></tr></thead><tbody>{rows}</tbody></table>"
    )


def _details(details: tuple[str, ...]) -> str:
    if not details:
        return ""
    return "<ul>" + "".join(f"<li>{html.escape(d)}</li>" for d in details) + "</ul>"
