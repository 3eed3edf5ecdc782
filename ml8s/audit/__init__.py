"""Verification and audit bundles (SPEC §6): ``ml8s verify``, ``ml8s audit bundle``, ``ml8s audit verify``.

Every verifier is a tuple of named checks, each PASS, FAIL or SKIP with its reason; docs/audits.md
explains each check.
"""

from __future__ import annotations

from ml8s.audit.bundle import ENTRY_BUILDERS, BundleEntry, BundleSource, build_bundle, write_bundle
from ml8s.audit.bundle_open import OpenedBundle
from ml8s.audit.bundle_verify import BUNDLE_CHECKS, verify_bundle
from ml8s.audit.report import Check, CheckResult, Report, Status, render_html, render_text
from ml8s.audit.state import RunState
from ml8s.audit.verify import RUN_CHECKS, STORE_CHECKS, verify_run

__all__ = [
    "BUNDLE_CHECKS",
    "ENTRY_BUILDERS",
    "RUN_CHECKS",
    "STORE_CHECKS",
    "BundleEntry",
    "BundleSource",
    "Check",
    "CheckResult",
    "OpenedBundle",
    "Report",
    "RunState",
    "Status",
    "build_bundle",
    "render_html",
    "render_text",
    "verify_bundle",
    "verify_run",
    "write_bundle",
]
